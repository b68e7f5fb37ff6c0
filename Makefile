# DeltaSnap — the verbs a newcomer needs. Every target installs missing system packages.
SWIFT ?= swift
# A benchmark process that crashes would hang in Swift's backtracer, with `swift package
# benchmark` waiting on it: the crash is reported and the run ends instead.
BENCH_ENV = SWIFT_BACKTRACE=enable=no
# The ordo-one benchmarks are a target of this package only with DELTASNAP_BENCHMARKS set
# (Package.swift), built in a directory of their own so the usual build keeps its graph.
BENCH = DELTASNAP_BENCHMARKS=1 $(BENCH_ENV) $(SWIFT) package --scratch-path .build-bench --allow-writing-to-package-directory
DEBUG_BIN := .build/debug/deltasnap
RELEASE_BIN := .build/release/deltasnap
# Where `make run` keeps its embedded store.
DB ?= var/deltasnap.sqlite
HOST ?= 127.0.0.1
PORT ?= 8080
# Pinned so a fresh store baked from the same sample gives byte-identical snapshots.
SAMPLE_EPOCH := 00000000005a3b1e
SAMPLE_DATE := 1767225600

.PHONY: view-scale-test live-tests bench-live browser-tests browser-client bench-browser bench-queries deps build build-release run run-postgres serve demo test conformance soak bench bench-http bench-import-stall bench-postgres bench-first-sync bench-growth bench-partitions bench-attachments bench-source bench-review bench-connections fuzz snapshots check-snapshots clean help

help:
	@echo "make run         import the sample into $(DB) if absent, bake it, and serve it on $(HOST):$(PORT)"
	@echo "make run-postgres the scale-out set-up on one machine: PostgreSQL, two serve instances, nginx on $(HOST):$(PORT)"
	@echo "make test        the whole test suite: Swift tests, snapshots rebake identically, OpenAPI conformance,"
	@echo "                 a short soak and a short fuzz run (what CI runs)"
	@echo "make conformance openapi-spec-validator + schemathesis against a live server (MAX_EXAMPLES)"
	@echo "make soak        1,000,000 mixed requests while writes go on; RSS must stay flat (release)"
	@echo "make demo        an end-to-end walk: serve, offline first start, 304, delta, reset"
	@echo "make bench       micro-benchmarks (ordo-one/benchmark, release)"
	@echo "make bench-http  wrk against deltasnap serve and nginx serving the same bytes, silent and logged"
	@echo "                 (BASELINE_BIN=old/deltasnap: the old build side by side)"
	@echo "make bench-import-stall  304 latency idle and during a 30 MB import through the write API"
	@echo "make bench-postgres  SQLite vs two instances on PostgreSQL behind nginx, import rates, a 1M full body"
	@echo "make bench-partitions  import --partition-by; a view's 304 vs nginx; 1M partitions, 10k users: RSS, a changed view"
	@echo "make bench-attachments a 100 MiB download and 10k x 20 KiB beside nginx; upload MB/s; RSS over a 1 GiB upload and download"
	@echo "make bench-source  deltasnap follow: a 1M-row copy, 20k mixed source transactions beside PostgreSQL's own rate, commit -> live client"
	@echo "make bench-connections  idle connections, live waiters, slowloris at 150 % of the cap: RSS each, fresh-client p50/p99, CPU; beside nginx"
	@echo "make bench-review  review before publish: approving 100k changed records beside an import of them; the first page of a 10k-record diff"
	@echo "make bench-first-sync  a bundled 1M-record .replica: first sync answered 304, first 1-record delta (RECORDS)"
	@echo "make bench-growth  import, bake, first pull, a 1-record delta, pull --snapshot, serve RSS at SIZES (10k 1M 10M); PG=1 PostgreSQL too"
	@echo "make fuzz        libFuzzer on every parser, FUZZ_SECONDS (60) per target"
	@echo "make snapshots   rebake Snapshots/ from Snapshots/sample/ (reproducible)"
	@echo "make view-scale-test  10,000 users (VIEW_USERS), 200 shared sets: each user's synced view is exactly their slice, both stores"
	@echo "make live-tests  long-polls from outside: 10,000 waiters, 200 clients through nginx proxy_cache, a cutting proxy"
	@echo "make bench-live  live mode: commit to applied (p50/p99, one instance and two on PostgreSQL), RSS per waiter (release)"
	@echo "make browser-tests  the TypeScript browser client: node --test on the protocol vectors, Selenium in headless Chromium"
	@echo "make bench-browser  the browser client in Chromium: 100k-record full apply, 1-record delta, first start from a 10k bundle"
	@echo "make bench-queries  live queries: Swift (10k and 1M records, a write until the observer has it, beside the write alone)"
	@echo "                 and the browser (100k records: query vs a hand-written IndexedDB cursor, watcher latency, 1,000 observers)"

