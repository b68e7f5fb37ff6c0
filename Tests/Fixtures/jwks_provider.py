#!/usr/bin/env python3
"""A stand-in identity provider for DeltaSnap's tests (IdentityProviderTests): it publishes a
JSON Web Key Set on 127.0.0.1 and mints tokens with PyJWT and `cryptography` — a JWT library
independent of the one the server verifies with.

Prints `port N` once listening. Endpoints (GET, answers in text or JSON):
  /jwks.json                       the published set (Cache-Control: max-age=MAX_AGE); 503 while down
  /key?kid=K&type=rsa|pss|ec|ed    make a key (not yet published)
  /publish?kids=A,B[&max_age=S]    publish exactly these keys
  /down?on=1|0                     the set answers 503 (a provider outage) or not
  /stats                           {"fetches": N} of /jwks.json
  /mint?kid=K&claims=JSON[&mode=M][&alg=A]
        mode: signed (default) — with K's key and its algorithm (or A);
              none — alg "none", no signature; hs256-public — HS256 with K's public key PEM as
              the secret (algorithm confusion); forged — a fresh key no set has, under kid K.
"""
import base64, hashlib, hmac, json, os, signal, sys, threading
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
from urllib.parse import urlparse, parse_qs

import jwt
from jwt.algorithms import RSAAlgorithm, ECAlgorithm, OKPAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa, ec, ed25519

lock = threading.Lock()
keys = {}        # kid -> (type, private key, alg)
published = []
state = {"max_age": 300, "down": False, "fetches": 0}
ALG = {"rsa": "RS256", "pss": "PS256", "ec": "ES256", "ed": "EdDSA"}


def make_key(kind):
    if kind in ("rsa", "pss"):
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if kind == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    return ed25519.Ed25519PrivateKey.generate()


def public_jwk(kid):
    kind, private, alg = keys[kid]
    public = private.public_key()
    algorithm = {"rsa": RSAAlgorithm, "pss": RSAAlgorithm, "ec": ECAlgorithm, "ed": OKPAlgorithm}[kind]
    jwk = json.loads(algorithm.to_jwk(public))
    jwk.update({"kid": kid, "alg": alg, "use": "sig"})
    return jwk


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(kid, claims, mode, alg):
    if mode == "none":
        header = {"alg": "none", "typ": "JWT", "kid": kid}
        return b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode()) + "."
    if mode == "hs256-public":
        pem = keys[kid][1].public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        header = {"alg": "HS256", "typ": "JWT", "kid": kid}
        signing_input = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
        return signing_input + "." + b64(hmac.new(pem, signing_input.encode(), hashlib.sha256).digest())
    if mode == "forged":
        kind, _, key_alg = keys[kid] if kid in keys else ("rsa", None, "RS256")
        return jwt.encode(claims, make_key(kind), algorithm=alg or key_alg, headers={"kid": kid})
    kind, private, key_alg = keys[kid]
    return jwt.encode(claims, private, algorithm=alg or key_alg, headers={"kid": kid})


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format, *args):
        if os.environ.get("JWKS_PROVIDER_LOG"):
            sys.stderr.write("jwks_provider: " + (format % args) + "\n")

    def answer(self, status, body, headers=None):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        with lock:
            if url.path == "/jwks.json":
                state["fetches"] += 1
                if state["down"]:
                    return self.answer(503, "down")
                body = json.dumps({"keys": [public_jwk(kid) for kid in published]})
                return self.answer(200, body, {"Content-Type": "application/json", "Cache-Control": "public, max-age=%d" % state["max_age"]})
            if url.path == "/key":
                kind = query.get("type", "rsa")
                keys[query["kid"]] = (kind, make_key(kind), ALG[kind])
                return self.answer(200, "ok")
            if url.path == "/publish":
                published[:] = [k for k in query.get("kids", "").split(",") if k]
                if "max_age" in query:
                    state["max_age"] = int(query["max_age"])
                return self.answer(200, "ok")
            if url.path == "/down":
                state["down"] = query.get("on") == "1"
                return self.answer(200, "ok")
            if url.path == "/stats":
                return self.answer(200, json.dumps({"fetches": state["fetches"]}))
            if url.path == "/mint":
                token = mint(query["kid"], json.loads(query["claims"]), query.get("mode", "signed"), query.get("alg"))
                return self.answer(200, token)
        self.answer(404, "not found")


# The test process's threads block most signals, and a blocked mask survives exec: unblock
# SIGTERM and end on it, or the test's terminate() would wait forever.
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("port %d" % server.server_address[1], flush=True)
server.serve_forever()
