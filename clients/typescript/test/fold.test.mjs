// Folding queued writes (PROTOCOL.md §6 step 5a), the rows of the Swift client's WriteCoalescing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { applyStrict, fold } from "deltasnap/protocol";

const w = (op, value = null, id = "r1") => ({ op, id, value });

test("patches merge their fields and keep a removal", () => {
  assert.deepEqual(fold(w("patch", '{"a":null,"c":3}'), w("patch", '{"a":1,"b":2}'), true), w("patch", '{"a":null,"b":2,"c":3}'));
});

test("a patch merges into a put or an insert before it", () => {
  for (const op of ["put", "insert"]) assert.deepEqual(fold(w("patch", '{"a":null,"c":3}'), w(op, '{"a":1,"b":2}'), false), w(op, '{"b":2,"c":3}'), op);
  assert.equal(fold(w("patch", '{"c":3}'), w("insert", '{"a":1}'), true), null, "someone else's record: the insert will be refused");
});

test("a put replaces a put or a patch; not an insert or a delete", () => {
  for (const op of ["put", "patch"]) assert.deepEqual(fold(w("put", '{"b":2}'), w(op, '{"a":1}'), true), w("put", '{"b":2}'));
  assert.equal(fold(w("put", '{"b":2}'), w("insert", '{"a":1}'), true), null);
  assert.equal(fold(w("put", '{"b":2}'), w("delete"), true), null);
});

test("a delete replaces what came before it and cancels an insert never pushed", () => {
  for (const op of ["put", "patch", "delete"]) assert.deepEqual(fold(w("delete"), w(op, op === "delete" ? null : '{"a":1}'), true), w("delete"));
  assert.equal(fold(w("delete"), w("insert", '{"a":1}'), false), "nothing");
  assert.deepEqual(fold(w("delete"), w("insert", '{"a":1}'), true), w("delete"));
});

test("pairs that must stay apart do", () => {
  assert.equal(fold(w("insert", '{"a":1}'), w("delete"), true), null);
  assert.equal(fold(w("patch", '{"a":1}'), w("delete"), true), null);
  assert.equal(fold(w("patch", '{"a":1}', "r2"), w("patch", '{"a":0}'), true), null);
});

test("a folded write leaves the record as the two writes in a row would", () => {
  const serverApply = (m, record) => { try { return applyStrict(m, record); } catch { return record; } };
  const writes = [w("put", '{"a":1,"b":2}'), w("patch", '{"a":null,"c":3}'), w("patch", '{"b":5}'), w("insert", '{"x":1}'), w("delete"), w("put", '{"z":0}')];
  for (const start of [null, '{"id":"r1","a":0}']) {
    for (const earlier of writes) {
      for (const later of writes) {
        const folded = fold(later, earlier, start !== null);
        if (folded === null) continue;
        const twice = serverApply(later, serverApply(earlier, start));
        const once = folded === "nothing" ? start : serverApply(folded, start);
        assert.equal(once, twice, `${earlier.op}+${later.op} on ${start}`);
      }
    }
  }
});
