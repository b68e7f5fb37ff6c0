// The browser's HTTP cache and private data (issue 29, item 3): a request that carries the
// bearer token is `cache: "no-store"`, so the browser neither answers it from its cache nor
// keeps the answer; public requests keep their cache modes (the shared-cache design).
import { test } from "node:test";
import assert from "node:assert/strict";
import { vectors } from "./fixtures.mjs";
import { DeltaSnapView } from "deltasnap";
import { DEFAULT_RETRY_POLICY, TrustedKey } from "deltasnap/protocol";
import { MemoryStore, pull, requestInit } from "deltasnap/internal";


test("requestInit: a tokened request is no-store whatever the public mode; a public one keeps it", () => {
  for (const publicCache of ["default", "no-cache", "reload", "no-store"]) {
    const init = requestInit("T0K", publicCache, { headers: { "If-None-Match": '"e"' } });
    assert.equal(init.cache, "no-store", publicCache);
    assert.deepEqual(init.headers, { "If-None-Match": '"e"', Authorization: "Bearer T0K" });
    const open = requestInit(null, publicCache, { headers: { "If-None-Match": '"e"' } });
    assert.equal(open.cache, publicCache);
    assert.deepEqual(open.headers, { "If-None-Match": '"e"' }, "no Authorization without a token");
  }
  assert.equal(requestInit("", "default").cache, "default", "an empty token is no token");
  const post = requestInit("T0K", "no-store", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
  assert.deepEqual([post.method, post.body, post.cache, post.headers.Authorization], ["POST", "{}", "no-store", "Bearer T0K"]);
  const caller = { "X-A": "1" };
  requestInit("T0K", "default", { headers: caller });
  assert.deepEqual(caller, { "X-A": "1" }, "the caller's headers are not changed");
});

/** A fetch that records each request's URL and init and answers from `answer(url)`. */
function recordingFetch(answer) {
  const seen = [];
  const fetcher = async (url, init) => {
    seen.push({ url, cache: init.cache, authorization: init.headers?.Authorization ?? null });
    return answer(url);
  };
  return { seen, fetcher };
}

function context(fetcher, token, extra = {}) {
  return {
    store: new MemoryStore(), collection: "one0", collectionURL: "https://data.test/v1/collections/one0", serverURL: "https://data.test",
    trustedKeys: [], accessToken: async () => token, fetch: fetcher, timeoutMs: 5000,
    retryPolicy: DEFAULT_RETRY_POLICY, now: () => Date.now(), ...extra,
  };
}

test("a pull with a token asks for the collection, the index and the token-named body with no-store", async () => {
  const document = vectors.signedIndex.documents[1];
  const expires = Number(JSON.parse(document).index.expires);
  const key = await TrustedKey.parse(vectors.signedIndex.trustedKey);
  for (const token of ["T0K", null]) {
    // Unsigned: the collection URL.
    const plain = recordingFetch(() => new Response("", { status: 503 }));
    assert.equal((await pull(context(plain.fetcher, token), null)).kind, "failed");
    // Signed (§8.4): the index, then the snapshot URL its entry names.
    const signed = recordingFetch((url) => (url.endsWith("/v1/index") ? new Response(document, { status: 200 }) : new Response("", { status: 503 })));
    const outcome = await pull(context(signed.fetcher, token, { trustedKeys: [key], now: () => (expires - 60) * 1000 }), null);
    assert.equal(outcome.kind, "failed", JSON.stringify(outcome));
    const seen = [...plain.seen, ...signed.seen];
    assert.deepEqual(seen.map((r) => r.url), [
      "https://data.test/v1/collections/one0", "https://data.test/v1/index", `https://data.test/v1/collections/one0/snapshots/${JSON.parse(document).index.collections.one0.token}`,
    ]);
    if (token) {
      assert.deepEqual(seen.map((r) => [r.cache, r.authorization]), Array(3).fill(["no-store", "Bearer T0K"]));
    } else {
      // Public data, as before: the poll is no-store, the index and the immutable body use the cache.
      assert.deepEqual(seen.map((r) => [r.cache, r.authorization]), [["no-store", null], ["default", null], ["default", null]]);
    }
  }
});

test("a view asks for the user's index with no-store", async () => {
  const encode = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  const jwt = `${encode({ alg: "HS256" })}.${encode({ sub: "alice" })}.sig`;
  const { seen, fetcher } = recordingFetch(() => new Response("", { status: 503 }));
  const view = await DeltaSnapView.open({ accessToken: jwt, serverURL: "https://data.test", fetch: fetcher });
  const report = await view.sync();
  assert.equal(report.index.kind, "failed");
  assert.deepEqual(seen, [{ url: "https://data.test/v1/index", cache: "no-store", authorization: `Bearer ${jwt}` }]);
});
