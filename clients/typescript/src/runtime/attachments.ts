import { AttachmentReference, isMediaType, isSHA256, referencesIn } from "../protocol/attachment.js";
import { AttachmentError, DeltaSnapError } from "../protocol/errors.js";
import { sha256OfBlob } from "../protocol/sha256.js";
import { AttachmentFiles, storageFailure } from "./attachment-files.js";
import { PendingWrite } from "./store.js";
import { fetchWithTimeout, requestInit } from "./sync-engine.js";
import { DownloadWorker } from "../worker/download-client.js";

/**
 * When a replica downloads the files its records refer to: `eager` (each sync fetches what
 * new records refer to — a user on a plane has it all), `lazy` (only on first use), `none`
 * (records only). As the Swift client's `AttachmentPolicy`.
 */
export type AttachmentPolicy = "eager" | "lazy" | "none";

/** What one sync did with files (as the Swift client's `AttachmentReport`). */
export interface AttachmentReport {
  uploaded: number;
  uploadedBytes: number;
  downloaded: number;
  downloadedBytes: number;
  /** Files left for a sync with a larger byte budget. */
  postponed: number;
  /** Files that could not be had or sent this time, one line each. */
  failures: string[];
}

/** One file the replica knows of: `pending-upload` (attached here), `cached` (here, proven), `remote` (referred to, not here). */
export interface AttachmentStatus {
  sha256: string;
  size: number;
  state: "pending-upload" | "cached" | "remote";
}

/** A transfer's progress, for a progress bar (shown in every tab of the replica). */
export interface AttachmentProgress {
  direction: "upload" | "download";
  sha256: string;
  /** Bytes the server holds (upload) or received so far (download). */
  done: number;
  size: number;
}

/**
 * The replica's file references as the store keeps them (`FileRefs`): what a sync reads
 * instead of the records.
 */
export interface FileIndex {
  /** Hashes whose references came or went since they were settled, with their change numbers. */
  changes(): Promise<Record<string, number>>;
  /** The reference made to `sha256`, or null when nothing refers to it any more. */
  reference(sha256: string): Promise<AttachmentReference | null>;
  /** Every referenced file (O(references)). */
  all(): Promise<Map<string, AttachmentReference>>;
  /** Forgets the changes settled. */
  settled(changes: Record<string, number>): Promise<void>;
}

/** What the transfers need from the replica. */
export interface TransferContext {
  /** The collection's (or partition's) URL: files are at `…/attachments/{sha256}`. */
  collectionURL: string;
  accessToken: () => Promise<string | null>;
  fetch: typeof fetch;
  timeoutMs: number;
  now: () => number;
}

export function emptyAttachmentReport(): AttachmentReport {
  return { uploaded: 0, uploadedBytes: 0, downloaded: 0, downloadedBytes: 0, postponed: 0, failures: [] };
}

/** `attachments: uploaded N (B bytes), downloaded M (C bytes)`, and what waits (the Swift client's line). */
export function attachmentReportLine(report: AttachmentReport): string {
  let line = `attachments: uploaded ${report.uploaded} (${report.uploadedBytes} bytes), downloaded ${report.downloaded} (${report.downloadedBytes} bytes)`;
  if (report.postponed > 0) line += `, ${report.postponed} postponed over the budget`;
  if (report.failures.length) line += `, ${report.failures.length} failed (${report.failures[0]})`;
  return line;
}

/** The draft version spoken (PROTOCOL.md §12.5). */
const INTEROP_VERSION = "9";
/** Bytes per append: a cut (a reload, a closed tab) costs at most this much again. */
export const UPLOAD_PART_BYTES = 8 << 20;
/** How long a cut upload waits before asking where it stands: the server counts a cut part's bytes once it has taken them in. */
const RESUME_DELAY_MS = 250;

/**
 * A replica's files (PROTOCOL.md §12): attaching, uploading (resumable), downloading
 * (resumed with `Range`, proven before visible), the policy, the budget and the cache limit.
 * The replica owns one and calls it from its sync; apps use the replica's methods.
 */
