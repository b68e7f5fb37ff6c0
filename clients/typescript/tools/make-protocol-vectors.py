#!/usr/bin/env python3
"""Writes Tests/Fixtures/protocol-vectors.json from the real `deltasnap` binary.

The expected values come from the Swift implementation, not from the TypeScript client
they test: canonical bytes from `deltasnap export`, XXH64 values from the checksum of
one-record collections (a state checksum over one record is that record's XXH64), state
checksums from the bodies `deltasnap serve` sends, LtHash16 digests from its signed
`/v1/index`, and bodies and index documents exactly as the server wrote them.

Usage: BIN=.build/debug/deltasnap python3 clients/typescript/tools/make-protocol-vectors.py
(run from the repository root; stdlib only).
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN = os.environ.get("BIN", ".build/debug/deltasnap")
OUT = os.environ.get("OUT", "Tests/Fixtures/protocol-vectors.json")
ADMIN = "vectors-admin-token"

# Records whose canonical form exercises every rule of PROTOCOL.md §2 (input as written).
CANONICAL_INPUTS = [
    '{ "name": "Andorra", "id": "AD", "n": 1.50 }',
    '{"id":"esc","s":"quote\\" backslash\\\\ slash\\/ nl\\n tab\\t bs\\b ff\\f cr\\r c1\\u0001 del\\u007f"}',
    '{"id":"uni","s":"\\u00e9\\ud83c\\udde6\\ud83c\\udde9 raw: é 🇦🇩","é":1,"z":2,"Z":3,"\\uffff":4,"\\ud83d\\ude00":5}',
    '{"id":"num","a":[1.0,-0,12345678901234567890123,1e5,2E-3,0.5,-1.25e+10]}',
    '{"id":"nest","o":{"b":{"d":1,"c":[{"y":true,"x":null}]},"a":false},"hidden":false}',
    '{"id":"prefix","ab":1,"a":2,"abc":3,"":4}',
    '{"id":"empty","o":{},"a":[],"s":""}',
]

# Rejected by every conforming reader (PROTOCOL.md §2, and the Swift reader's tests).
INVALID_JSON = [
    '{"a":1,"a":2}', '{"a" 1}', '[1,]', '01', '1.', '-', 'tru', '"abc', '"a\u0001b"',
    '"\\ud800"', '"\\x"', '{"a":1', 'nul', '[1 2]', '1e', '+1', '.5', '[1]x',
]

# Extra XXH64 vectors from the xxHash reference implementation (as in ChecksumTests.swift).
XXH64_REFERENCE = [
    {"utf8": "", "xxh64": "ef46db3751d8e999"},
    {"utf8": "a", "xxh64": "d24ec4f1a98c6e5b"},
    {"utf8": "abc", "xxh64": "44bc2cf5ad770999"},
    {"utf8": '{"id":"AD"}', "xxh64": "3fb3dace205370dc"},
    {"utf8": "Ünïcödé 🇦🇩 records are longer than thirty-two bytes", "xxh64": "cc6d99668552395a"},
    {"bytesMod256": 512, "xxh64": "7b3bfcaac0348ac0"},
]


def run(*args, stdin=None):
    return subprocess.run([BIN, *args], check=True, capture_output=True, text=True, input=stdin).stdout


def request(base, method, path, body=None, headers=None):
    req = urllib.request.Request(base + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode("utf-8")


def attachment_vectors(base, auth):
    """References (PROTOCOL.md §12.1) as the Swift server reads them, and files' SHA-256 as it
    checks them. A record's verdict comes from the write API: `invalid` (400
    invalid_attachment), `references` (409 missing_attachment while no file is held, then
    accepted once the files listed are), `plain` (accepted with no file held)."""
    files = [bytes(i % 256 for i in range(n)) for n in (0, 1, 64, 1000, 70001)]
    hashes = [hashlib.sha256(f).hexdigest() for f in files]
    sha = [{"bytesMod256": len(f), "sha256": h} for f, h in zip(files, hashes)]

    def ref(i, media="image/png"):
        return {"$attachment": hashes[i], "size": len(files[i]), "type": media}

    cases = [
        ({"id": "r1", "photo": ref(3)}, [3]),
        ({"gallery": [ref(3), 3, ref(4), ref(3)], "id": "r2"}, [3, 4]),
        ({"deep": {"photo": ref(3)}, "id": "r3"}, None),
        ({"id": "r4", "note": {"x": 1}, "tags": [{"a": 1}, "b"]}, None),
        ({"id": "r5", "photo": ref(2, "text/plain; charset=utf-8")}, [2]),
        ({"empty": ref(0, "application/octet-stream"), "id": "r6"}, [0]),
        ({"id": "r7", "photo": {"$attachment": hashes[3].upper(), "size": 1000, "type": "image/png"}}, "invalid"),
        ({"id": "r8", "photo": {**ref(3), "extra": 1}}, "invalid"),
        ({"id": "r9", "photo": {"$attachment": hashes[3], "size": -1, "type": "image/png"}}, "invalid"),
        ({"id": "r10", "photo": {"$attachment": hashes[3], "size": 1000, "type": "not a type"}}, "invalid"),
        ({"id": "r11", "photo": {"$attachment": hashes[3], "size": 1000}}, "invalid"),
        ({"gallery": [ref(3), {"$attachment": "nope", "size": 1, "type": "a/b"}], "id": "r12"}, "invalid"),
    ]
    out = []
    for record, expected in cases:
        text = json.dumps(record, separators=(",", ":"), sort_keys=True)
        path = f"/v1/collections/files-{record['id']}/records/{record['id']}"
        status, _, answer = request(base, "PUT", path, text.encode(), auth)
        if expected == "invalid":
            assert status == 400 and json.loads(answer)["error"] == "invalid_attachment", (text, status, answer)
            out.append({"record": text, "verdict": "invalid"})
        elif expected is None:
            assert status == 200, (text, status, answer)
            out.append({"record": text, "verdict": "plain", "sha256": []})
        else:
            assert status == 409 and json.loads(answer)["error"] == "missing_attachment", (text, status, answer)
            for i in expected:
                put = request(base, "PUT", f"/v1/collections/files-{record['id']}/attachments/{hashes[i]}", files[i],
                              {**auth, "Content-Type": "application/octet-stream"})
                assert put[0] == 201, put
            status, _, answer = request(base, "PUT", path, text.encode(), auth)
            assert status == 200, (text, status, answer)
            out.append({"record": text, "verdict": "references", "sha256": [hashes[i] for i in expected]})
    return {
        "about": "references: a record and what the server reads in it (PROTOCOL.md §12.1) — `sha256` lists each file it refers to once, "
                 "in member order; `invalid` is refused invalid_attachment. sha256: files of bytesMod256 bytes (byte i = i % 256) "
                 "whose upload the server checked under that hash.",
        "references": out,
        "sha256": sha,
    }


def main():
    work = tempfile.mkdtemp(prefix="deltasnap-vectors-")
    server = None
    try:
        db = os.path.join(work, "store.sqlite")
        keys = os.path.join(work, "keys")
        run("keygen", "--out", keys)
        public_key = open(os.path.join(keys, "signing.pub")).read().strip()

        # Canonical bytes, as the Swift writer makes them.
        inputs = os.path.join(work, "canonical.ndjson")
        with open(inputs, "w") as f:
            f.write("\n".join(CANONICAL_INPUTS) + "\n")
        run("import", "--db", db, "--collection", "vectors", "--quiet", inputs)
        exported = {json.loads(line)["id"]: line for line in run("export", "--db", db, "--collection", "vectors").splitlines()}
        canonical = [{"input": text, "canonical": exported[json.loads(text)["id"]]} for text in CANONICAL_INPUTS]

        # One-record collections: their state checksum is the record's XXH64.
        single = []
        for i, text in enumerate(CANONICAL_INPUTS):
            path = os.path.join(work, f"one{i}.ndjson")
            with open(path, "w") as f:
                f.write(text + "\n")
            run("import", "--db", db, "--collection", f"one{i}", "--quiet", path)
        # A collection named like the signature member (PROTOCOL.md §8.1, cut at the last occurrence).
        path = os.path.join(work, "sig.ndjson")
        with open(path, "w") as f:
            f.write('{"id":"s1","v":1}\n')
        run("import", "--db", db, "--collection", "signatures", "--quiet", path)

        server = subprocess.Popen(
            [BIN, "serve", "--db", db, "--port", "0", "--signing-key", os.path.join(keys, "signing.key"), "--write-token", ADMIN, "--log-level", "error"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = server.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not match:
            raise SystemExit(f"serve did not report its address: {line!r}")
        base = f"http://127.0.0.1:{match.group(1)}"

        for i, text in enumerate(CANONICAL_INPUTS):
            _, _, body = request(base, "GET", f"/v1/collections/one{i}")
            meta = json.loads(body)
            single.append({"utf8": exported[json.loads(text)["id"]], "xxh64": meta["checksum"]})

        status, headers, full = request(base, "GET", "/v1/collections/vectors")
        assert status == 200, status
        full_meta = json.loads(full)
        etag = headers["ETag"]
        _, _, index1 = request(base, "GET", "/v1/index")

        # A delta with an upsert, a new record and a tombstone.
        auth = {"Authorization": f"Bearer {ADMIN}"}
        request(base, "POST", "/v1/collections/vectors/records", b'[{"id":"AD","name":"Andorra (updated)"},{"id":"new","v":[1,2]},{"id":"empty","hidden":true}]', auth)
        status, _, delta = request(base, "GET", "/v1/collections/vectors", headers={"If-None-Match": etag})
        assert status == 200 and json.loads(delta)["kind"] == "delta", delta[:200]
        _, _, index2 = request(base, "GET", "/v1/index")
        _, _, full_after = request(base, "GET", "/v1/collections/vectors")

        attachments = attachment_vectors(base, auth)

        digest_before = json.loads(index1)["index"]["collections"]["vectors"]["digest"]
        digest_after = json.loads(index2)["index"]["collections"]["vectors"]["digest"]

        vectors = {
            "about": "Shared protocol test vectors (docs/PROTOCOL.md). Generated by clients/typescript/tools/make-protocol-vectors.py "
                     "from the deltasnap binary's own outputs; checked by the Swift tests and the TypeScript client's unit tests.",
            "canonicalJSON": {"valid": canonical, "invalid": INVALID_JSON},
            "xxh64": XXH64_REFERENCE + single,
            "stateChecksum": [
                {"collection": "vectors", "records": [l for l in full.splitlines()[1:-1]], "checksum": full_meta["checksum"]},
                {"collection": "empty", "records": [], "checksum": "0000000000000000"},
            ],
            "ltHash16": {
                "protocolExample": {
                    "collection": "countries", "records": ['{"id":"AD","name":"Andorra"}'],
                    "laneBytesPrefix": "dc62bcd2fe3d219d",
                    "fingerprint": "37d6ec8def50c19f17ba3d9ac7a6be782e92d90d58ee9bebc256e85ca717152e",
                },
                "empty": "e5a00aa9991ac8a5ee3109844d84a55583bd20572ad3ffcd42792f3c36b183ad",
                "fromServer": [
                    {"collection": "vectors", "body": "fullBody", "fingerprint": digest_before},
                    {"collection": "vectors", "body": "fullBodyAfterDelta", "fingerprint": digest_after},
                ],
            },
            "bodies": {
                "fullBody": full,
                "deltaBody": delta,
                "fullBodyAfterDelta": full_after,
                "about": "deltaBody applies on fullBody (its base is fullBody's token) and leads to the state of fullBodyAfterDelta",
            },
            "attachments": attachments,
            "signedIndex": {
                "trustedKey": public_key,
                "documents": [index1, index2],
                "about": "documents are /v1/index answers as the server wrote them; both verify with trustedKey and list the collection 'signatures'",
            },
        }
        os.makedirs(os.path.dirname(OUT), exist_ok=True)
        with open(OUT, "w") as f:
            json.dump(vectors, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(f"wrote {OUT}")
    finally:
        if server:
            server.terminate()
            server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
