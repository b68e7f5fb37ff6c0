"""Per-operation answers of a conformance run (.ci/conformance.sh).

Reads the lines .ci/conformance_hooks.py appended for every request schemathesis sent
(`method<TAB>path template<TAB>mode<TAB>status<TAB>declared`) and prints, for every
operation of docs/openapi.yaml the run selected, how many requests got a 2xx answer,
and of the valid (positive) ones how many; one line each:

    conformance: GET /v1/collections/{name}: 37 of 50 answered 2xx (valid: 35 of 40)

An operation that never answers 2xx by design - those tagged `not-allowed` (405), and for a
user's token the owner's write API (`--by-design writes=403`) - counts the answers of that
status instead. Requests sent with a method the operation does not declare (schemathesis's
probes) are counted apart, in the last line.

usage: conformance_report.py OPENAPI COUNTS [--prefix TEXT] [--paths REGEX] [--by-design TAG=STATUS]...
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

import yaml

METHODS = ("get", "head", "post", "put", "delete", "patch", "options", "trace")


def operations(spec_path: str, path_regex: str | None) -> list[tuple[str, str, list[str]]]:
    with open(spec_path, encoding="utf-8") as handle:
        spec = yaml.safe_load(handle)
    found = []
    for path, item in spec["paths"].items():
        if path_regex and not re.search(path_regex, path):
            continue
        for method in METHODS:
            if method in item:
                found.append((method.upper(), path, item[method].get("tags") or []))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description="Per-operation 2xx counts of a conformance run.")
    parser.add_argument("openapi")
    parser.add_argument("counts")
    parser.add_argument("--prefix", default="", help="put before each operation, e.g. 'as alice: '")
    parser.add_argument("--paths", default="", help="the run's --include-path-regex")
    parser.add_argument("--by-design", action="append", default=["not-allowed=405"], metavar="TAG=STATUS",
                        help="operations with TAG answer STATUS by design, never 2xx")
    args = parser.parse_args()
    by_design = {tag: int(status) for tag, _, status in (item.partition("=") for item in args.by_design)}
    total: Counter[tuple[str, str]] = Counter()
    ok: Counter[tuple[str, str]] = Counter()
    valid: Counter[tuple[str, str]] = Counter()
    valid_ok: Counter[tuple[str, str]] = Counter()
    statuses: Counter[tuple[str, str, int]] = Counter()
    probes = 0
    try:
        with open(args.counts, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        method, path, mode, status_text, declared = line.split("\t")
        if declared != "yes":
            probes += 1
            continue
        key = (method, path)
        status = int(status_text)
        total[key] += 1
        success = 200 <= status < 300
        ok[key] += success
        statuses[(method, path, status)] += 1
        if mode == "positive":
            valid[key] += 1
            valid_ok[key] += success
    for method, path, tags in operations(args.openapi, args.paths or None):
        key = (method, path)
        line = f"conformance: {args.prefix}{method} {path}: {ok[key]} of {total[key]} answered 2xx"
        designed = [(tag, by_design[tag]) for tag in tags if tag in by_design]
        if designed:
            tag, status = designed[0]
            line += f" ({tag}, {status} by design: {statuses[(method, path, status)]})"
        else:
            line += f" (valid: {valid_ok[key]} of {valid[key]})"
        print(line)
    print(f"conformance: {args.prefix}{probes} more requests probed methods the operations do not declare")


if __name__ == "__main__":
    main()
