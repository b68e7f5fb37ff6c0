#!/usr/bin/env python3
"""A fault-injecting proxy for the browser tests, on loopback.

It serves the page's static files itself (so a page still loads while the API is
"offline" or the server is stopped, as it would from a service worker's cache) and forwards
/v1/* to a deltasnap server. `POST /__proxy/mode?set=MODE` picks what it does to the API:

  normal         forward as is
  offline        drop every /v1/ connection without an answer (a network error in fetch)
  corrupt-delta  damage the next delta body (one record changed, checksum kept): once
  forge-index    change a digest in /v1/index (its signature no longer verifies)
  forge-body     change a record of every full body and fix its XXH64 checksum, so only
                 the signed digest can tell
  retry-after    answer every /v1/ request 503 with Retry-After: 30
  slow-uploads   take file uploads in at about 20 MiB/s (a slow uplink)
  flip-attachment
                 flip one byte of the next attachment download (GET …/attachments/…): once
  cut-attachment drop the connection halfway through the next attachment download: once
  old-cache-control
                 give private answers (Cache-Control: private, …) the headers an older
                 server gave: `private, max-age=31536000, immutable` on the token-named
                 snapshot and delta URLs, `private, no-cache` elsewhere — answers a browser
                 keeps in its HTTP cache unless the request says `cache: "no-store"`

`GET /__proxy/log` returns the API requests seen (method, path, If-None-Match, status,
body kind, the Cache-Control answered) and `uploaded`, the bytes of file uploads received
from the browser (cut parts included); `POST /__proxy/log?clear=1` clears both. It
prints its port on stdout.
"""
import argparse
import http.client
import http.server
import json
import mimetypes
import os
import re
import socketserver
import sys
import threading
import time
import urllib.parse

import xxhash

LOCK = threading.Lock()
STATE = {"mode": "normal", "log": []}


