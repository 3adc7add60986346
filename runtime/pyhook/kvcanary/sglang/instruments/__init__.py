"""kvcanary's instruments inside SGLang: room checksums (checksum.py), the
replay canary (canary.py) and graph-vs-eager reruns (graphdiff.py). Each one
only observes and emits; the Go analyzers judge."""
