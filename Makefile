# kvcanary — the two set-up commands are `make run` and `make test`.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/kvcanary/kvcanary/internal/buildinfo.Version=$(VERSION)
BIN     := bin/kvcanary

.PHONY: all build run test vet fmt-check bench clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/kvcanary

# The main job, on the embedded twin (no GPU needed).
run: build
	./$(BIN) demo

# Every test: vet, formatting, the suite at full speed (the twin's acceptance
# tests run their real sizes), then again under the race detector (where the
# heaviest twin runs scale down or skip, as they say).
test: vet fmt-check
	$(GO) test -count=1 ./...
	$(GO) test -race -count=1 ./...

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
