import { Body } from "../protocol/body.js";
import { StateChecksum } from "../protocol/checksum.js";
import { BodyError } from "../protocol/errors.js";
import { recordLanes, StateDigest } from "../protocol/lthash.js";
import { IndexEntry } from "../protocol/signed-index.js";
import { PreparedApply, ReplicaState, ReplicaStore } from "./store.js";

/** What a verified body changes, ready for `ReplicaStore.commitApply`. */
export interface VerifiedApply {
  prepared: PreparedApply;
  /** Ids a delta changed or hid (empty for a full body: everything may have changed). */
  changedIds: string[];
  count: number;
}

/**
 * Computes the state a body leads to from the state held and verifies it before anything
 * is written (PROTOCOL.md §6 step 2, §8.4 step 4): a delta's `base` is the token held, the
 * maintained checksum equals the body's, and with a signed `expected` entry the token,
 * count and digest fingerprint equal what was signed. Throws `BodyError`.
 *
 * The hashing (WebCrypto is async) happens here, outside the IndexedDB transaction, which
 * would commit early if it awaited anything but its own requests.
 */
export async function verifyBody(
  body: Body, held: ReplicaState, store: ReplicaStore, collection: string,
  options: { expectFull?: boolean; expected?: IndexEntry; maintainDigest: boolean; etag?: string | null; lastModified?: string | null },
): Promise<VerifiedApply> {
  if (options.expectFull && body.kind !== "full") throw new BodyError("wrong_format", "a request without validators was answered with a delta");
  if (options.expected && body.token !== options.expected.token) throw new BodyError("not_signed", `the body leads to ${body.token}, the signed index to ${options.expected.token}`);
  const digest = options.maintainDigest ? await startingDigest(body, held, store, collection) : null;
  let checksum: StateChecksum;
  let count: number;
  const upserts: [string, string][] = [];
  const deletes: string[] = [];
  if (body.kind === "full") {
    checksum = new StateChecksum();
    for (const r of body.records) {
      checksum.add(r.canonical!);
      if (digest) digest.addLanes(await recordLanes(collection, r.id, r.canonical!), 1);
      upserts.push([r.id, r.canonical!]);
    }
    count = body.records.length;
  } else {
    if (body.base !== held.token) throw new BodyError("wrong_base", `the delta applies on ${body.base}, this replica holds ${held.token}`);
    const old = await store.serverRecords(body.records.map((r) => r.id));
    checksum = StateChecksum.fromHex(held.checksum);
    count = held.count;
    for (const r of body.records) {
      const before = old.get(r.id);
      if (before !== undefined) {
        checksum.remove(before);
        count--;
        if (digest) digest.addLanes(await recordLanes(collection, r.id, before), -1);
      }
      if (r.canonical !== null) {
        checksum.add(r.canonical);
        count++;
        if (digest) digest.addLanes(await recordLanes(collection, r.id, r.canonical), 1);
        upserts.push([r.id, r.canonical]);
      } else deletes.push(r.id);
    }
  }
  if (checksum.hex !== body.checksum) throw new BodyError("checksum_mismatch", `the state would have checksum ${checksum.hex}, the body says ${body.checksum}: the body is damaged`);
  if (options.expected) {
    if (count !== options.expected.count) throw new BodyError("count_mismatch", `the state would hold ${count} records, the signed index says ${options.expected.count}`);
    const fingerprint = await digest!.fingerprint();
    if (fingerprint !== options.expected.digest) throw new BodyError("digest_mismatch", "the state digest differs from the signed one: the body was altered or forged");
  }
  return {
    prepared: {
      expectToken: held.token, replaceAll: body.kind === "full", upserts, deletes,
      state: {
        token: body.token, etag: options.etag ?? `"${body.token}"`, lastModified: options.lastModified ?? body.lastModified,
        checksum: checksum.hex, count, lanes: digest ? digest.lanes : null,
      },
    },
    changedIds: body.kind === "delta" ? body.records.map((r) => r.id) : [],
    count,
  };
}

/** The digest a delta starts from: the one held, recomputed once when it was never kept. */
async function startingDigest(body: Body, held: ReplicaState, store: ReplicaStore, collection: string): Promise<StateDigest> {
  if (body.kind === "full" || held.token === null) return new StateDigest();
  if (held.lanes) return new StateDigest(held.lanes);
  const digest = new StateDigest();
  for (const [id, canonical] of await store.allServerRecords()) await digest.add(collection, id, canonical);
  return digest;
}