export class ReplicaAttachments {
  policy: AttachmentPolicy;
  /** The most bytes of cached (downloaded or uploaded) files kept; null: no limit. */
  cacheLimit: number | null;
  /** The most bytes of files one sync downloads (the rest is postponed); null: no limit. */
  budget: number | null;
  /** The last sync's report. */
  report: AttachmentReport = emptyAttachmentReport();
  /**
   * The next sync goes over every file reference (from the store's index, never the
   * records): the first sync of this page when files are held, the policy or budget
   * changed, or a file failed or waited. Otherwise a sync looks only at the references
   * that changed ({@link FileIndex.changes}).
   */
  needScan = false;
  /** The first sync of this page has not looked yet (files held from an earlier visit). */
  private looked = false;
  private opened: Promise<AttachmentFiles> | null = null;
  /** The URL of the app's bundled files (`bake --attachments`'s `attachments/`), tried before the server. */
  private readonly bundled: string | null;
  private readonly downloads = new Map<string, Promise<Blob>>();
  private readonly urls = new Map<string, string>();

  constructor(
    private readonly openFiles: () => Promise<AttachmentFiles>,
    private readonly ctx: TransferContext,
    private readonly onProgress: (progress: AttachmentProgress) => void,
    options: { policy?: AttachmentPolicy; cacheLimit?: number | null; budget?: number | null; bundled?: string | null } = {},
  ) {
    this.bundled = options.bundled?.replace(/\/+$/, "") ?? null;
    this.policy = options.policy ?? "eager";
    this.cacheLimit = options.cacheLimit ?? null;
    this.budget = options.budget ?? null;
  }

  /** Whether this replica holds any file: read once, then kept up to date by what this page (and its other tabs) do. */
  private holds: boolean | null = null;

  async holdsFiles(): Promise<boolean> {
    this.holds ??= (await (await this.files()).ledger.all()).length > 0;
    return this.holds;
  }

  /** A file came to this replica (here, or in another tab): syncs look at the records from now on. */
  heardOfFiles(): void {
    this.holds = true;
  }

  /** After a pull that got an answer: the first of this page goes over every reference when files are held (from an earlier visit). */
  async notePull(): Promise<void> {
    if (!this.looked && !this.needScan) this.needScan = await this.holdsFiles();
    this.looked = true;
  }

  /** The files, opened on first use (a replica without attachments never opens them). */
  files(): Promise<AttachmentFiles> {
    this.opened ??= this.openFiles().catch((error) => { this.opened = null; throw error; });
    return this.opened;
  }

  // MARK: - The app's side

  /** Whether this replica holds the bytes of `sha256` (waiting for upload, or downloaded and checked). */
  async hasBytes(sha256: string): Promise<boolean> {
    const entry = await (await this.files()).ledger.get(sha256);
    return entry !== undefined && entry.area !== "partial";
  }

  /** Keeps `blob` as a file waiting for upload and returns its reference. */
  async attach(blob: Blob, type: string): Promise<AttachmentReference> {
    if (!isMediaType(type)) throw new DeltaSnapError("invalid_attachment", `"${type}" is not a media type (type/subtype, visible ASCII, at most 255 characters)`);
    const sha256 = await sha256OfBlob(blob);
    const files = await this.files();
    const held = await files.ledger.get(sha256);
    if (held?.area === "pending") return { sha256, size: blob.size, type };
    await files.store({ sha256, size: blob.size, type, area: "pending", used: this.ctx.now(), uploadLocation: null }, blob);
    this.holds = true;
    return { sha256, size: blob.size, type };
  }

  /**
   * The proven bytes of `reference`: held here, else downloaded now (whatever the policy),
   * resumed after a cut, checked before they are kept. A mismatch is fetched again once
   * from the network (a damaged transfer, or a cache holding other bytes). Throws {@link AttachmentError}.
   */
  async blob(reference: AttachmentReference, budget: number | null = null): Promise<Blob> {
    if (!isSHA256(reference.sha256)) throw new DeltaSnapError("invalid_attachment", `"${reference.sha256}" is not a SHA-256`);
    const files = await this.files();
    const held = await files.read(reference.sha256);
    if (held) {
      const entry = await files.ledger.get(reference.sha256);
      if (entry && entry.used < this.ctx.now() - 60_000) await files.ledger.put({ ...entry, used: this.ctx.now() }).catch(() => undefined);
      return held;
    }
    let running = this.downloads.get(reference.sha256);
    if (!running) {
      running = this.fetchProven(files, reference, budget).finally(() => this.downloads.delete(reference.sha256));
      this.downloads.set(reference.sha256, running);
    }
    return running;
  }

