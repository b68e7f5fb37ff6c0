// Body parsing of every kind (PROTOCOL.md §4): full bodies, deltas with tombstones, and the
// bodies a client must refuse.
import { test } from "node:test";
import assert from "node:assert/strict";
import { vectors } from "./fixtures.mjs";
import { StateChecksum, canonicalRecord, parseBody, scanCanonicalRecord } from "deltasnap/protocol";
import { gunzip } from "deltasnap/internal";

const { readFileSync } = await import("node:fs");

const full = vectors.bodies.fullBody;
const delta = vectors.bodies.deltaBody;

test("a full body from the server parses, sorted, and its checksum adds up", () => {
  const body = parseBody(full, "vectors");
  assert.equal(body.kind, "full");
  assert.equal(body.base, undefined);
  assert.equal(body.count, body.records.length);
  const sum = new StateChecksum();
  body.records.forEach((r) => sum.add(r.canonical));
  assert.equal(sum.hex, body.checksum);
});

test("a delta with an upsert, a new record and a tombstone leads to the next full body", () => {
  const before = parseBody(full, "vectors");
  const d = parseBody(delta, "vectors");
  const after = parseBody(vectors.bodies.fullBodyAfterDelta, "vectors");
  assert.equal(d.kind, "delta");
  assert.equal(d.base, before.token);
  assert.equal(d.token, after.token);
  assert.deepEqual(d.records.find((r) => r.id === "empty"), { id: "empty", canonical: null });
  const state = new Map(before.records.map((r) => [r.id, r.canonical]));
  for (const r of d.records) r.canonical === null ? state.delete(r.id) : state.set(r.id, r.canonical);
  assert.deepEqual([...state.entries()].sort(), after.records.map((r) => [r.id, r.canonical]).sort());
  const sum = new StateChecksum();
  state.forEach((c) => sum.add(c));
  assert.equal(sum.hex, d.checksum);
});

test("layout does not matter and unknown members are ignored", () => {
  const reflowed = JSON.stringify({ ...JSON.parse(full), future: { x: 1 } }, null, 2);
  assert.equal(parseBody(reflowed, "vectors").records.length, parseBody(full, "vectors").records.length);
});

test("an empty full body", () => {
  const body = parseBody('{"format":1,"collection":"c","kind":"full","token":"t.1","lastModified":"x","checksum":"0000000000000000","count":0,"records":[\n]}\n', "c");
  assert.equal(body.records.length, 0);
});

test("hidden:false is dropped from a record", () => {
  const body = parseBody('{"format":1,"collection":"c","kind":"delta","base":"t.1","token":"t.2","lastModified":"x","checksum":"0000000000000000","count":1,"records":[{"id":"a","hidden":false}]}', "c");
  assert.equal(body.records[0].canonical, '{"id":"a"}');
});

const broken = {
  "another format": full.replace('"format":1', '"format":2'),
  "another collection": full,
  "a count that differs": full.replace(/"count":\d+/, '"count":1'),
  "bad JSON (truncated)": full.slice(0, full.length - 10),
  "a tombstone in a full body": full.replace('"records":[\n', '"records":[\n{"hidden":true,"id":"0"},\n').replace(/"count":(\d+)/, (_, n) => `"count":${+n + 1}`),
  "a full body out of order": full.replace('"records":[\n', '"records":[\n{"id":"zzz"},\n').replace(/"count":(\d+)/, (_, n) => `"count":${+n + 1}`),
  "a delta holding an id twice": delta.replace('"records":[\n', '"records":[\n{"id":"new"},\n').replace(/"count":(\d+)/, (_, n) => `"count":${+n + 1}`),
  "a delta without base": delta.replace(/"base":"[^"]*",/, ""),
  "a record without id": full.replace('"records":[\n', '"records":[\n{"x":1},\n').replace(/"count":(\d+)/, (_, n) => `"count":${+n + 1}`),
  "a bad checksum text": full.replace(/"checksum":"[0-9a-f]+"/, '"checksum":"XYZ"'),
  "not an object": "[1,2]",
};

for (const [what, text] of Object.entries(broken)) {
  test(`refuses ${what}`, () => {
    assert.throws(() => parseBody(text, what === "another collection" ? "other" : "vectors"), (e) => e.name === "BodyError");
  });
}

test("the bundled snapshot (gzip) decodes, parses and verifies", async () => {
  const bytes = readFileSync(new URL("../../../Snapshots/countries.snapshot", import.meta.url));
  const manifest = JSON.parse(readFileSync(new URL("../../../Snapshots/manifest.json", import.meta.url), "utf8")).collections.countries;
  const body = parseBody(new TextDecoder().decode(await gunzip(new Uint8Array(bytes))), "countries");
  assert.equal(body.count, manifest.count);
  assert.equal(body.token, manifest.token);
  const sum = new StateChecksum();
  body.records.forEach((r) => sum.add(r.canonical));
  assert.equal(sum.hex, manifest.checksum);
});

test("the canonical fast path takes canonical records as they are and nothing else", async () => {
  for (const { input, canonical } of vectors.canonicalJSON.valid) {
    const fast = scanCanonicalRecord(canonical, 0);
    assert.ok(fast, canonical);
    assert.equal(canonical.slice(0, fast.end), canonical);
    const raw = scanCanonicalRecord(input, 0);
    if (raw) assert.equal(input.slice(0, raw.end), canonicalRecord(input), input);
  }
  for (const notCanonical of ['{"b":1,"a":2,"id":"x"}', '{"id":"x","s":"\\/"}', '{"id":"x","s":"\\u000a"}', '{"id":"x","s":"\\u00e9"}', '{"id":"x","hidden":false}',
    '{"id":"x", "a":1}', '{"id":"x","a":01}', '{"a":1}', '{"id":""}', '{"id":"x","o":{"b":1,"a":2}}', '{"id":"x","n":1.}', '{"id":"x","k\\"":1}']) {
    assert.equal(scanCanonicalRecord(notCanonical, 0), null, notCanonical);
  }
});

test("records parsed by the fast path and the full parser agree", () => {
  const fast = parseBody(full, "vectors").records;
  const slow = parseBody(full.replace(/\n\{/g, "\n {"), "vectors").records;  // a space defeats the fast path
  assert.deepEqual(fast, slow);
});
