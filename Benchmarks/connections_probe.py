#!/usr/bin/env python3
"""Connection capacity probe for `make bench-connections` (loopback only, bounded).

Holds many connections to one server (idle keep-alive ones, held long-polls, or half-sent
request heads), spread over several loopback source addresses, and measures: how many the
server holds, its RSS per connection, a fresh client's latency beside them, and the
server's CPU meanwhile. One JSON line per measurement on stdout.

  connections_probe.py idle      --port P --pid PID --count N --path /x
  connections_probe.py waiters   --port P --pid PID --count N
  connections_probe.py slowloris --port P --pid PID --count N --path /x

--rate-seconds S also measures other clients' `304` rate (wrk, keep-alive, the current ETag
of --path) for S seconds before the connections are opened and again while they are held.
"""
import argparse, json, os, resource, selectors, socket, statistics, subprocess, sys, time

SOURCES = [f"127.0.0.{i}" for i in range(1, 9)]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def connect(port, index, timeout=2.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((SOURCES[index % len(SOURCES)], 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s


def read_response(s, deadline):
    """Reads one response (Content-Length or chunked), returns its status; None on close."""
    data = b""
    while b"\r\n\r\n" not in data:
        s.settimeout(max(0.01, deadline - time.time()))
        chunk = s.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        s.settimeout(max(0.01, deadline - time.time()))
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status


def fresh_latencies(port, path, count=200):
    """Sequential fresh connections, each one GET: (p50 ms, p99 ms, statuses)."""
    times, statuses = [], {}
    for i in range(count):
        start = time.time()
        try:
            s = connect(port, i, timeout=5)
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            status = read_response(s, start + 5)
            s.close()
        except OSError:
            status = None
        times.append((time.time() - start) * 1000)
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    times.sort()
    return round(statistics.median(times), 2), round(times[int(len(times) * 0.99) - 1], 2), statuses


def etag_of(port, path):
    s = connect(port, 0)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return [l.split(b": ", 1)[1].decode() for l in data.split(b"\r\n") if l.lower().startswith(b"etag:")][0]


def not_modified_rate(port, path, etag, seconds):
    """Other clients' 304 rate: wrk, 1 thread, 16 keep-alive connections (req/s, bytes read per
    request: a 304's head is ~200 bytes, so a larger figure means the ETag did not match)."""
    out = subprocess.run(
        ["wrk", "-t1", "-c16", f"-d{seconds}s", "-H", f"If-None-Match: {etag}", f"http://127.0.0.1:{port}{path}"],
        capture_output=True, text=True, check=True).stdout
    rate = [float(l.split()[1]) for l in out.splitlines() if l.startswith("Requests/sec")][0]
    per_second = [l.split()[1] for l in out.splitlines() if l.startswith("Transfer/sec")][0]
    units = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}
    number = per_second.rstrip("KMGB")
    transferred = float(number) * units[per_second[len(number):]]
    return round(rate), round(transferred / max(rate, 1))


PER_PROCESS = 18000


def hold(args, request):
    """Opens args.count connections, each sending `request`; returns the open sockets (the
    ones past PER_PROCESS held by a child process, for the open-file limit, and not returned)."""
    extra = max(0, args.count - PER_PROCESS)
    if extra:
        ready_r, ready_w = os.pipe()
        if os.fork() == 0:
            socks = []
            for i in range(extra):
                try:
                    s = connect(args.port, i + PER_PROCESS)
                    s.sendall(request)
                    socks.append(s)
                except OSError:
                    break
            os.write(ready_w, b"x")
            time.sleep(30)
            os._exit(0)
        os.read(ready_r, 1)
    held = []
    for i in range(min(args.count, PER_PROCESS)):
        try:
            s = connect(args.port, i)
            s.sendall(request)
            held.append(s)
        except OSError:
            break
    return held


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["idle", "waiters", "slowloris"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--path", default="/v1/collections/countries")
    parser.add_argument("--hold-path", help="what each idle connection asks before it idles (a small answer; default --path)")
    parser.add_argument("--label", default="")
    parser.add_argument("--rate-seconds", type=int, default=0)
    args = parser.parse_args()
    rate_alone = None
    if args.rate_seconds:
        collection_etag = etag_of(args.port, args.path)
        rate_alone = not_modified_rate(args.port, args.path, collection_etag, args.rate_seconds)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    before = rss_kb(args.pid)
    started = time.time()
    if args.mode == "idle":
        held = hold(args, f"GET {args.hold_path or args.path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        # Each reads its answer and stays open, idle.
        alive = []
        for s in held:
            try:
                if read_response(s, time.time() + 5) is not None:
                    alive.append(s)
            except OSError:
                pass
        held = alive
    elif args.mode == "waiters":
        probe = connect(args.port, 0)
        probe.sendall(b"GET /v1/index HTTP/1.1\r\nHost: x\r\n\r\n")
        data = probe.recv(65536)
        etag = [l.split(b": ", 1)[1].decode() for l in data.split(b"\r\n") if l.lower().startswith(b"etag:")][0]
        probe.close()
        held = hold(args, f"GET /v1/index?wait=60 HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n\r\n".encode())
    else:
        held = hold(args, f"GET {args.path} HT".encode())
    opened_in = time.time() - started
    time.sleep(2)
    after = rss_kb(args.pid)
    # How many the server holds open with nothing sent back yet: a 503, a close or a reset
    # makes a socket readable, so one poll over all of them tells (a read per socket would
    # take long enough for the idle timeout to run out meanwhile).
    poller = selectors.DefaultSelector()
    for s in held:
        poller.register(s, selectors.EVENT_READ)
    answered = {key.fileobj for key, _ in poller.select(timeout=0.2)}
    poller.close()
    open_now = len(held) - len(answered)
    p50, p99, statuses = fresh_latencies(args.port, args.path)
    # The server's CPU while the connections are only held (no fresh client): an idle or
    # shedding server should be near zero.
    cpu_before, window_start = cpu_seconds(args.pid), time.time()
    time.sleep(5)
    cpu = cpu_seconds(args.pid) - cpu_before
    window = time.time() - window_start
    rates = {}
    if args.rate_seconds:
        rate_held = not_modified_rate(args.port, args.path, collection_etag, args.rate_seconds)
        # wrk counts a 304 as "Non-2xx": every request of both runs should be one.
        rates = {"rate_304_alone": rate_alone[0], "rate_304_beside": rate_held[0], "rate_ratio": round(rate_held[0] / max(1, rate_alone[0]), 3),
                 "bytes_per_answer": [rate_alone[1], rate_held[1]]}
    result = {
        "label": args.label, "mode": args.mode, "asked": args.count, "opened": len(held), "held": open_now,
        "opened_in_s": round(opened_in, 2), "rss_before_mb": round(before / 1024, 1), "rss_after_mb": round(after / 1024, 1),
        "kb_per_connection": round((after - before) / max(1, open_now), 2),
        "fresh_p50_ms": p50, "fresh_p99_ms": p99, "fresh_statuses": statuses,
        "server_cpu_cores_while_held": round(cpu / window, 3),
        **rates,
    }
    print(json.dumps(result), flush=True)
    for s in held:
        s.close()


if __name__ == "__main__":
    main()