  /** An object URL of the proven bytes (for an `<img>`), the same one each time until the file goes. */
  async objectURL(reference: AttachmentReference): Promise<string> {
    const known = this.urls.get(reference.sha256);
    if (known) return known;
    const blob = await this.blob(reference);
    const url = this.urls.get(reference.sha256) ?? URL.createObjectURL(blob.type === reference.type ? blob : blob.slice(0, blob.size, reference.type));
    this.urls.set(reference.sha256, url);
    return url;
  }

  /** Every file the records refer to and every file waiting for upload, with where it stands. */
  async statuses(referenced: Map<string, AttachmentReference>): Promise<AttachmentStatus[]> {
    const entries = new Map((await (await this.files()).ledger.all()).map((e) => [e.sha256, e]));
    const out = new Map<string, AttachmentStatus>();
    for (const r of referenced.values()) {
      const e = entries.get(r.sha256);
      out.set(r.sha256, { sha256: r.sha256, size: r.size, state: e?.area === "pending" ? "pending-upload" : e?.area === "cached" ? "cached" : "remote" });
    }
    for (const e of entries.values()) if (e.area === "pending" && !out.has(e.sha256)) out.set(e.sha256, { sha256: e.sha256, size: e.size, state: "pending-upload" });
    return [...out.values()].sort((a, b) => (a.sha256 < b.sha256 ? -1 : 1));
  }

  /** Lets go of object URLs (the replica closes). */
  close(): void {
    for (const url of this.urls.values()) URL.revokeObjectURL(url);
    this.urls.clear();
  }

  // MARK: - The sync's side

  /**
   * Uploads the files `batch`'s writes refer to that wait for upload, before the batch is
   * pushed. Returns why it stopped when a later try can help (the batch then waits); a
   * file the server refuses for good lets the batch go (the server refuses its write,
   * `missing_attachment`).
   */
  async uploadFor(batch: PendingWrite[]): Promise<string | null> {
    const needed = new Set<string>();
    for (const w of batch) {
      if (w.value === null || !w.value.includes('"$attachment"')) continue;
      let references: AttachmentReference[] = [];
      try { references = referencesIn(w.value); } catch { continue; }
      for (const r of references) needed.add(r.sha256);
    }
    if (needed.size === 0) return null;
    const files = await this.files();
    for (const sha256 of [...needed].sort()) {
      if ((await files.ledger.get(sha256))?.area !== "pending") continue;
      try {
        await this.uploadResuming(files, sha256);
      } catch (error) {
        const why = (error as Error).message;
        this.report.failures.push(why);
        if (!(error instanceof AttachmentError) || error.code !== "attachment_refused") return `attachment ${sha256} not uploaded: ${why}`;
      }
    }
    return null;
  }

  /**
   * After a pull: downloads what the records refer to (`eager`, within the budget), then
   * lets go of files no record refers to and keeps the cache within its limit. O(changes):
   * it reads the references that came or went (the store keeps them as records are
   * written), never the records; every reference only when {@link needScan}.
   */
  async settle(index: FileIndex): Promise<void> {
    const changes = await index.changes();
    const everything = this.needScan;
    if (!everything && Object.keys(changes).length === 0) return;
    let referenced = new Map<string, AttachmentReference>();
    const released: string[] = [];
    if (everything) referenced = await index.all();
    else {
      for (const sha256 of Object.keys(changes).sort()) {
        const reference = await index.reference(sha256);
        if (reference) referenced.set(sha256, reference);
        else released.push(sha256);
      }
    }
    if (referenced.size === 0 && released.length === 0 && this.opened === null) {
      await index.settled(changes);
      this.needScan = false;
      return;
    }
    const files = await this.files();
    const unsettled = new Set<string>();
    let fetched = false;
    if (this.policy === "eager") {
      let budget = this.budget;
      for (const r of [...referenced.values()].sort((a, b) => (a.sha256 < b.sha256 ? -1 : 1))) {
        if (await files.read(r.sha256)) continue;
        const before = this.report.downloadedBytes;
        try {
          await this.blob(r, budget);
          fetched = true;
          if (budget !== null) budget = Math.max(0, budget - (this.report.downloadedBytes - before));
        } catch (error) {
          unsettled.add(r.sha256);
          if (error instanceof AttachmentError && error.code === "attachment_postponed") this.report.postponed++;
          else this.report.failures.push(`${r.sha256}: ${(error as Error).message}`);
        }
      }
    }
    // What failed or waited stays a change: the next sync tries it again.
    await index.settled(Object.fromEntries(Object.entries(changes).filter(([sha256]) => !unsettled.has(sha256))));
    this.needScan = everything && unsettled.size > 0;
    if (everything) return this.release(referenced);
    for (const sha256 of released) {
      const entry = await files.ledger.get(sha256);
      if (entry && entry.area !== "pending" && !this.downloads.has(sha256)) await this.forget(files, sha256);
    }
    if (fetched) await this.trim(files);
  }