def fix_full_body_checksum(text):
    lines = text.split("\n")
    records = [l[:-1] if l.endswith(",") else l for l in lines[1:] if l.startswith("{")]
    total = sum(xxhash.xxh64(r.encode("utf-8")).intdigest() for r in records) % (1 << 64)
    return re.sub(r'"checksum":"[0-9a-f]{16}"', f'"checksum":"{total:016x}"', text, count=1)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = None
    static = None

    def log_message(self, *args):
        pass

    def do_GET(self): self.handle_any()
    def do_HEAD(self): self.handle_any()
    def do_POST(self): self.handle_any()
    def do_PUT(self): self.handle_any()
    def do_DELETE(self): self.handle_any()
    def do_PATCH(self): self.handle_any()
    def do_OPTIONS(self): self.handle_any()

    def reply(self, status, body, headers=()):
        try:
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # The browser gave up the request (a live-mode wait abandoned when its page left).
            self.close_connection = True

    def handle_any(self):
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.read_body(url, length) if length else None
        if body is False:
            return
        if url.path.startswith("/__proxy/"):
            return self.control(url, body)
        if url.path.startswith("/v1/"):
            return self.forward(url, body)
        return self.serve_static(url.path)

    def read_body(self, url, length):
        """The request body, counting file bytes as they arrive (a reload cuts an upload
        mid-part: what was sent still counts); False when the browser went before the end
        (nothing is forwarded, as a cut connection delivers nothing whole)."""
        counted = "/attachments/" in url.path or "/uploads/" in url.path
        parts = []
        got = 0
        while got < length:
            try:
                chunk = self.rfile.read(min(1 << 20, length - got))
            except OSError:
                chunk = b""
            if not chunk:
                self.close_connection = True
                return False
            parts.append(chunk)
            got += len(chunk)
            if counted and STATE["mode"] == "slow-uploads":
                time.sleep(0.05)
            if counted:
                with LOCK:
                    STATE["uploaded"] = STATE.get("uploaded", 0) + len(chunk)
        return b"".join(parts)

    def control(self, url, body):
        query = urllib.parse.parse_qs(url.query)
        with LOCK:
            if url.path == "/__proxy/mode" and "set" in query:
                STATE["mode"] = query["set"][0]
            if url.path == "/__proxy/log" and "clear" in query:
                STATE["log"] = []
                STATE["uploaded"] = 0
            answer = json.dumps({"mode": STATE["mode"], "log": STATE["log"], "uploaded": STATE.get("uploaded", 0)}).encode()
        self.reply(200, answer, [("Content-Type", "application/json"), ("Cache-Control", "no-store")])

    def serve_static(self, path):
        relative = os.path.normpath(urllib.parse.unquote(path)).lstrip("/")
        if relative in ("", "."):
            relative = "index.html"
        full = os.path.join(self.static, relative)
        if relative.startswith("..") or not os.path.isfile(full):
            return self.reply(404, b"not found", [("Content-Type", "text/plain")])
        with open(full, "rb") as f:
            data = f.read()
        kind = mimetypes.guess_type(full)[0] or "application/octet-stream"
        if full.endswith(".js"):
            kind = "text/javascript"
        self.reply(200, data, [("Content-Type", kind), ("Cache-Control", "no-store")])

    def forward(self, url, body):
        with LOCK:
            mode = STATE["mode"]
        entry = {"method": self.command, "path": url.path, "query": url.query, "ifNoneMatch": self.headers.get("If-None-Match"),
                 "range": self.headers.get("Range"), "status": None, "kind": None}
        if mode == "offline":
            with LOCK:
                STATE["log"].append({**entry, "status": "dropped"})
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if mode == "retry-after":
            with LOCK:
                STATE["log"].append({**entry, "status": 503})
            return self.reply(503, b'{"error":"database_unavailable","message":"test"}', [("Content-Type", "application/json"), ("Retry-After", "30")])
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "accept-encoding", "connection", "content-length")}
        try:
            conn = http.client.HTTPConnection(self.upstream[0], self.upstream[1], timeout=30)
            conn.request(self.command, url.path + ("?" + url.query if url.query else ""), body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            status = resp.status
            out_headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding")]
            conn.close()
            if mode == "old-cache-control":
                token_named = "/snapshots/" in url.path or "/deltas/" in url.path
                old = "private, max-age=31536000, immutable" if token_named else "private, no-cache"
                out_headers = [(k, old if k.lower() == "cache-control" and v.startswith("private") else v) for k, v in out_headers]
        except OSError:
            # The server is stopped: the browser sees a network error, as it would offline.
            with LOCK:
                STATE["log"].append({**entry, "status": "refused"})
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if mode == "cut-attachment" and status == 200 and "/attachments/" in url.path and self.command == "GET":
            # Half the body, then the connection drops (Content-Length promised the whole).
            with LOCK:
                STATE["mode"] = "normal"
                STATE["log"].append({**entry, "status": status, "cut": len(data) // 2})
            try:
                self.send_response(status)
                for k, v in out_headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
            except OSError:
                pass
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if mode == "flip-attachment" and status == 200 and "/attachments/" in url.path and self.command == "GET" and len(data) > 10:
            data = data[:10] + bytes([data[10] ^ 0x40]) + data[11:]
            entry["damaged"] = True
            with LOCK:
                STATE["mode"] = "normal"
        text = None
        if status == 200 and data.startswith(b"{"):
            text = data.decode("utf-8")
            match = re.search(r'"kind":"(full|delta)"', text[:400])
            entry["kind"] = match.group(1) if match else None
            if mode == "corrupt-delta" and entry["kind"] == "delta" and "\n{" in text:
                text = re.sub(r'\n\{"', '\n{"corrupted":true,"', text, count=1)
                with LOCK:
                    STATE["mode"] = "normal"
                entry["damaged"] = True
            elif mode == "forge-body" and entry["kind"] == "full" and '"name":"' in text:
                text = fix_full_body_checksum(re.sub(r'"name":"[^"]*"', '"name":"FORGED"', text, count=1))
                entry["damaged"] = True
            elif mode == "forge-index" and url.path == "/v1/index":
                text = re.sub(r'"digest":"([0-9a-f])', lambda m: '"digest":"' + ("0" if m.group(1) != "0" else "1"), text, count=1)
                entry["damaged"] = True
            data = text.encode("utf-8")
        entry["status"] = status
        entry["cacheControl"] = next((v for k, v in out_headers if k.lower() == "cache-control"), None)
        with LOCK:
            STATE["log"].append(entry)
        self.reply(status, data, out_headers)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True, help="host:port of deltasnap serve")
    parser.add_argument("--static", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    host, port = args.upstream.rsplit(":", 1)
    Handler.upstream = (host, int(port))
    Handler.static = args.static
    server = Server(("127.0.0.1", args.port), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
