// The shared query vectors (Tests/Fixtures/query-vectors.json): SQLite's answers to every
// operator against every JSON type and to the orders of mixed types, as the Swift client
// asks it — the browser client's ReplicaQuery must select and order exactly the same ids
// (the Swift tests hold the Swift client to the same file).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { ReplicaQuery } from "deltasnap";

const path = fileURLToPath(new URL("../../../Tests/Fixtures/query-vectors.json", import.meta.url));
const vectors = JSON.parse(readFileSync(path, "utf8"));
const rows = vectors.records.map((text) => { const record = JSON.parse(text); return { id: record.id, record }; });

test("every case of the shared query vectors selects and orders the ids SQLite does", () => {
  assert.ok(vectors.cases.length > 300);
  for (const c of vectors.cases) {
    let query = new ReplicaQuery();
    for (const f of c.filters) query = f.op === "isNull" ? query.whereNull(f.field) : query.filter(f.field, f.op, f.value);
    for (const o of c.orders) query = query.order(o.field, o.descending);
    if (c.limit !== null) query = query.limit(c.limit);
    assert.deepEqual(query.select(rows).map((r) => r.id), c.ids, JSON.stringify(c));
  }
});