  /** Removes cached files no record refers to, then the least recently used over the limit. Files waiting for upload stay. */
  async release(referenced: Map<string, AttachmentReference>): Promise<void> {
    const files = await this.files();
    const kept = [];
    for (const e of await files.ledger.all()) {
      if (e.area === "pending" || this.downloads.has(e.sha256)) continue;
      if (!referenced.has(e.sha256)) await this.forget(files, e.sha256);
      else if (e.area === "cached") kept.push(e);
    }
    await this.trim(files, kept);
  }

  /** Evicts the least recently used cached files until the cache fits its limit. */
  private async trim(files: AttachmentFiles, cached?: { sha256: string; size: number; used: number }[]): Promise<void> {
    if (this.cacheLimit === null) return;
    const kept = cached ?? (await files.ledger.all()).filter((e) => e.area === "cached" && !this.downloads.has(e.sha256));
    let total = kept.reduce((sum, e) => sum + e.size, 0);
    for (const e of kept.sort((a, b) => a.used - b.used)) {
      if (total <= this.cacheLimit) break;
      await this.forget(files, e.sha256);
      total -= e.size;
    }
  }

  private async forget(files: AttachmentFiles, sha256: string): Promise<void> {
    await files.evict(sha256);
    const url = this.urls.get(sha256);
    if (url) URL.revokeObjectURL(url);
    this.urls.delete(sha256);
  }

  // MARK: - Downloading

  private url(sha256: string): string {
    return `${this.ctx.collectionURL}/attachments/${sha256}`;
  }

  private async fetchProven(files: AttachmentFiles, reference: AttachmentReference, budget: number | null): Promise<Blob> {
    if (this.bundled !== null) {
      // The app's own copy first (static files, or a service worker's cache): checked like any.
      try {
        await this.download(files, reference, null, "default", `${this.bundled}/${reference.sha256}`);
        const blob = await files.read(reference.sha256);
        if (blob) return blob;
      } catch {
        // Not bundled, or not these bytes: from the server.
      }
    }
    // `no-store`: the replica's own copy is the cache; the browser's HTTP cache would keep a
    // second copy of every public file (and could hand back a damaged one).
    try {
      await this.download(files, reference, budget, "no-store");
    } catch (error) {
      if (!(error instanceof AttachmentError) || error.code !== "attachment_mismatch") throw error;
      // Damaged on the way (or by a cache in between): once more, from the start.
      await this.download(files, reference, budget, "no-store");
    }
    const blob = await files.read(reference.sha256);
    if (!blob) throw new AttachmentError("attachment_failed", `attachment ${reference.sha256} went while it was being stored`, reference.sha256);
    return blob;
  }

