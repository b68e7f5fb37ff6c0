# DeltaSnap — the verbs a newcomer needs. Every target installs missing system packages.
SWIFT ?= swift
DEBUG_BIN := .build/debug/deltasnap
RELEASE_BIN := .build/release/deltasnap
# Where `make run` keeps its embedded store.
DB ?= var/deltasnap.sqlite
HOST ?= 127.0.0.1
PORT ?= 8080
# Pinned so a fresh store baked from the same sample gives byte-identical snapshots.
SAMPLE_EPOCH := 00000000005a3b1e
SAMPLE_DATE := 1767225600

.PHONY: deps build build-release run serve demo test bench bench-http fuzz snapshots check-snapshots clean help

help:
	@echo "make run         import the sample into $(DB) if absent, bake it, and serve it on $(HOST):$(PORT)"
	@echo "make test        the whole test suite, and a check that the committed snapshots rebake identically"
	@echo "make demo        an end-to-end walk: serve, offline first start, 304, delta, reset"
	@echo "make bench       micro-benchmarks (ordo-one/benchmark, release)"
	@echo "make bench-http  wrk against deltasnap serve and nginx serving the same bytes"
	@echo "make fuzz        libFuzzer on every parser, FUZZ_SECONDS (60) per target"
	@echo "make snapshots   rebake Snapshots/ from Snapshots/sample/ (reproducible)"

deps:
	@.ci/install-deps.sh

build: deps
	$(SWIFT) build --product deltasnap

build-release: deps
	$(SWIFT) build -c release --product deltasnap

run: build-release
	@mkdir -p $(dir $(DB))
	@if [ ! -f $(DB) ]; then $(RELEASE_BIN) import --db $(DB) --collection countries Snapshots/sample/countries.ndjson; fi
	$(RELEASE_BIN) bake --db $(DB) --collection countries --out var/snapshots
	$(RELEASE_BIN) inspect var/snapshots/countries.snapshot
	$(RELEASE_BIN) serve --db $(DB) --host $(HOST) --port $(PORT)

# Serves $(DB) as it is (writes enabled when DELTASNAP_WRITE_TOKEN is set).
serve: build-release
	$(RELEASE_BIN) serve --db $(DB) --host $(HOST) --port $(PORT)

demo: build
	@.ci/demo.sh

bench: deps
	cd Benchmarks && $(SWIFT) package --allow-writing-to-package-directory benchmark

bench-http: deps
	Benchmarks/bench-http.sh

# libFuzzer + ASan on the JSON reader, record scanner, body reader, gzip, HTTP dates and
# validators; a crash leaves its input in .build/fuzz/artifacts/.
FUZZ_SECONDS ?= 60
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) Fuzz/run.sh

test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test
	$(MAKE) --no-print-directory check-snapshots
	@# The fuzz driver must keep building, and every seed must keep its invariants
	@# (deterministic: no mutation here; `make fuzz` searches).
	FUZZ_SEEDS_ONLY=1 Fuzz/run.sh

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
