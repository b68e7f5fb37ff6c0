// Views (PROTOCOL.md §10): partition paths, the JWT subject a view must be for, and the
// `subject` of a signed view.
import { test } from "node:test";
import assert from "node:assert/strict";
import { collectionPath, jwtSubject } from "deltasnap";
import { parseSignedIndex } from "deltasnap/protocol";


test("a partition path is NAME/KEY with the protocol's alphabets", () => {
  assert.deepEqual(collectionPath("countries"), { name: "countries", key: null });
  assert.deepEqual(collectionPath("sets/8271"), { name: "sets", key: "8271" });
  assert.deepEqual(collectionPath("attempts/alice@example.com"), { name: "attempts", key: "alice@example.com" });
  for (const bad of ["", "Sets/1", "sets/", "sets/a/b", "sets/a b", "-x", "sets/" + "k".repeat(129), "a".repeat(65)]) {
    assert.throws(() => collectionPath(bad), (e) => e.code === "bad_collection_name", bad);
  }
});

test("the subject of a JWT, or null", () => {
  const encode = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  assert.equal(jwtSubject(`${encode({ alg: "HS256" })}.${encode({ sub: "alice", exp: 1 })}.sig`), "alice");
  assert.equal(jwtSubject(`${encode({ alg: "HS256" })}.${encode({ sub: "ü-user?" })}.sig`), "ü-user?", "UTF-8, base64url with - and _");
  assert.equal(jwtSubject(`${encode({})}.${encode({ exp: 1 })}.sig`), null);
  assert.equal(jwtSubject("admin-token"), null);
  assert.equal(jwtSubject("a.!!!.c"), null);
});

test("a view's subject is read from the signed object; the public index has none", () => {
  const view = parseSignedIndex('{"index":{"collections":{},"expires":2,"format":1,"issued":1,"sequence":1,"subject":"alice"},"signatures":[]}');
  assert.equal(view.subject, "alice");
  assert.ok(new TextDecoder().decode(view.signedMessage).includes('"subject":"alice"'));
  assert.equal(parseSignedIndex('{"index":{"collections":{},"expires":2,"format":1,"issued":1,"sequence":1},"signatures":[]}').subject, null);
  assert.throws(() => parseSignedIndex('{"index":{"collections":{},"expires":2,"format":1,"issued":1,"sequence":1,"subject":7},"signatures":[]}'));
});
