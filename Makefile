# kvcanary — the two set-up commands are `make run` and `make test`;
# `make check` is the quick loop while editing (under 2 minutes).
GO      ?= go
# The interpreter of the Python package's tests: Debian's python3-torch and
# python3-pytest are installed for /usr/bin/python3 (the python3 first on
# PATH may be another one without them). Override with PYTHON=...
PYTHON  ?= /usr/bin/python3
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Commit and its time go in by link flags too: the Go toolchain's own VCS
# stamp (vcs.revision) is off where GOFLAGS holds -buildvcs=false, and absent
# in a git worktree. Outside git both stay empty and the binary says
# "commit unknown" (or falls back to the toolchain's stamp).
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
DATE    ?= $(shell git log -1 --format=%cI 2>/dev/null)
PKG     := github.com/kvcanary/kvcanary/internal/buildinfo
LDFLAGS := -X $(PKG).Version=$(VERSION) -X $(PKG).Commit=$(COMMIT) -X $(PKG).Date=$(DATE)
BIN     := bin/kvcanary

# ---- quiet build (issue 14) -------------------------------------------------
# go-nvml's nvml.h marks functions deprecated that its cgo bindings still
# wrap: every cold build printed 148 lines of -Wdeprecated-declarations from
# a dependency. Go's default CGO_CFLAGS is "-O2 -g"; we keep it and add the one
# switch. A CGO_CFLAGS from the environment still wins.
CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
export CGO_CFLAGS

# Where `make install` puts the binary: $(PREFIX)/bin (default /usr/local/bin,
# on PATH on every common Linux; needs root). PREFIX=$$HOME/.local for a user.
PREFIX  ?= /usr/local

.PHONY: all build run test check vet fmt-check pytest bench clean install dist docs

all: build

# Quiet: `make run` prints the demo and nothing else (set V=1 to see the command).
build:
	$(if $(V),,@)$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/kvcanary

# The main job, on the embedded twin (no GPU needed).
run: build
	@./$(BIN) demo

install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/kvcanary
	@echo "installed $(DESTDIR)$(PREFIX)/bin/kvcanary"

# Release archives for linux amd64 and arm64 into dist/ without GoReleaser:
# the same binaries .goreleaser.yaml builds (cgo on for both; arm64 needs
# the aarch64-linux-gnu-gcc cross compiler, Debian's gcc-aarch64-linux-gnu;
# without it arm64 is built with CGO_ENABLED=0, which has no NVML, and the
# archive name says so). With goreleaser on PATH, `make dist GORELEASER=1`
# runs `goreleaser release --snapshot --clean` instead.
dist:
ifdef GORELEASER
	goreleaser release --snapshot --clean
else
	@rm -rf dist && mkdir -p dist
	GOOS=linux GOARCH=amd64 CGO_ENABLED=1 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o dist/kvcanary_linux_amd64/kvcanary ./cmd/kvcanary
	@if command -v aarch64-linux-gnu-gcc >/dev/null 2>&1; then \
		echo "GOOS=linux GOARCH=arm64 CGO_ENABLED=1 CC=aarch64-linux-gnu-gcc go build ..."; \
		GOOS=linux GOARCH=arm64 CGO_ENABLED=1 CC=aarch64-linux-gnu-gcc $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o dist/kvcanary_linux_arm64/kvcanary ./cmd/kvcanary; \
	else \
		echo "dist: aarch64-linux-gnu-gcc not found: linux/arm64 built without cgo (no NVML: kvcanary gpu says so)"; \
		GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o dist/kvcanary_linux_arm64_nocgo/kvcanary ./cmd/kvcanary; \
	fi
	@cd dist && for d in kvcanary_linux_*; do cp ../LICENSE ../README.md $$d/ && tar -czf $$d.tar.gz $$d; done && sha256sum *.tar.gz > checksums.txt && cat checksums.txt
endif

# Man pages and the Markdown command reference, generated from the cobra
# commands into docs/cli (TestDocsFresh fails when they are stale).
docs: build
	./$(BIN) gen-docs docs/cli
# ------------------------------------------------------------------------------

# Every test: vet, formatting, the Python package's tests, the suite at full
# speed (the twin's acceptance tests run their real sizes), then again under
# the race detector (where the heaviest twin runs scale down or skip, as they
# say). The Python tests run beside the Go passes, their output kept in
# bin/pytest.log and printed when they end: alone they kept one of the two
# cores busy (215 CPU-s in 348 s wall, mostly waiting on the stand-in's
# processes), so side by side the whole fits in less wall time. Every part
# runs even when an earlier one failed; the exit status is non-zero when any
# did. Expected time: README, Set up.
# TEST_TIMEOUT bounds each package's test binary (go test -timeout; Go's
# default is 10 minutes): the slowest, cmd/kvcanary under -race, took over
# 10 minutes of wall time on an idle 2-core machine (beside the other
# packages and the Python tests), so a hang fails with a stack dump while a
# loaded machine, at twice that, still fits.
TEST_TIMEOUT ?= 30m
PYTEST_CMD = PYTHONDONTWRITEBYTECODE=1 KVCANARY_BIN=$(CURDIR)/$(BIN) $(PYTHON) -m pytest -q -rs -p no:cacheprovider runtime/pyhook/tests
test: vet fmt-check build
	@echo "pytest: the Python package's tests run in the background (bin/pytest.log), printed when they end"
	@$(PYTEST_CMD) > bin/pytest.log 2>&1 & py=$$!; status=0; \
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./... || status=1; \
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./... || status=1; \
	wait $$py || { status=1; echo "pytest FAILED:"; }; \
	echo "---- pytest (bin/pytest.log) ----"; cat bin/pytest.log; exit $$status

# The edit-test loop: formatting, vet and every Go package's tests with
# -short (no race detector, no twin acceptance sizes, no tests that build
# the kvcanary binary, no Prometheus). Under 2 minutes on 2 cores with a
# warm build cache; `make test` before sending a change.
check: fmt-check vet
	$(GO) test -short -count=1 -timeout 10m ./...

# The in-engine Python package (runtime/pyhook): torch on the CPU, a stand-in
# of SGLang's interfaces, and the stand-in's bundles judged end to end by the
# binary built here (KVCANARY_BIN). No byte code is written into the tree the
# binary embeds.
pytest: build
	$(PYTEST_CMD)

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Benchmarks quoted in BENCHMARKS.md (medians of -count runs).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./... | tee bench.txt

clean:
	rm -rf bin bench.txt dist