  /** Downloads into `<sha256>.partial` (resuming with `Range`), proves it, and keeps it as cached. */
  /** `source`: another URL than the server's (the bundle), asked without the token. */
  private async download(files: AttachmentFiles, reference: AttachmentReference, budget: number | null, cache: RequestCache, source: string | null = null): Promise<void> {
    const { sha256, size } = reference;
    const partial = sha256 + ".partial";
    let held = await files.bytes.size(partial);
    if (held > size) {
      await files.bytes.remove(partial);
      held = 0;
    }
    if (budget !== null && size - held > budget) {
      throw new AttachmentError("attachment_postponed", `attachment ${sha256} (${size - held} bytes to fetch) is over this sync's budget of ${budget} bytes`, sha256);
    }
    const headers: Record<string, string> = {};
    if (held > 0) {
      headers.Range = `bytes=${held}-`;
      headers["If-Range"] = `"${sha256}"`;
    }
    try {
      if (!(await files.ledger.get(sha256))) await files.ledger.put({ sha256, size, type: reference.type, area: "partial", used: this.ctx.now() });
    } catch (error) {
      throw storageFailure(error, `storing attachment ${sha256}`);
    }
    const init = requestInit(source === null ? await this.ctx.accessToken() : null, cache, { headers });
    const url = source ?? this.url(sha256);
    const proven = (await this.transferInWorker(files, reference, held, url, init)) ?? (await this.transferInPage(files, reference, held, url, init));
    if (!proven) {
      await files.evict(sha256);
      throw new AttachmentError("attachment_mismatch", `the bytes received for attachment ${sha256} are not the file (another size or SHA-256): refused, nothing kept`, sha256);
    }
    try {
      await files.bytes.move(partial, sha256);
      await files.ledger.put({ sha256, size, type: reference.type, area: "cached", used: this.ctx.now() });
    } catch (error) {
      throw storageFailure(error, `storing attachment ${sha256}`);
    }
    this.report.downloaded++;
    this.holds = true;
    this.onProgress({ direction: "download", sha256, done: size, size });
  }

  /** What an answer other than `200` or the `206` asked for means; throws. */
  private async refuseStatus(files: AttachmentFiles, sha256: string, status: number): Promise<never> {
    if (status === 404) throw new AttachmentError("attachment_unavailable", `attachment ${sha256} is not available to this replica (404: not held, or not readable here)`, sha256);
    if (status === 416) await files.bytes.remove(sha256 + ".partial");
    throw new AttachmentError("attachment_failed", `status ${status} for attachment ${sha256}`, sha256);
  }

  private brokeOff(sha256: string, at: number, size: number): AttachmentError {
    return new AttachmentError("attachment_failed", `the download of attachment ${sha256} broke off at ${at} of ${size} bytes; it resumes there`, sha256);
  }

  /**
   * The transfer in the page's download worker (OPFS only): whether the bytes are the file,
   * or null when there is no worker (the page then transfers itself). Throws {@link AttachmentError}.
   */
  private async transferInWorker(files: AttachmentFiles, reference: AttachmentReference, held: number, url: string, init: RequestInit): Promise<boolean | null> {
    const { sha256, size } = reference;
    const location = files.bytes.opfs;
    const worker = location ? await DownloadWorker.get() : null;
    if (!location || !worker) return null;
    const reply = await worker.run({
      root: location.root, folder: location.folder, key: sha256 + ".partial", url, headers: init.headers as Record<string, string>,
      cache: init.cache ?? "default", held, size, timeoutMs: this.ctx.timeoutMs,
    }, (done) => this.onProgress({ direction: "download", sha256, done, size }));
    switch (reply.kind) {
      case "unsupported": return null;
      case "no-answer": throw new AttachmentError("attachment_failed", `no answer for attachment ${sha256} (network error or timeout)`, sha256);
      case "status": return this.refuseStatus(files, sha256, reply.status);
      case "failed": throw storageFailure({ name: reply.name, message: reply.message }, `storing attachment ${sha256}`);
      case "cut":
        this.report.downloadedBytes += reply.received;
        throw this.brokeOff(sha256, reply.at, size);
      case "too-long":
        this.report.downloadedBytes += reply.received;
        return false;
      case "done":
        this.report.downloadedBytes += reply.received;
        return reply.size === size && reply.sha256 === sha256;
    }
  }

