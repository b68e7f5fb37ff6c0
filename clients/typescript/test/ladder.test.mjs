// The fallback ladder, the push answer table and backoff (PROTOCOL.md §6 steps 2–4 and 7).
import { test } from "node:test";
import assert from "node:assert/strict";
import { decideAfterUnusableBody, decidePullAnswer, decidePushAnswer, retryDelay, serverDelay } from "deltasnap/protocol";


test("conditional request: 304 keeps, 200 applies, errors keep the data", () => {
  assert.deepEqual(decidePullAnswer("conditional", 304), { action: "not-modified" });
  assert.deepEqual(decidePullAnswer("conditional", 200), { action: "apply" });
  for (const s of [500, 503, 408, 429, null]) assert.equal(decidePullAnswer("conditional", s).retryable, true, String(s));
  for (const s of [400, 401, 403, 404]) {
    const d = decidePullAnswer("conditional", s);
    assert.equal(d.action, "keep");
    assert.equal(d.retryable, false, String(s));
  }
});

test("an unusable body: one full fetch, then keep the data (never loop)", () => {
  assert.equal(decideAfterUnusableBody("conditional"), "full-fetch");
  assert.equal(decideAfterUnusableBody("full"), "keep");
  assert.equal(decidePullAnswer("full", 304).action, "keep");
});

test("push answers", () => {
  assert.equal(decidePushAnswer(200, null, 3), "settle");
  assert.equal(decidePushAnswer(413, "body_too_large", 4), "split");
  assert.equal(decidePushAnswer(400, "invalid_batch", 4), "split");
  assert.equal(decidePushAnswer(400, "invalid_batch", 1), "refuse-all");
  assert.equal(decidePushAnswer(413, "body_too_large", 1), "refuse-all");
  for (const s of [401, 408, 429, 500, 503, null]) assert.equal(decidePushAnswer(s, "x", 2), "retry-later", String(s));
  assert.equal(decidePushAnswer(404, "not_found", 2), "settle-deletes");
  assert.equal(decidePushAnswer(410, null, 2), "settle-deletes");
  assert.equal(decidePushAnswer(403, "forbidden", 2), "refuse-all");
  assert.equal(decidePushAnswer(403, "writes_disabled", 2), "retry-later");
  assert.equal(decidePushAnswer(400, "unreadable_body", 2), "retry-later");
  assert.equal(decidePushAnswer(403, null, 2), "retry-later", "a proxy's page");
});

test("backoff doubles from 5 s to 1 h with jitter, never below what the server asked", () => {
  assert.equal(retryDelay(1, null, 1), 5);
  assert.equal(retryDelay(1, null, 0), 2.5);
  assert.equal(retryDelay(3, null, 1), 20);
  assert.equal(retryDelay(40, null, 1), 3600);
  assert.equal(retryDelay(1, 120, 0.5), 120);
});

test("Retry-After (seconds or date) and Backoff", () => {
  const now = Date.parse("Wed, 25 Nov 2026 03:00:00 GMT");
  assert.equal(serverDelay("30", null, now), 30);
  assert.equal(serverDelay(null, "45", now), 45);
  assert.equal(serverDelay("10", "45", now), 45);
  assert.equal(serverDelay("Wed, 25 Nov 2026 03:01:00 GMT", null, now), 60);
  assert.equal(serverDelay("soon", null, now), null);
  assert.equal(serverDelay(null, null, now), null);
});
