# kvcanary — the two set-up commands are `make run` and `make test`.
GO      ?= go
# The interpreter of the Python package's tests: Debian's python3-torch and
# python3-pytest are installed for /usr/bin/python3 (the python3 first on
# PATH may be another one without them). Override with PYTHON=...
PYTHON  ?= /usr/bin/python3
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/kvcanary/kvcanary/internal/buildinfo.Version=$(VERSION)
BIN     := bin/kvcanary

.PHONY: all build run test vet fmt-check pytest bench clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/kvcanary

# The main job, on the embedded twin (no GPU needed).
run: build
	./$(BIN) demo

# Every test: vet, formatting, the Python package's tests, the suite at full
# speed (the twin's acceptance tests run their real sizes), then again under
# the race detector (where the heaviest twin runs scale down or skip, as they
# say).
test: vet fmt-check pytest
	$(GO) test -count=1 ./...
	$(GO) test -race -count=1 ./...

# The in-engine Python package (runtime/pyhook): torch on the CPU, a stand-in
# of SGLang's interfaces, and the stand-in's bundles judged end to end by the
# binary built here (KVCANARY_BIN). No byte code is written into the tree the
# binary embeds.
pytest: build
	PYTHONDONTWRITEBYTECODE=1 KVCANARY_BIN=$(CURDIR)/$(BIN) $(PYTHON) -m pytest -q -rs -p no:cacheprovider runtime/pyhook/tests

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Benchmarks quoted in BENCHMARKS.md (medians of -count runs).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./... | tee bench.txt

clean:
	rm -rf bin bench.txt
