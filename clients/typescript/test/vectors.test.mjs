// Protocol test vectors: canonical JSON, XXH64, the state checksum, ChaCha20, LtHash16 and
// signed index verification, against values the Swift binary produced.
import { test } from "node:test";
import assert from "node:assert/strict";
import { vectors } from "./fixtures.mjs";
import { TrustError } from "deltasnap";
import { SHA256Stream, StateChecksum, StateDigest, TrustedKey, canonicalRecord, canonicalize, chacha20Keystream, parseBody, parseSignedIndex, recordLanes, referencesIn, sha256OfBlob, verifySignedIndex, xxh64 } from "deltasnap/protocol";


const utf8 = (s) => new TextEncoder().encode(s);
const hex = (bytes) => [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");

test("canonical JSON matches the Swift writer (deltasnap export)", () => {
  for (const { input, canonical } of vectors.canonicalJSON.valid) assert.equal(canonicalRecord(input), canonical, input);
});

test("canonical JSON is a fixed point", () => {
  for (const { canonical } of vectors.canonicalJSON.valid) assert.equal(canonicalize(canonical), canonical);
});

test("invalid JSON is refused", () => {
  for (const text of vectors.canonicalJSON.invalid) assert.throws(() => canonicalize(text), { code: "invalid_json" }, text);
});

test("XXH64 matches the reference and the server's one-record checksums", () => {
  for (const v of vectors.xxh64) {
    const bytes = v.bytesMod256 !== undefined ? Uint8Array.from({ length: v.bytesMod256 }, (_, i) => i % 256) : utf8(v.utf8);
    assert.equal(xxh64(bytes).toString(16).padStart(16, "0"), v.xxh64, JSON.stringify(v.utf8 ?? v.bytesMod256));
  }
});

test("state checksum of a server state equals its body's", () => {
  for (const v of vectors.stateChecksum) {
    const sum = new StateChecksum();
    for (const line of v.records) sum.add(canonicalize(line.replace(/,$/, "")));
    assert.equal(sum.hex, v.checksum);
  }
});

test("state checksum is order-independent and reversible", () => {
  const records = Array.from({ length: 40 }, (_, i) => `{"id":"r${i}","v":${i * 7}}`);
  const a = new StateChecksum();
  records.forEach((r) => a.add(r));
  const b = new StateChecksum();
  [...records].reverse().forEach((r) => b.add(r));
  assert.equal(a.hex, b.hex);
  records.forEach((r) => a.remove(r));
  assert.equal(a.hex, "0000000000000000");
});

test("ChaCha20 keystream matches RFC 8439 §2.4.2", () => {
  const key = Uint8Array.from({ length: 32 }, (_, i) => i);
  const nonce = Uint8Array.from([0, 0, 0, 0, 0, 0, 0, 0x4a, 0, 0, 0, 0]);
  const plaintext = utf8("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.");
  const stream = chacha20Keystream(key, nonce, 1, plaintext.length);
  const cipher = plaintext.map((b, i) => b ^ stream[i]);
  assert.equal(hex(cipher.slice(0, 16)), "6e2e359a2568f98041ba0728dd0d6981");
  assert.equal(hex(cipher.slice(-2)), "874d");
});

test("LtHash16 matches the protocol's example (§8.2)", async () => {
  const v = vectors.ltHash16.protocolExample;
  const lanes = await recordLanes(v.collection, "AD", v.records[0]);
  const digest = new StateDigest();
  digest.addLanes(lanes, 1);
  assert.equal(hex(digest.bytes().slice(0, 8)), v.laneBytesPrefix);
  assert.equal(await digest.fingerprint(), v.fingerprint);
  assert.equal(await new StateDigest().fingerprint(), vectors.ltHash16.empty);
});

test("LtHash16 of server states equals the digests the server signed", async () => {
  for (const v of vectors.ltHash16.fromServer) {
    const body = parseBody(vectors.bodies[v.body], v.collection);
    const digest = new StateDigest();
    for (const r of body.records) await digest.add(v.collection, r.id, r.canonical);
    assert.equal(await digest.fingerprint(), v.fingerprint, v.body);
  }
});

test("LtHash16 is maintained incrementally", async () => {
  const digest = new StateDigest();
  await digest.add("c", "a", '{"id":"a"}');
  await digest.add("c", "b", '{"id":"b"}');
  await digest.remove("c", "a", '{"id":"a"}');
  const only = new StateDigest();
  await only.add("c", "b", '{"id":"b"}');
  assert.equal(await digest.fingerprint(), await only.fingerprint());
});

test("the server's signed indexes verify with the pinned key", async () => {
  const key = await TrustedKey.parse(vectors.signedIndex.trustedKey);
  for (const document of vectors.signedIndex.documents) {
    const index = parseSignedIndex(document);
    assert.ok(index.entries.has("signatures"), "lists a collection named signatures");
    await verifySignedIndex(index, [key], null, null);
  }
});

test("an altered, unsigned, replayed or expired index is refused", async () => {
  const key = await TrustedKey.parse(vectors.signedIndex.trustedKey);
  const [older, newer] = vectors.signedIndex.documents.map(parseSignedIndex);
  const document = vectors.signedIndex.documents[1];
  const forged = document.replace(/"count":(\d+)/, (_, n) => `"count":${Number(n) + 1}`);
  await assert.rejects(verifySignedIndex(parseSignedIndex(forged), [key], null, null), { code: "bad_signature" });
  const unsigned = document.replace(/"signatures":\[.*\]/, '"signatures":[]');
  await assert.rejects(verifySignedIndex(parseSignedIndex(unsigned), [key], null, null), { code: "untrusted" });
  const other = await TrustedKey.parse("ed25519-public:" + Buffer.alloc(32, 7).toString("base64"));
  await assert.rejects(verifySignedIndex(newer, [other], null, null), { code: "untrusted" });
  await assert.rejects(verifySignedIndex(older, [key], null, newer.sequence + 1n), { code: "replayed" });
  await assert.rejects(verifySignedIndex(newer, [key], Number(newer.expires) + 301, null), { code: "expired" });
  await verifySignedIndex(newer, [key], Number(newer.expires) + 299, newer.sequence);
  assert.ok(newer.sequence >= older.sequence);
});

test("a trusted key line is checked", async () => {
  await assert.rejects(TrustedKey.parse("ed25519-public:AAAA"), TrustError);
  await assert.rejects(TrustedKey.parse("not a key"), { code: "bad_key" });
  const key = await TrustedKey.parse(vectors.signedIndex.trustedKey);
  assert.match(key.id, /^[0-9a-f]{16}$/);
  assert.equal(parseSignedIndex(vectors.signedIndex.documents[0]).signatures[0].key, key.id);
});

test("attachment references and files' SHA-256 match the Swift server's reading (PROTOCOL.md §12.1)", async () => {
  for (const { record, verdict, sha256 } of vectors.attachments.references) {
    if (verdict === "invalid") assert.throws(() => referencesIn(record), { code: "invalid_attachment" }, record);
    else assert.deepEqual(referencesIn(record).map((r) => r.sha256), sha256, record);
  }
  for (const { bytesMod256, sha256 } of vectors.attachments.sha256) {
    const bytes = Uint8Array.from({ length: bytesMod256 }, (_, i) => i % 256);
    assert.equal(new SHA256Stream().update(bytes).hex(), sha256);
    assert.equal(await sha256OfBlob(new Blob([bytes])), sha256);
    assert.equal(await sha256OfBlob(new Blob([bytes]), 0), sha256);
  }
});