  /** The transfer in the page: the body piped into the partial file, then hashed. Whether the bytes are the file. */
  private async transferInPage(files: AttachmentFiles, reference: AttachmentReference, held: number, url: string, init: RequestInit): Promise<boolean> {
    const { sha256, size } = reference;
    const partial = sha256 + ".partial";
    const response = await fetchWithTimeout(this.ctx.fetch, url, init, this.ctx.timeoutMs);
    if (!response) throw new AttachmentError("attachment_failed", `no answer for attachment ${sha256} (network error or timeout)`, sha256);
    const append = response.status === 206 && (response.headers.get("Content-Range") ?? "").startsWith(`bytes ${held}-`);
    if (response.status !== 200 && !append) {
      await response.body?.cancel().catch(() => undefined);
      return this.refuseStatus(files, sha256, response.status);
    }
    const start = append ? held : 0;
    let received = 0;
    let writer;
    try {
      writer = await files.bytes.writer(partial, append);
    } catch (error) {
      await response.body?.cancel().catch(() => undefined);
      throw storageFailure(error, `storing attachment ${sha256}`);
    }
    let lastReport = 0;
    let tooLong = false;
    const counter = new TransformStream<Uint8Array, Uint8Array>({
      transform: (chunk, controller) => {
        received += chunk.byteLength;
        // A body longer than the file is no body of it: stop before storing the excess.
        if (start + received > size) {
          tooLong = true;
          return controller.error(new Error("longer than the file"));
        }
        controller.enqueue(chunk);
        if (received - lastReport >= 1 << 20) {
          lastReport = received;
          this.onProgress({ direction: "download", sha256, done: start + received, size });
        }
      },
    });
    let cut: unknown = null;
    try {
      await (response.body ?? new Blob([]).stream()).pipeThrough(counter).pipeTo(writer.stream, { preventAbort: true, preventClose: true });
    } catch (error) {
      cut = error;
    }
    // What arrived is kept (closed), also after a cut: the next try asks for the rest.
    try { await writer.close(); } catch (error) { throw storageFailure(error, `storing attachment ${sha256}`); }
    this.report.downloadedBytes += received;
    if (tooLong) return false;
    if (cut !== null) {
      if ((cut as { name?: string })?.name === "QuotaExceededError") throw storageFailure(cut, `storing attachment ${sha256}`);
      throw this.brokeOff(sha256, start + received, size);
    }
    const blob = await files.bytes.read(partial);
    return blob !== null && blob.size === size && (await sha256OfBlob(blob)) === sha256;
  }

  // MARK: - Uploading (PROTOCOL.md §12.5)

  /**
   * Uploads `sha256`, resumed at once after a cut as long as each attempt moved it on; two
   * attempts in a row without progress leave it to the next sync.
   */
  private async uploadResuming(files: AttachmentFiles, sha256: string): Promise<void> {
    let stalled = 0;
    let seen = 0;
    const progress = { reached: 0, began: null as number | null };
    for (;;) {
      try {
        const size = await this.upload(files, sha256, progress);
        this.report.uploaded++;
        this.report.uploadedBytes += size - (progress.began ?? 0);
        return;
      } catch (error) {
        if (!(error instanceof AttachmentError) || error.code !== "attachment_failed") throw error;
        // A cut part's bytes show in the next attempt's offset: progress is seen one attempt late.
        stalled = progress.reached > seen ? 0 : stalled + 1;
        seen = progress.reached;
        if (stalled >= 2) throw error;
        await new Promise((resolve) => setTimeout(resolve, RESUME_DELAY_MS));
      }
    }
  }

  private async send(url: string, method: string, headers: Record<string, string>, body?: Blob): Promise<Response> {
    // `fetch` never shows a 1xx answer: the upload begins with an empty request and no interop
    // version, so the server sends no `104` (§12.5 step 1) and `Location` comes in the `201`.
    const versioned = method === "POST" ? headers : { "Upload-Draft-Interop-Version": INTEROP_VERSION, ...headers };
    const init = requestInit(await this.ctx.accessToken(), "no-store", { method, headers: versioned, body });
    const response = await fetchWithTimeout(this.ctx.fetch, url, init, this.ctx.timeoutMs);
    if (!response) throw new AttachmentError("attachment_failed", `no answer to ${method} ${url} (network error or timeout)`);
    return response;
  }

