import { verifyBody } from "./apply.js";
import { parseBody } from "../protocol/body.js";
import { BundleError, DeltaSnapError } from "../protocol/errors.js";
import { parseSignedIndex, TrustedKey, verifySignedIndex } from "../protocol/signed-index.js";
import { EMPTY_STATE, ReplicaStore, StateMovedError } from "./store.js";

/**
 * First start (PROTOCOL.md §6 step 1): loads the bundled snapshot — a gzip full body the
 * app serves with its static files — verifies its count and checksum (and, with trusted
 * keys, its signed `NAME.index`; expiry not checked, the app shipped it) and commits it
 * with its validators in one transaction. Returns the number of records, or `null` when
 * another tab loaded it first. Throws `BundleError`.
 */
export async function loadBundledSnapshot(
  store: ReplicaStore, collection: string, snapshotURL: string, options: { trustedKeys: TrustedKey[]; indexURL?: string; fetch: typeof fetch },
): Promise<number | null> {
  const text = await fetchText(options.fetch, snapshotURL, true);
  let expected;
  let indexState = {};
  if (options.trustedKeys.length) {
    if (!options.indexURL) throw new BundleError("with trusted keys, the bundled snapshot needs its signed index (bundledIndex: the NAME.index `deltasnap bake --signing-key` wrote)");
    const index = parseSignedIndex(await fetchText(options.fetch, options.indexURL, false));
    try {
      await verifySignedIndex(index, options.trustedKeys, null, null);
    } catch (error) {
      throw new BundleError(`the bundled index does not verify: ${(error as Error).message}`);
    }
    expected = index.entries.get(collection);
    if (!expected) throw new BundleError(`the bundled index does not list "${collection}"`);
    indexState = { indexSequence: index.sequence.toString(), indexExpires: Number(index.expires) };
  }
  try {
    const body = parseBody(text, collection);
    const verified = await verifyBody(body, EMPTY_STATE, store, collection, { expectFull: true, expected, maintainDigest: options.trustedKeys.length > 0 });
    verified.prepared.state = { ...verified.prepared.state, ...indexState };
    await store.commitApply(verified.prepared, null);
    return verified.count;
  } catch (error) {
    if (error instanceof StateMovedError) return null;
    if (error instanceof DeltaSnapError && !(error instanceof BundleError)) throw new BundleError(`the bundled snapshot ${snapshotURL} is unusable: ${error.message}`);
    throw error;
  }
}

async function fetchText(fetcher: typeof fetch, url: string, mayBeGzip: boolean): Promise<string> {
  let response: Response;
  try {
    response = await fetcher(url);
  } catch (error) {
    throw new BundleError(`cannot load the bundled file ${url}: ${(error as Error).message}`);
  }
  if (!response.ok) throw new BundleError(`cannot load the bundled file ${url}: status ${response.status}`);
  let bytes = new Uint8Array(await response.arrayBuffer());
  // A static server may or may not have declared it Content-Encoding: gzip: look at the bytes.
  if (mayBeGzip && bytes[0] === 0x1f && bytes[1] === 0x8b) bytes = await gunzip(bytes);
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new BundleError(`the bundled file ${url} is not UTF-8`);
  }
}

/** Decompresses gzip with the platform's DecompressionStream (browsers, node ≥ 18). */
export async function gunzip(bytes: Uint8Array): Promise<Uint8Array> {
  const Stream = (globalThis as unknown as { DecompressionStream?: new (format: string) => TransformStream<Uint8Array, Uint8Array> }).DecompressionStream;
  if (!Stream) throw new BundleError("this browser has no DecompressionStream: serve the snapshot uncompressed or with Content-Encoding: gzip");
  try {
    const stream = new Blob([bytes]).stream().pipeThrough(new Stream("gzip"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  } catch (error) {
    throw new BundleError(`the bundled snapshot is not valid gzip: ${(error as Error).message}`);
  }
}
