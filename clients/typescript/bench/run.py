#!/usr/bin/env python3
"""Benchmarks the browser client in headless Chromium against a live `deltasnap serve`.

  BIN=.build/release/deltasnap clients/typescript/bench/run.sh

(run.sh builds the module and makes the venv). Reports
records/s for a 100,000-record full body apply beside its floor in the same page (the same
body fetched, parsed and written in one IndexedDB transaction, unverified: `full apply: N.NN×
floor`), the time of a sync that applies a 1-record
delta, and a first start from a 10,000-record bundle until the first query answers; writes
them to .build/browser-artifacts/bench.json as well.
"""
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from harness import caller, open_page, served_url, stop

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "../../.."))
BIN = os.path.abspath(os.environ.get("BIN", os.path.join(REPO, ".build/debug/deltasnap")))
ADMIN = "bench-admin"
FULL = int(os.environ.get("FULL_RECORDS", "100000"))
BUNDLE = int(os.environ.get("BUNDLE_RECORDS", "10000"))
RUNS = int(os.environ.get("RUNS", "3"))
FILE_MB = int(os.environ.get("FILE_MB", "100"))


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw).stdout


def main():
    tmp = tempfile.mkdtemp(prefix="deltasnap-bench-")
    server = driver = None
    try:
        db = os.path.join(tmp, "store.sqlite")
        for name, count, seed in (("big", FULL, 1), ("ten", BUNDLE, 2)):
            path = os.path.join(tmp, f"{name}.ndjson")
            with open(path, "w") as f:
                subprocess.run([BIN, "generate", "--count", str(count), "--seed", str(seed)], check=True, stdout=f)
            sh(BIN, "import", "--db", db, "--collection", name, "--quiet", path)
        static = os.path.join(tmp, "static")
        shutil.copytree(HERE, static, ignore=shutil.ignore_patterns("*.py"))
        shutil.copy(os.path.join(REPO, "clients/typescript/dist/deltasnap.js"), static)
        shutil.copy(os.path.join(REPO, "clients/typescript/dist/download-worker.js"), static)
        sh(BIN, "bake", "--db", db, "--collection", "ten", "--out", static)
        out = open(os.path.join(tmp, "serve.out"), "w")
        # As a user starts it: default logging (a request line per answer, into serve.out).
        server = subprocess.Popen([BIN, "serve", "--db", db, "--port", "0", "--write-token", ADMIN, "--static", static], stdout=out, stderr=subprocess.STDOUT)
        url = served_url(out.name, f" (does {BIN} know --static?)")
        driver = open_page(tmp, url + "/", script_timeout=300)
        call = caller(driver)

        # A 100 MiB file a record refers to (public collection `files`).
        blob = os.urandom(FILE_MB << 20)
        sha = hashlib.sha256(blob).hexdigest()
        req = urllib.request.Request(f"{url}/v1/collections/files/attachments/{sha}", data=blob, method="PUT",
                                     headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/octet-stream"})
        ref = json.loads(urllib.request.urlopen(req, timeout=120).read())
        req = urllib.request.Request(f"{url}/v1/collections/files/records/f1", data=json.dumps({"file": ref}).encode(), method="PUT",
                                     headers={"Authorization": f"Bearer {ADMIN}"})
        urllib.request.urlopen(req, timeout=10).read()
        del blob
        plain_file, client_file = [], []
        for run in range(RUNS):
            r = call(f"window.bench.plainFileIntoOPFS('/v1/collections/files/attachments/{sha}')")
            assert r["size"] == FILE_MB << 20, r
            plain_file.append(r["ms"])
            r = call(f"window.bench.attachmentDownload('files', {json.dumps(ref)})")
            assert r["size"] == FILE_MB << 20, r
            client_file.append(r["ms"])

        full, floor, floor_rows, delta, delta_apply, start, phases = [], [], [], [], [], [], []
        for run in range(RUNS):
            # The floors and the client alternate in one page, so all see the same machine.
            r = call("window.bench.floorApply('big', true)")
            assert r["count"] == FULL, r
            floor.append(r["ms"])
            r = call("window.bench.floorApply('big', false)")
            assert r["count"] == FULL, r
            floor_rows.append(r["ms"])
            r = call("window.bench.fullApply('big')")
            assert r["kind"] == "applied" and r["count"] == FULL, r
            full.append(r["ms"])
            phases.append(r["phases"])
            for i in range(5):
                body = json.dumps({"name": f"changed {run}.{i}"}).encode()
                req = urllib.request.Request(f"{url}/v1/collections/big/records/r{i:07d}", data=body, method="PUT", headers={"Authorization": f"Bearer {ADMIN}"})
                urllib.request.urlopen(req, timeout=10).read()
                r = call("window.bench.deltaApply()")
                assert r["kind"] == "applied" and r["changed"] == 1, r
                delta.append(r["ms"])
                delta_apply.append(r["applyMs"])
            r = call(f"window.bench.firstStart('ten', 'ten.snapshot', 'r{BUNDLE // 2:07d}')")
            assert r["found"] and r["count"] == BUNDLE, r
            start.append(r["ms"])
        results = {
            "fullApply": {"records": FULL, "medianMs": statistics.median(full), "recordsPerSecond": round(FULL / (statistics.median(full) / 1000)),
                          "phasesMs": {k: round(statistics.median(p[k] for p in phases)) for k in phases[0]}},
            "floor": {"records": FULL, "medianMs": statistics.median(floor), "recordsPerSecond": round(FULL / (statistics.median(floor) / 1000))},
            "floorRowPerRecord": {"records": FULL, "medianMs": statistics.median(floor_rows), "recordsPerSecond": round(FULL / (statistics.median(floor_rows) / 1000))},
            "fullApplyOverFloor": round(statistics.median(full) / statistics.median(floor), 2),
            "oneRecordDeltaSync": {"medianMs": statistics.median(delta), "maxMs": max(delta),
                                   "applyMedianMs": statistics.median(delta_apply), "applyMaxMs": max(delta_apply)},
            "firstStartFromBundle": {"records": BUNDLE, "medianMs": statistics.median(start)},
            "attachment": {"bytes": FILE_MB << 20, "plainFetchIntoOPFSMedianMs": statistics.median(plain_file), "clientMedianMs": statistics.median(client_file),
                           "rateOverPlain": round(statistics.median(plain_file) / statistics.median(client_file), 2)},
            "chromium": driver.capabilities.get("browserVersion"),
            "runs": RUNS,
        }
        artifacts = os.path.join(REPO, ".build/browser-artifacts")
        os.makedirs(artifacts, exist_ok=True)
        with open(os.path.join(artifacts, "bench.json"), "w") as f:
            json.dump(results, f, indent=1)
        print(f"| measurement | result |\n|---|---|")
        print(f"| apply a {FULL:,}-record full body (fetch, gunzip, verify, one IndexedDB transaction) | {results['fullApply']['medianMs']:.0f} ms, {results['fullApply']['recordsPerSecond']:,} records/s |")
        print(f"| the floor, same page and run: the same body fetched, JSON.parse, one IndexedDB transaction of 256-record rows, no verification | {results['floor']['medianMs']:.0f} ms, {results['floor']['recordsPerSecond']:,} records/s |")
        print(f"| … the same with a row per record | {results['floorRowPerRecord']['medianMs']:.0f} ms, {results['floorRowPerRecord']['recordsPerSecond']:,} records/s |")
        d = results['oneRecordDeltaSync']
        print(f"| a 1-record delta: whole sync (request + verify + commit) | median {d['medianMs']:.1f} ms, max {d['maxMs']:.1f} ms |")
        print(f"| a 1-record delta: apply (body received → transaction committed) | median {d['applyMedianMs']:.1f} ms, max {d['applyMaxMs']:.1f} ms |")
        print(f"| first start from a {BUNDLE:,}-record bundle until the first query answers | {results['firstStartFromBundle']['medianMs']:.0f} ms |")
        print(f"Chromium {results['chromium']}, {RUNS} runs, medians; full apply phases (ms): {results['fullApply']['phasesMs']}")
        a = results["attachment"]
        print(f"| a {FILE_MB} MiB file: plain fetch piped into OPFS (the reference, same page) | {a['plainFetchIntoOPFSMedianMs']:.0f} ms, {FILE_MB / (a['plainFetchIntoOPFSMedianMs'] / 1000):.0f} MiB/s |")
        print(f"| a {FILE_MB} MiB file: `attachment(ref)` — downloaded into OPFS, SHA-256 checked, kept | {a['clientMedianMs']:.0f} ms, {FILE_MB / (a['clientMedianMs'] / 1000):.0f} MiB/s |")
        print(f"full apply: {results['fullApplyOverFloor']:.2f}× floor")
        print(f"attachment download: {a['rateOverPlain']:.2f}× plain fetch into OPFS (rate)")
    finally:
        stop(driver, server, tmp)


if __name__ == "__main__":
    main()
