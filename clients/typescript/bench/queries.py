#!/usr/bin/env python3
"""Queries and live queries in headless Chromium against a live `deltasnap serve` (issue 47):

  BIN=.build/release/deltasnap clients/typescript/bench/run.sh queries

(run.sh builds the module and makes the venv). On a replica of 100,000 generated records
(FULL_RECORDS) with two declared indexes (stock, city), in one page, each beside its floor:
  - the full body's sync with both indexes built in its transaction, and a page load (a new
    replica on the database) until its first indexed query answers;
  - `query` against a hand-written IndexedDB index cursor for the same filter, over the same
    records stored a row each with real IndexedDB indexes (the floor), alternating: ~20
    results, and one city's few thousand;
  - a watched indexed query of ~20 results: from the apply's commit to the watcher's call,
    for deltas that move a record into and out of its result;
  - 1,000 observers of distinct records: what an unrelated change costs with them, beside the
    same change with none, and the re-runs it caused (0 expected).
Writes .build/browser-artifacts/bench-queries.json.
"""
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request

from harness import caller, open_page, served_url, stop

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "../../.."))
BIN = os.path.abspath(os.environ.get("BIN", os.path.join(REPO, ".build/release/deltasnap")))
ADMIN = "bench-admin"
FULL = int(os.environ.get("FULL_RECORDS", "100000"))
RUNS = int(os.environ.get("RUNS", "25"))
WATCH_RUNS = int(os.environ.get("WATCH_RUNS", "20"))
OBSERVERS = int(os.environ.get("OBSERVERS", "1000"))


def p90(xs):
    """The 90th percentile (nearest rank) of `xs`."""
    s = sorted(xs)
    return s[max(0, -(-9 * len(s) // 10) - 1)]


def main():
    tmp = tempfile.mkdtemp(prefix="deltasnap-bench-queries-")
    server = driver = None
    try:
        db = os.path.join(tmp, "store.sqlite")
        path = os.path.join(tmp, "big.ndjson")
        with open(path, "w") as f:
            subprocess.run([BIN, "generate", "--count", str(FULL), "--seed", "1"], check=True, stdout=f)
        subprocess.run([BIN, "import", "--db", db, "--collection", "big", "--quiet", path], check=True, capture_output=True)
        static = os.path.join(tmp, "static")
        shutil.copytree(HERE, static, ignore=shutil.ignore_patterns("*.py"))
        shutil.copy(os.path.join(REPO, "clients/typescript/dist/deltasnap.js"), static)
        shutil.copy(os.path.join(REPO, "clients/typescript/dist/download-worker.js"), static)
        out = open(os.path.join(tmp, "serve.out"), "w")
        server = subprocess.Popen([BIN, "serve", "--db", db, "--port", "0", "--write-token", ADMIN, "--static", static, "--log-level", "error"],
                                  stdout=out, stderr=subprocess.STDOUT)
        url = served_url(out.name)
        driver = open_page(tmp, url + "/queries.html", script_timeout=600)
        call = caller(driver)

        def put(record_id, value):
            req = urllib.request.Request(f"{url}/v1/collections/big/records/{record_id}", data=json.dumps(value).encode(), method="PUT",
                                         headers={"Authorization": f"Bearer {ADMIN}"})
            urllib.request.urlopen(req, timeout=10).read()

        opened = call("window.queries.open('big')")
        assert opened["kind"] == "applied" and opened["count"] == FULL, opened
        reload = call("window.queries.reload('big')")
        floor = call("window.queries.buildFloor('big')")
        assert floor["records"] == FULL, floor
        call("window.queries.queryVersusCursor('twenty', null, 3)")   # warm up
        twenty = call(f"window.queries.queryVersusCursor('twenty', null, {RUNS})")
        assert twenty["count"] == twenty["floorCount"], twenty
        city = call(f"window.queries.queryVersusCursor('city', {json.dumps(floor['city'])}, {RUNS})")
        assert city["count"] == city["floorCount"], city

        assert call("window.queries.watchStart()") == 1
        watched = []
        for i in range(WATCH_RUNS):
            # r0000100 + i enters the result (stock 0), then leaves it (stock 9000): one call each.
            for stock in (0, 9000):
                put(f"r{100 + i:07d}", {"name": f"watched {i}", "city": "Nowhere", "stock": stock})
                r = call("window.queries.watchedSync()")
                assert r["called"] and r["calls"] == 1, r
                watched.append(r)
        observers = call(f"window.queries.observers({OBSERVERS}, {RUNS})")

        results = {
            "records": FULL,
            "syncWithTwoIndexesMs": opened["ms"],
            "pageLoadToFirstIndexedQueryMs": reload["ms"],
            "queryTwenty": twenty, "queryCity": {**city, "city": floor["city"]},
            "watcher": {
                "fromCommitMedianMs": statistics.median(w["fromCommitMs"] for w in watched), "fromCommitP90Ms": p90([w["fromCommitMs"] for w in watched]),
                "fromCommitMaxMs": max(w["fromCommitMs"] for w in watched), "fromCommitMs": [w["fromCommitMs"] for w in watched],
                "fromCommitStartMedianMs": statistics.median(w["fromCommitStartMs"] for w in watched),
                "fromSyncMedianMs": statistics.median(w["fromSyncMs"] for w in watched), "changes": len(watched),
            },
            "observers": observers,
            "chromium": driver.capabilities.get("browserVersion"), "runs": RUNS,
        }
        artifacts = os.path.join(REPO, ".build/browser-artifacts")
        os.makedirs(artifacts, exist_ok=True)
        with open(os.path.join(artifacts, "bench-queries.json"), "w") as f:
            json.dump(results, f, indent=1)
        w, o = results["watcher"], observers
        print("| measurement (Chromium, %s records, two declared indexes) | result |\n|---|---|" % f"{FULL:,}")
        print(f"| first sync: full body applied, both indexes built in its transaction | {opened['ms']:.0f} ms |")
        print(f"| a page load (new replica on the database) until its first indexed query answers | {reload['ms']:.1f} ms |")
        print(f"| `query` of {twenty['count']} records (stock < 2, ordered) / hand-written IndexedDB index cursor, same page | {twenty['clientMs']:.2f} ms / {twenty['cursorMs']:.2f} ms = {twenty['ratio']:.2f}× |")
        print(f"| `query` of {city['count']} records (city = {floor['city']}) / index cursor | {city['clientMs']:.1f} ms / {city['cursorMs']:.1f} ms = {city['ratio']:.2f}× |")
        print(f"| watched query of ~20 records: commit → watcher called ({w['changes']} deltas into and out of it) | median {w['fromCommitMedianMs']:.1f} ms, p90 {w['fromCommitP90Ms']:.1f} ms, max {w['fromCommitMaxMs']:.1f} ms (from the commit's start {w['fromCommitStartMedianMs']:.1f} ms; from sync() {w['fromSyncMedianMs']:.1f} ms) |")
        print(f"| {o['observers']} observers of distinct records: an unrelated local write until handled | {o['withMs']:.2f} ms vs {o['withoutMs']:.2f} ms with none: {o['perChangeMs']:.2f} ms per change, {o['reruns']} re-runs; subscribing them {o['subscribeMs']:.0f} ms |")
        print(f"Chromium {results['chromium']}, medians of {RUNS} runs")
    finally:
        stop(driver, server, tmp)


if __name__ == "__main__":
    main()