deps:
	@.ci/install-deps.sh

build: deps
	$(SWIFT) build --product deltasnap

build-release: deps
	$(SWIFT) build -c release --product deltasnap

run: build-release browser-client
	@mkdir -p $(dir $(DB))
	@if [ ! -f $(DB) ]; then $(RELEASE_BIN) import --db $(DB) --collection countries Snapshots/sample/countries.ndjson; fi
	$(RELEASE_BIN) bake --db $(DB) --collection countries --out var/snapshots
	$(RELEASE_BIN) inspect var/snapshots/countries.snapshot
	@echo "The example web app (clients/typescript/example): http://$(HOST):$(PORT)/"
	$(RELEASE_BIN) serve --db $(DB) --host $(HOST) --port $(PORT) --static clients/typescript/example

# PostgreSQL + two stateless instances + nginx in front (see docs/ARCHITECTURE.md).
run-postgres: build-release
	HOST=$(HOST) PORT=$(PORT) BIN=$(RELEASE_BIN) .ci/run-postgres.sh

# Serves $(DB) as it is (writes enabled when DELTASNAP_WRITE_TOKEN is set).
serve: build-release
	$(RELEASE_BIN) serve --db $(DB) --host $(HOST) --port $(PORT)

demo: build
	@.ci/demo.sh

bench: deps
	$(BENCH) benchmark

bench-http: deps
	Benchmarks/bench-http.sh

# 304 polls idle and while a 30 MB batch is imported through the write API (BASELINE_BIN: old build too).
bench-import-stall: deps
	Benchmarks/bench-import-stall.sh

# The first sync of a bundled .replica: a 304 never copies it; the first delta (RECORDS, 1M).
bench-first-sync: deps
	Benchmarks/bench-first-sync.sh

# The client alone, old build against this one (BASELINE_BIN, required), alternating: first start
# from the gzip bundle, a first full pull, a 1-record delta; medians, new/old, peak RSS.
bench-client-ab: deps
	Benchmarks/bench-client-ab.sh

# Growth (issue 44): each step's time and peak RSS at SIZES records, the smallest replica's delta beside.
bench-growth: deps
	Benchmarks/bench-growth.sh

# Partitions and views: import --partition-by, a view's 304 next to nginx's, 1M partitions with 10k users.
bench-partitions: deps
	Benchmarks/bench-partitions.sh

# Attachments beside nginx serving the same files: a 100 MiB download, 10,000 x 20 KiB, upload speed, RSS over 1 GiB.
bench-attachments: deps
	Benchmarks/bench-attachments.sh

# deltasnap follow against a throwaway PostgreSQL source: copy, stream beside psql alone, latency to a live client.
bench-source: deps
	Benchmarks/bench-source.sh

bench-review: deps
	Benchmarks/bench-review.sh

# Idle connections, live waiters and half-sent heads held against serve's cap, beside nginx
# with Debian's defaults: how many, RSS each, a fresh client's latency, CPU while shedding.
bench-connections: deps
	Benchmarks/bench-connections.sh

# SQLite vs 2 instances on PostgreSQL behind nginx; import rates; a 1M full body (MILLION=0 skips it).
bench-postgres: deps
	MILLION=$${MILLION:-1} Benchmarks/bench-postgres.sh

# libFuzzer + ASan on the JSON reader, record scanner, body reader, gzip, HTTP dates and
# validators; a crash leaves its input in .build/fuzz/artifacts/.
FUZZ_SECONDS ?= 60
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) Fuzz/run.sh

