// LiveLoop: the pauses of live mode, as the Swift client's (docs/CLIENT.md "Live mode").
import assert from "node:assert/strict";
import { test } from "node:test";
import { LiveLoop } from "deltasnap/internal";

test("changes and timeouts go on at once; waits are clamped to 1–60", () => {
  const loop = new LiveLoop({ wait: 90 });
  assert.equal(loop.wait, 60);
  assert.equal(new LiveLoop({ wait: 0 }).wait, 1);
  assert.equal(loop.pause({ kind: "changed" }, 10), 0);
  assert.equal(loop.pause({ kind: "unchanged" }, 60_000), 0);
});

test("a held request cut part way makes later waits half as long, down to polling", () => {
  const loop = new LiveLoop({ wait: 30, pollInterval: 15 });
  assert.equal(loop.pause({ kind: "failed" }, 10_000), 0);
  assert.equal(loop.wait, 5);
  assert.equal(loop.pause({ kind: "failed" }, 2_500), 0);
  assert.equal(loop.wait, 1);
  assert.equal(loop.pause({ kind: "failed" }, 1_000), 4_000, "held as long as it asked: no cut, a failure");
  const cut = new LiveLoop({ wait: 30, pollInterval: 15 });
  assert.equal(cut.pause({ kind: "failed" }, 1_500), 0);
  assert.equal(cut.wait, null, "a plain poll from now on");
  assert.equal(cut.pause({ kind: "unchanged" }, 20), 15_000);
});

test("failures at once back off, doubling up to the maximum; a success resets it", () => {
  const loop = new LiveLoop({ wait: 30, maximumBackoff: 5 });
  assert.deepEqual([1, 2, 3, 4].map(() => loop.pause({ kind: "failed" }, 5)), [1000, 2000, 4000, 5000]);
  assert.equal(loop.wait, 30, "an error answer is no cut: the wait stays");
  loop.pause({ kind: "changed" }, 5);
  assert.equal(loop.pause({ kind: "failed" }, 5), 1000);
});

test("the server's wait is kept", () => {
  const loop = new LiveLoop();
  assert.equal(loop.pause({ kind: "deferred", until: 10_000 }, 5, 7_000), 3_000);
});

test("run stops when its signal aborts, mid-pause too", async () => {
  const loop = new LiveLoop({ maximumBackoff: 60 });
  const abort = new AbortController();
  let rounds = 0;
  const running = loop.run(async () => { rounds += 1; return { kind: "failed" }; }, abort.signal);
  await new Promise((resolve) => setTimeout(resolve, 50));
  abort.abort();
  await running;
  assert.equal(rounds, 1);
});
