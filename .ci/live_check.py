#!/usr/bin/env python3
"""Checks of GET /v1/index?wait= (docs/PROTOCOL.md §11) from outside, with real processes on
127.0.0.1; driven by .ci/live-tests.sh, which starts the server and nginx. Standard library
only: asyncio opens thousands of connections in one thread.

  cache     N clients wait through nginx proxy_cache (proxy_cache_lock): one origin request
            per change, every client answered with the new index.
  fallback  `deltasnap sync --watch --live` through a proxy whose read timeout is shorter than
            the wait: the client falls back and still converges.
  waiters   N held requests on one server: all answered after one commit; RSS per waiter.
  storm     M waiters re-waiting while commits go on as fast as they can for a second: each
            waiter woken a bounded number of times.
  latency   commit (on --origin) -> `sync --watch --live` (on --client-port) has it applied,
            over --iterations commits: p50 and p99.
"""
import argparse
import asyncio
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import urllib.parse


def fail(message):
    print(f"live: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


async def request(port, path, method="GET", headers=None, body=b"", timeout=90):
    """One HTTP/1.1 request on a new connection: (status, headers, body)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    try:
        lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await writer.drain()
        return await asyncio.wait_for(read_response(reader), timeout)
    finally:
        writer.close()


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split(" ")[1])
    headers = {}
    for line in header_lines:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return status, headers, body


async def interrupt(process):
    """SIGINT (how a person stops `sync --watch`), then SIGKILL if it has not ended in 10 s."""
    process.send_signal(signal.SIGINT)
    try:
        await asyncio.wait_for(process.wait(), 10)
    except asyncio.TimeoutError:
        process.kill()


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Writer:
    """Commits through the write API: one record per call."""

    def __init__(self, port, token):
        self.port, self.token, self.count = port, token, 0

    async def commit(self):
        self.count += 1
        status, _, body = await request(
            self.port, f"/v1/collections/countries/records/live-{os.getpid()}-{self.count}-{time.monotonic_ns()}", "PUT",
            {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}, json.dumps({"n": self.count}).encode())
        if status != 200:
            fail(f"a write answered {status}: {body[:200]!r}")


async def current_etag(port):
    status, headers, _ = await request(port, "/v1/index")
    if status != 200:
        fail(f"/v1/index answered {status}")
    return headers["etag"]


async def check_cache(args):
    """N clients on the same URL through proxy_cache: one origin request per change."""
    writer = Writer(args.origin, args.token)
    etag, cursor = await current_etag(args.origin), None
    log_before = count_origin_requests(args.nginx_log)
    for round_number in range(2):
        query = {"wait": "20", "etag": etag}
        if cursor:
            query["cursor"] = cursor
        path = "/v1/index?" + urllib.parse.urlencode(query)
        waiting = [asyncio.create_task(request(args.cache, path)) for _ in range(args.clients)]
        await asyncio.sleep(1.5)
        if any(task.done() for task in waiting):
            fail(f"round {round_number}: a client was answered before any change: {[t.result()[0] for t in waiting if t.done()][:3]}")
        started = time.monotonic()
        await writer.commit()
        answers = await asyncio.gather(*waiting)
        took = time.monotonic() - started
        statuses = {status for status, _, _ in answers}
        etags = {headers.get("etag") for _, headers, _ in answers}
        cursors = {headers.get("deltasnap-cursor") for _, headers, _ in answers}
        if statuses != {200} or len(etags) != 1 or etag in etags or len(cursors) != 1:
            fail(f"round {round_number}: statuses {statuses}, etags {etags}, cursors {cursors}")
        etag, cursor = etags.pop(), cursors.pop()
        print(f"live: cache round {round_number + 1}: {args.clients} clients answered {took * 1000:.0f} ms after the commit")
    origin = count_origin_requests(args.nginx_log) - log_before
    print(f"live: {args.clients} clients waiting through proxy_cache, 2 changes: {origin} origin requests")
    if origin > 2:
        fail(f"{origin} origin requests for 2 changes: the cache did not collapse the waiters")


def count_origin_requests(log):
    """Requests for /v1/index?wait= nginx passed to the origin ($upstream_addr set)."""
    if not os.path.exists(log):
        return 0
    with open(log) as lines:
        return sum(1 for line in lines if "/v1/index?wait=" in line and not line.rstrip().endswith(" -"))


async def check_fallback(args):
    """`sync --watch --live` through a proxy that cuts held requests after 1 s."""
    writer = Writer(args.origin, args.token)
    replica = os.path.join(args.work, "fallback.sqlite")
    process = await asyncio.create_subprocess_exec(
        args.bin, "sync", "--url", f"http://127.0.0.1:{args.cut}/v1/collections/countries", "--replica", replica,
        "--watch", "--live", "--wait", "20", "--interval", "1", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        async def next_line(what):
            line = await asyncio.wait_for(process.stdout.readline(), 30)
            if not line:
                fail(f"sync --watch --live ended before {what}")
            return line.decode().strip()

        first = await next_line("its first pull")
        if not first.startswith("pulled: full"):
            fail(f"first line: {first}")
        expected = int(re.search(r"records=(\d+)", first).group(1))
        for _ in range(2):
            await asyncio.sleep(2.5)  # past the proxy's read timeout: held requests were cut
            await writer.commit()
            expected += 1
            while True:
                line = await next_line("the commit arrived")
                if f"records={expected}" in line:
                    break
        print(f"live: through a proxy that cuts held requests after 1 s, sync --watch --live still converged ({expected} records)")
    finally:
        await interrupt(process)


async def open_waiter(port, path, headers, connecting):
    async with connecting:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    return reader, writer


async def check_waiters(args):
    """N held requests: all answered after one commit; the server's RSS per waiter."""
    writer = Writer(args.origin, args.token)
    etag = await current_etag(args.origin)
    idle_rate = await ordinary_poll_rate(args.origin, etag)
    await asyncio.sleep(0.5)
    before = rss_kb(args.server_pid)
    connecting = asyncio.Semaphore(256)
    started = time.monotonic()
    opened = await asyncio.gather(*[
        open_waiter(args.origin, "/v1/index?wait=60", {"If-None-Match": etag}, connecting) for _ in range(args.waiters)])
    await asyncio.sleep(2)
    held = rss_kb(args.server_pid)
    print(f"live: {args.waiters} waiters connected in {time.monotonic() - started:.1f} s; server RSS {before / 1024:.1f} MB -> "
          f"{held / 1024:.1f} MB ({(held - before) * 1024 / args.waiters / 1024:.2f} KB per waiter)")
    ordinary = await ordinary_poll_rate(args.origin, etag)
    committed = time.monotonic()
    await writer.commit()
    answers = await asyncio.gather(*[asyncio.wait_for(read_response(reader), 60) for reader, _ in opened])
    took = time.monotonic() - committed
    for _, w in opened:
        w.close()
    statuses = {}
    for status, _, _ in answers:
        statuses[status] = statuses.get(status, 0) + 1
    if statuses != {200: args.waiters}:
        fail(f"after one commit the waiters got {statuses}")
    print(f"live: one commit answered all {args.waiters} waiters in {took:.2f} s; ordinary 304 polls on one connection: "
          f"{idle_rate:.0f}/s idle, {ordinary:.0f}/s while they waited ({ordinary / idle_rate:.2f}x)")
    if args.max_kb_per_waiter and (held - before) / args.waiters > args.max_kb_per_waiter:
        fail(f"{(held - before) / args.waiters:.1f} KB per waiter (at most {args.max_kb_per_waiter})")


async def ordinary_poll_rate(port, etag, seconds=1.0):
    """304 polls of the collection over one keep-alive connection, per second."""
    status, headers, _ = await request(port, "/v1/collections/countries", headers={"Accept-Encoding": "gzip"})
    tag = headers["etag"]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    count, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        writer.write(f"GET /v1/collections/countries HTTP/1.1\r\nHost: x\r\nIf-None-Match: {tag}\r\n\r\n".encode())
        status, _, _ = await read_response(reader)
        if status != 304:
            fail(f"an ordinary poll answered {status}")
        count += 1
    writer.close()
    return count / seconds


async def check_storm(args):
    """Waiters re-wait while commits go on for a second: wakes per waiter stay bounded."""
    writer = Writer(args.origin, args.token)
    stop = asyncio.Event()
    wakes = [0] * args.storm_waiters
    connecting = asyncio.Semaphore(256)

    async def waiter(index):
        etag = await current_etag(args.origin)
        while not stop.is_set():
            async with connecting:
                reader, w = await asyncio.open_connection("127.0.0.1", args.origin)
            w.write(f"GET /v1/index?wait=5 HTTP/1.1\r\nHost: x\r\nConnection: close\r\nIf-None-Match: {etag}\r\n\r\n".encode())
            status, headers, _ = await read_response(reader)
            w.close()
            if status == 200:
                wakes[index] += 1
                etag = headers["etag"]

    tasks = [asyncio.create_task(waiter(i)) for i in range(args.storm_waiters)]
    await asyncio.sleep(2)
    started = time.monotonic()

    async def commit_loop():
        while time.monotonic() - started < 1.0:
            await writer.commit()

    await asyncio.gather(*[commit_loop() for _ in range(4)])
    seconds = time.monotonic() - started
    await asyncio.sleep(1)
    stop.set()
    await asyncio.wait(tasks, timeout=10)
    for task in tasks:
        task.cancel()
    most = max(wakes)
    bound = int(seconds * 1000 / args.debounce_ms) + 4
    print(f"live: {writer.count} commits in {seconds:.2f} s woke each of {args.storm_waiters} waiters at most {most} times "
          f"(median {sorted(wakes)[len(wakes) // 2]}; bound {bound})")
    if most > bound or most == 0:
        fail(f"a waiter was woken {most} times by {writer.count} commits in {seconds:.2f} s (bound {bound})")


async def check_latency(args):
    """Commit on one server, a live CLI client on another (or the same) has it applied."""
    writer = Writer(args.origin, args.token)
    replica = os.path.join(args.work, f"latency-{args.client_port}.sqlite")
    process = await asyncio.create_subprocess_exec(
        args.bin, "sync", "--url", f"http://127.0.0.1:{args.client_port}/v1/collections/countries", "--replica", replica,
        "--watch", "--live", "--wait", "30", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    samples = []
    try:
        first = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        records = int(re.search(r"records=(\d+)", first).group(1))
        for _ in range(args.iterations):
            await asyncio.sleep(0.2)
            started = time.monotonic()
            await writer.commit()
            records += 1
            while True:
                line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
                if not line:
                    fail("sync --watch --live ended")
                if f"records={records}" in line:
                    break
            samples.append((time.monotonic() - started) * 1000)
    finally:
        await interrupt(process)
    samples.sort()
    p50 = samples[len(samples) // 2]
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    where = "one instance" if args.client_port == args.origin else "commit on one instance, client on another"
    print(f"live: commit -> applied by a waiting client ({where}), {len(samples)} commits: p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
          f"max {samples[-1]:.1f} ms")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("checks", nargs="+", choices=["cache", "fallback", "waiters", "storm", "latency"])
    parser.add_argument("--origin", type=int, required=True)
    parser.add_argument("--cache", type=int)
    parser.add_argument("--cut", type=int)
    parser.add_argument("--nginx-log")
    parser.add_argument("--token", required=True)
    parser.add_argument("--server-pid", type=int)
    parser.add_argument("--bin")
    parser.add_argument("--work", default="/tmp")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--waiters", type=int, default=10000)
    parser.add_argument("--storm-waiters", type=int, default=200)
    parser.add_argument("--debounce-ms", type=int, default=50)
    parser.add_argument("--max-kb-per-waiter", type=float, default=0)
    parser.add_argument("--client-port", type=int)
    parser.add_argument("--iterations", type=int, default=50)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    args.client_port = args.client_port or args.origin
    checks = {"cache": check_cache, "fallback": check_fallback, "waiters": check_waiters, "storm": check_storm, "latency": check_latency}
    for name in args.checks:
        asyncio.run(checks[name](args))


if __name__ == "__main__":
    main()
