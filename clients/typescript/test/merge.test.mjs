// The merge rule of pending writes (PROTOCOL.md §5.6 strict, §6 step 5 lenient replay).
import { test } from "node:test";
import assert from "node:assert/strict";
import { applyLenient, applyStrict } from "deltasnap/protocol";
import { pushBody } from "deltasnap/internal";


const AD = '{"id":"AD","name":"Andorra","pop":77000}';

test("put replaces or creates, with the id added and canonical order", () => {
  assert.equal(applyStrict({ op: "put", id: "AD", value: '{"name":"X"}' }, AD), '{"id":"AD","name":"X"}');
  assert.equal(applyStrict({ op: "put", id: "XX", value: '{"z":1,"a":2}' }, null), '{"a":2,"id":"XX","z":1}');
});

test("patch merges top-level fields, null removes, nested objects replace whole", () => {
  assert.equal(applyStrict({ op: "patch", id: "AD", value: '{"capital":"Andorra la Vella","pop":null}' }, AD), '{"capital":"Andorra la Vella","id":"AD","name":"Andorra"}');
  assert.equal(applyStrict({ op: "patch", id: "r", value: '{"o":{"b":2}}' }, '{"id":"r","o":{"a":1}}'), '{"id":"r","o":{"b":2}}');
});

test("insert is create-only, patch needs a record, delete always works", () => {
  assert.throws(() => applyStrict({ op: "insert", id: "AD", value: "{}" }, AD), { code: "exists" });
  assert.equal(applyStrict({ op: "insert", id: "XX", value: '{"n":1}' }, null), '{"id":"XX","n":1}');
  assert.throws(() => applyStrict({ op: "patch", id: "QQ", value: '{"n":1}' }, null), { code: "not_found" });
  assert.equal(applyStrict({ op: "delete", id: "AD", value: null }, AD), null);
  assert.equal(applyStrict({ op: "delete", id: "QQ", value: null }, null), null);
});

test("values the server refuses are refused locally with the server's codes", () => {
  assert.throws(() => applyStrict({ op: "put", id: "AD", value: '{"hidden":false}' }, null), { code: "reserved_field" });
  assert.throws(() => applyStrict({ op: "put", id: "AD", value: '{"id":"AE"}' }, null), { code: "id_mismatch" });
  assert.throws(() => applyStrict({ op: "put", id: "AD", value: "[1]" }, null), { code: "invalid_record" });
  assert.throws(() => applyStrict({ op: "put", id: "", value: "{}" }, null), { code: "invalid_mutation" });
  assert.throws(() => applyStrict({ op: "put", id: "a\0b", value: "{}" }, null), { code: "invalid_record" });
  assert.equal(applyStrict({ op: "put", id: "AD", value: '{"id":"AD"}' }, null), '{"id":"AD"}');
});

test("the overlay replays leniently: insert as put, patch of an absent record skipped", () => {
  assert.equal(applyLenient({ op: "insert", id: "AD", value: '{"n":1}' }, AD), '{"id":"AD","n":1}');
  assert.equal(applyLenient({ op: "patch", id: "QQ", value: '{"n":1}' }, null), null);
  // put, delete, put → the last put (the server writes the final value once)
  let v = AD;
  for (const w of [{ op: "put", value: '{"a":1}' }, { op: "delete", value: null }, { op: "put", value: '{"b":2}' }]) v = applyLenient({ id: "AD", ...w }, v);
  assert.equal(v, '{"b":2,"id":"AD"}');
});

test("the push body is §5.5's, with values as canonical text and the base", () => {
  const body = pushBody("c-1", [
    { seq: 7, op: "patch", id: "AD", value: '{"n":1.50}', acked: false, createdAt: 0, base: "e.41" },
    { seq: 8, op: "delete", id: "AQ", value: null, acked: false, createdAt: 0, base: null },
  ]);
  assert.equal(body, '{"client":"c-1","mutations":[{"seq":7,"op":"patch","id":"AD","value":{"n":1.50},"base":"e.41"},{"seq":8,"op":"delete","id":"AQ"}]}');
});