  /** One attempt: asks where an earlier upload stands (or begins one), then sends the rest in parts. Returns the size. */
  private async upload(files: AttachmentFiles, sha256: string, progress: { reached: number; began: number | null }): Promise<number> {
    const entry = await files.ledger.get(sha256);
    const file = await files.bytes.read(sha256);
    if (!entry || !file) throw new AttachmentError("attachment_refused", `the file of attachment ${sha256} is gone from this browser's storage`, sha256);
    const size = file.size;
    let offset = 0;
    let location = entry.uploadLocation ?? null;
    if (location) {
      const head = await this.send(location, "HEAD", {});
      if (head.status === 200 || head.status === 204) {
        offset = Number(head.headers.get("Upload-Offset") ?? 0);
        progress.reached = Math.max(progress.reached, offset);
      } else if (head.status === 404) {
        location = null;  // finished, refused or expired: begin again
      } else {
        throw await failure(head, "asking where the upload stands");
      }
    }
    if (!location) {
      const begun = await this.send(this.url(sha256), "POST", { "Upload-Complete": "?0", "Upload-Length": String(size), "Content-Type": "application/octet-stream" }, new Blob([]));
      const at = begun.headers.get("Location");
      if (begun.status !== 201 || !at) throw await failure(begun, "beginning the upload");
      location = new URL(at, this.url(sha256)).href;
      await files.ledger.put({ ...entry, uploadLocation: location });
      offset = Number(begun.headers.get("Upload-Offset") ?? 0);
    }
    progress.began ??= offset;
    this.onProgress({ direction: "upload", sha256, done: offset, size });
    for (;;) {
      const end = Math.min(size, offset + UPLOAD_PART_BYTES);
      const last = end === size;
      const answer = await this.send(location, "PATCH", {
        "Upload-Offset": String(offset), "Upload-Complete": last ? "?1" : "?0", "Content-Type": "application/partial-upload",
      }, file.slice(offset, end));
      const status = answer.status;
      if (last && (status === 200 || status === 201)) {
        await answer.body?.cancel().catch(() => undefined);
        // On the server now: an evictable cached copy, proven (it was hashed when attached).
        await files.ledger.put({ ...entry, area: "cached", uploadLocation: null, used: this.ctx.now() });
        this.onProgress({ direction: "upload", sha256, done: size, size });
        return size;
      }
      if (status === 201 || status === 204 || (status === 409 && answer.headers.has("Upload-Offset"))) {
        await answer.body?.cancel().catch(() => undefined);
        offset = Number(answer.headers.get("Upload-Offset") ?? end);
        progress.reached = Math.max(progress.reached, offset);
        this.onProgress({ direction: "upload", sha256, done: offset, size });
        continue;
      }
      if (status === 409) throw new AttachmentError("attachment_failed", `the upload of ${sha256} is busy (an append cut short is still being taken in)`, sha256);
      if (status === 404) {
        await files.ledger.put({ ...entry, uploadLocation: null });
        throw new AttachmentError("attachment_failed", `the upload of ${sha256} expired; it begins again`, sha256);
      }
      const refused = await failure(answer, `appending at ${offset}`);
      if (refused.message.includes("attachment_mismatch")) {
        // The server received other bytes than the file's and kept nothing: sent again, whole —
        // unless the file here is what is damaged, which no retry mends.
        await files.ledger.put({ ...entry, uploadLocation: null });
        if ((await sha256OfBlob(file)) !== sha256) throw new AttachmentError("attachment_refused", `the file attached here for ${sha256} is damaged`, sha256);
        throw new AttachmentError("attachment_failed", `the server received other bytes than ${sha256}'s; it is sent again`, sha256);
      }
      throw refused;
    }
  }
}

/** An unexpected upload answer: a `4xx` other than `408`/`429` is the server's refusal, anything else is worth trying again. */
async function failure(response: Response, step: string): Promise<AttachmentError> {
  let code = "";
  let message = "";
  try {
    const body = JSON.parse(await response.text());
    code = typeof body?.error === "string" ? ` ${body.error}` : "";
    message = typeof body?.message === "string" ? `: ${body.message}` : "";
  } catch { /* no JSON body */ }
  const why = `status ${response.status} ${step}${code}${message}`;
  const status = response.status;
  return new AttachmentError(status >= 400 && status < 500 && status !== 408 && status !== 429 ? "attachment_refused" : "attachment_failed", why);
}
