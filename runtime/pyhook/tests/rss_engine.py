"""An "engine" for the emitter's memory bound (test_emitter_bound.py): emits
N large events to a collector that never reads and prints its RSS before and
after as JSON. argv: addr shape(str|floats) n queue_bytes(0: the emitter's default)."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kvcanary.emitter import Emitter  # noqa: E402


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


addr, shape, n, qbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
kw = {"queue_bytes": qbytes} if qbytes else {}
em = Emitter(addr, proc="engine", write_timeout=600.0, **kw)
base = rss()
ok = 0
for i in range(n):
    if shape == "str":  # 1 MiB, distinct every time (as model output or base64 logits are)
        body = {"id": "s%d" % i, "outcome": "error", "rounds": 1, "reason": ("%08d" % i) * (1 << 17)}
    else:  # 32768 floats: 1 MiB of float objects and list slots
        body = {"step": i, "logits": [i + j * 0.5 for j in range(1 << 15)]}
    ok += em.emit("session" if shape == "str" else "graphdiff.sample", body)
    body = None
print(json.dumps({"base": base, "peak": rss(), "queued": ok, "dropped": em.stats["dropped"],
                  "dropped_kinds": getattr(em, "dropped_kinds", None)}), flush=True)
os._exit(0)  # no close(): the collector never reads