# CI's fuzzing budget per target (`make fuzz` searches longer).
CI_FUZZ_SECONDS ?= 20

# At most TEST_WIDTH tests at once: each test server holds a few SQLite descriptors, and
# with ~1,300 open at once Foundation's Process.run (the CLI tests) crashed copying
# /proc/self/fd; unbounded, Swift Testing starts every test together.
# 8, not more: on this 2-core machine the suite took 82 s at 8 and 103 s at 12 (same
# sitting), and the tests that wait on a watcher or a timer see less contention.
TEST_WIDTH ?= 8

test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test --experimental-maximum-parallelization-width $(TEST_WIDTH)
	$(MAKE) --no-print-directory check-snapshots
	@# The server as a third party sees it: its description validated, and schemathesis
	@# finding no server error and no response that departs from it.
	.ci/conformance.sh
	@# The browser client in a real headless Chromium (installs node, tsc, esbuild, chromium).
	BIN=$(DEBUG_BIN) .ci/browser-tests.sh
	@# Long-polls from outside: 10,000 held requests, a shared cache collapsing 200 waiters,
	@# a proxy that cuts held requests.
	BIN=$(DEBUG_BIN) .ci/live-tests.sh
	@# Bounded forms of the long checks: a soak on the debug build, and each fuzzer briefly
	@# (every committed seed is replayed first, then libFuzzer mutates).
	SOAK_REQUESTS=20000 RSS_SLACK_MB=16 BIN=$(DEBUG_BIN) Benchmarks/soak.sh
	FUZZ_SECONDS=$(CI_FUZZ_SECONDS) Fuzz/run.sh

# The issue's full form of the slice test CI runs with 200 users: every one of 10,000 users
# syncs their view and holds exactly what they may read, on SQLite and on PostgreSQL.
VIEW_USERS ?= 10000
view-scale-test: deps
	$(SWIFT) build --build-tests
	DELTASNAP_VIEW_USERS=$(VIEW_USERS) $(SWIFT) test --skip-build --filter everyUserOfManyHoldsExactlyTheirSlice

conformance: deps
	$(SWIFT) build --product deltasnap
	.ci/conformance.sh

soak: deps
	Benchmarks/soak.sh

# Bakes into a fresh temporary store, so the result depends only on the sample file.
snapshots: build
	@rm -rf var/snapshot-build && mkdir -p var/snapshot-build
	SOURCE_DATE_EPOCH=$(SAMPLE_DATE) DELTASNAP_EPOCH=$(SAMPLE_EPOCH) \
	  $(DEBUG_BIN) import --db var/snapshot-build/store.sqlite --collection countries Snapshots/sample/countries.ndjson
	$(DEBUG_BIN) bake --db var/snapshot-build/store.sqlite --collection countries --out Snapshots
	@rm -rf var/snapshot-build

check-snapshots: snapshots
	@if [ -n "$$(git status --porcelain -- Snapshots/)" ]; then \
	  git status --short -- Snapshots/ >&2; \
	  echo "Snapshots/ differs from a fresh rebake: run 'make snapshots' and commit the result." >&2; exit 1; fi
	@echo "Snapshots/ is reproducible."

clean:
	rm -rf .build var

browser-tests: build
	BIN=$(DEBUG_BIN) .ci/browser-tests.sh

live-tests: build
	BIN=$(DEBUG_BIN) .ci/live-tests.sh

# Commit → applied on a waiting client, one instance and two on PostgreSQL; 10,000 waiters' RSS.
bench-live: build-release
	BIN=$(RELEASE_BIN) Benchmarks/bench-live.sh

# Builds clients/typescript (dist/ and the copies in example/) with Debian's tsc and esbuild.
browser-client: deps
	clients/typescript/build.sh

bench-browser: build-release browser-client
	BIN=$(RELEASE_BIN) clients/typescript/bench/run.sh

# Live queries, in both clients (issue 47): the Swift benchmarks are ordo-one ones (release).
bench-queries: build-release browser-client
	$(BENCH) benchmark --filter ".*(observed|nobody observing).*"
	BIN=$(RELEASE_BIN) clients/typescript/bench/run.sh queries
