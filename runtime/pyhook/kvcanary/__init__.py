"""kvcanary's in-engine hooks: room checksums, replay canaries and
graph-vs-eager reruns computed inside an inference engine's processes, sent as
events over kvcanary's wire protocol (runtime/hook/WIRE.md) to a collector.

The package is a source: it observes and emits; every judgement is made by the
Go analyzers. It needs only torch (numpy optional) and never raises into, or
blocks, the engine's step thread.
"""

__version__ = "0.2.0"
