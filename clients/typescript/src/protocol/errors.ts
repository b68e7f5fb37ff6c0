/**
 * Every error the client throws is a `DeltaSnapError`; its `code` is stable (switch on it),
 * its `message` is for a person and says what to do.
 *
 * ```ts
 * try { await replica.insert("AD", { name: "Andorra" }); }
 * catch (e) { if (e instanceof WriteRefusedError) alert(e.message); }
 * ```
 */
export class DeltaSnapError extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** Text that is not valid JSON, or not in the shape PROTOCOL.md §2 allows. */
export class JSONParseError extends DeltaSnapError {
  constructor(message: string, readonly offset: number) {
    super("invalid_json", `${message} at offset ${offset}`);
  }
}

/**
 * A body that cannot be applied: not a protocol body, the wrong collection or base, or a
 * count/checksum/digest that does not match. The client falls back to a full fetch.
 */
export class BodyError extends DeltaSnapError {
  constructor(code: "unreadable_body" | "wrong_format" | "wrong_collection" | "wrong_base" | "count_mismatch" | "checksum_mismatch" | "digest_mismatch" | "not_signed", message: string) {
    super(code, message);
  }
}

/** A signed index (PROTOCOL.md §8) that must not be trusted; nothing was changed. */
export class TrustError extends DeltaSnapError {
  constructor(code: "bad_key" | "bad_index" | "untrusted" | "bad_signature" | "expired" | "replayed" | "not_listed" | "other_subject" | "no_webcrypto", message: string) {
    super(code, message);
  }
}

/**
 * A local write that can never be accepted (PROTOCOL.md §5.6), refused before it was
 * queued, or a queued write the server refused (then already rolled back).
 */
export class WriteRefusedError extends DeltaSnapError {
  constructor(code: string, message: string, readonly id: string) {
    super(code, message);
  }
}

/** The store failed: IndexedDB (quota, a private window without storage, a blocked upgrade), or a closed or deleted database. */
export class StorageError extends DeltaSnapError {
  constructor(message: string, readonly cause?: unknown) {
    super("storage_error", message);
  }
}

/** The bundled snapshot could not be loaded (missing, corrupt, or unsigned with trusted keys). */
export class BundleError extends DeltaSnapError {
  constructor(message: string) {
    super("bundle_error", message);
  }
}

/**
 * An attachment (PROTOCOL.md §12) that could not be had, kept or sent. `code`:
 * `attachment_mismatch` (the bytes are not what the reference names: nothing was kept),
 * `attachment_unavailable` (the server answers `404`: not held, or not readable by this
 * caller), `attachment_postponed` (over this sync's byte budget), `quota_exceeded` (the
 * browser's storage is full: records and queues are untouched), `attachment_refused` (the
 * server refused the upload for good, e.g. over its size limit), `attachment_failed` (a
 * network or server problem: a later try can succeed).
 */
export class AttachmentError extends DeltaSnapError {
  constructor(
    code: "attachment_mismatch" | "attachment_unavailable" | "attachment_postponed" | "quota_exceeded" | "attachment_refused" | "attachment_failed",
    message: string, readonly sha256: string | null = null,
  ) {
    super(code, message);
  }
}
