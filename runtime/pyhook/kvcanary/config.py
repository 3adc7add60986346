"""Settings of the in-engine hooks, read from KVCANARY_* environment variables.

`kvcanary wrap` sets them from its flags; a manual setup exports them before
starting the engine. Every variable is optional. A value that does not parse
logs ONE warning naming the variable and the value and falls back to the
default: a typo in a setting must never stop (or crash) an inference engine.

| variable                   | default                    | field              |
|----------------------------|----------------------------|--------------------|
| KVCANARY_ADDR              | unset: hooks off           | addr               |
| KVCANARY_RUN               | ""                         | run                |
| KVCANARY_INSTRUMENTS       | checksum,canary,graphdiff  | instruments        |
| KVCANARY_CANARY_POLICY     | live                       | canary_policy      |
| KVCANARY_CANARY_EVERY      | 64                         | canary_every       |
| KVCANARY_GRAPHDIFF_EVERY   | 256                        | graphdiff_every    |
| KVCANARY_GRAPHDIFF_LAYERS  | "" (none)                  | graphdiff_layers   |
| KVCANARY_GRAPHDIFF_LOGITS  | topk:20                    | graphdiff_logits   |
| KVCANARY_CHECKSUM_PAGES    | 1                          | checksum_pages     |
| KVCANARY_QUEUE             | 4096                       | queue              |
| KVCANARY_LOG               | warning                    | log                |
| KVCANARY_TLS_CERT          | "" (no TLS)                | tls_cert           |
| KVCANARY_TLS_KEY           | ""                         | tls_key            |
| KVCANARY_TLS_CA            | ""                         | tls_ca             |

The three TLS_ variables make a tcp:// connection TLS 1.3 with a client
certificate (a collector listening on a non-loopback address requires it):
TLS_CERT and TLS_KEY are the PEM client certificate and key, TLS_CA the PEM
CA that signed the collector's certificate. `kvcanary certs init` makes all
of them. Setting some but not all three is refused (one warning, nothing
sent) rather than falling back to a plain connection.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
from dataclasses import dataclass
from typing import Mapping

log = logging.getLogger("kvcanary")

INSTRUMENTS = ("checksum", "canary", "graphdiff")
LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
              "warn": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL}
MAX_QUEUE = 1 << 20  # events; beyond this a queue is a memory leak, not a buffer


class SettingError(ValueError):
    """A KVCANARY_* value that does not parse (the message names the problem)."""


@dataclass(frozen=True)
class Addr:
    """A parsed collector address."""

    scheme: str  # "unix" | "tcp"
    path: str = ""  # unix socket path
    host: str = ""  # tcp host (as given; brackets stripped)
    port: int = 0

    @property
    def loopback(self) -> bool:
        if self.scheme == "unix":
            return True
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def __str__(self) -> str:
        if self.scheme == "unix":
            return "unix://" + self.path
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "tcp://%s:%d" % (host, self.port)


def parse_addr(s: str) -> Addr:
    """Parse `unix:///abs/path.sock` or `tcp://HOST:PORT` (WIRE.md's transports).

    Any TCP host is accepted here because the caller gave it explicitly; the
    collector itself refuses non-loopback listeners unless told otherwise, and
    kvcanary never picks a non-loopback address on its own.
    """
    if s.startswith("unix://"):
        path = s[len("unix://"):]
        if not path.startswith("/"):
            raise SettingError("unix address %r: want an absolute path, unix:///path/to.sock" % s)
        if "\x00" in path:
            raise SettingError("unix address %r: NUL byte in path" % s)
        return Addr("unix", path=path)
    if s.startswith("tcp://"):
        rest = s[len("tcp://"):]
        if rest.startswith("["):
            end = rest.find("]")
            if end < 0 or not rest[end + 1:].startswith(":"):
                raise SettingError("tcp address %r: want tcp://[::1]:PORT" % s)
            host, port_s = rest[1:end], rest[end + 2:]
        else:
            host, sep, port_s = rest.rpartition(":")
            if not sep or ":" in host:
                raise SettingError("tcp address %r: want tcp://HOST:PORT" % s)
        if not host:
            raise SettingError("tcp address %r: empty host (a producer needs a host to dial, e.g. 127.0.0.1)" % s)
        if not port_s.isdigit() or not 0 < int(port_s) < 65536:
            raise SettingError("tcp address %r: port %r is not in 1..65535" % (s, port_s))
        return Addr("tcp", host=host, port=int(port_s))
    raise SettingError("address %r: want unix:///path or tcp://127.0.0.1:PORT" % s)


def _parse_instruments(s: str) -> frozenset:
    """Comma list; "" enables none. An unknown name is warned about and
    ignored (falling back to all three would turn on what the user left out)."""
    names = [n.strip().lower() for n in s.split(",") if n.strip()]
    for i, n in enumerate(names):
        if n not in INSTRUMENTS:
            log.warning("kvcanary: KVCANARY_INSTRUMENTS=%r: item %d %r is not an instrument "
                        "(known: %s); ignoring it", s, i + 1, n, ",".join(INSTRUMENTS))
    return frozenset(n for n in names if n in INSTRUMENTS)


def _word_or_counted(s: str, words: tuple, prefix: str, want: str) -> str:
    """One of words, or "<prefix>:N" with N >= 1 (normalised); else
    SettingError(want)."""
    v = s.strip().lower()
    if v in words:
        return v
    if v.startswith(prefix + ":"):
        n = v[len(prefix) + 1:]
        if n.isdigit() and int(n) >= 1:
            return "%s:%d" % (prefix, int(n))
        raise SettingError("%s:N needs N >= 1, got %r" % (prefix, n))
    raise SettingError(want)


def _parse_policy(s: str) -> str:
    return _word_or_counted(s, ("live", "all"), "sweep", "want live, all or sweep:N")


def _parse_every(s: str) -> int:
    v = s.strip()
    if not v.isdigit() or int(v) < 1:
        raise SettingError("want an integer >= 1")
    return int(v)


def _parse_layers(s: str):
    v = s.strip().lower()
    if v == "":
        return ()
    if v == "all":
        return "all"
    out = []
    for i, part in enumerate(v.split(",")):
        p = part.strip()
        if not p.isdigit():
            raise SettingError("item %d %r is not a layer id (want comma ids or all)" % (i + 1, part))
        out.append(int(p))
    return tuple(sorted(set(out)))


def _parse_logits(s: str) -> str:
    return _word_or_counted(s, ("full", "none"), "topk", "want full, topk:N or none")


def _parse_bool(s: str) -> bool:
    v = s.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off", ""):
        return False
    raise SettingError("want 1 or 0")


def _parse_queue(s: str) -> int:
    v = s.strip()
    if not v.isdigit() or not 1 <= int(v) <= MAX_QUEUE:
        raise SettingError("want an integer in 1..%d" % MAX_QUEUE)
    return int(v)


def _parse_log(s: str) -> str:
    v = s.strip().lower()
    if v not in LOG_LEVELS:
        raise SettingError("want debug, info, warning, error or critical")
    return "warning" if v == "warn" else v


def _parse_addr_str(s: str):
    v = s.strip()
    if v == "":
        return None  # set but empty: hooks off, like unset
    parse_addr(v)
    return v


@dataclass(frozen=True)
class Settings:
    """The hooks' settings. Build with `Settings.from_env()`; the defaults are the
    values of an unset environment."""

    addr: str | None = None  # collector address; None: hooks off
    run: str = ""  # run id written on every event
    instruments: frozenset = frozenset(INSTRUMENTS)  # enabled instruments
    canary_policy: str = "live"  # "live" | "all" | "sweep:N" (normalised)
    # check decode steps in one window of N (forward_pass_id % N == 0, and the next
    # step for the between phase). 64 keeps canary + checksums under 5% of a 30 ms
    # DeepSeek-V3.2 step with eager torch digests (README "Cost model"); 1 checks
    # every step (tests, small models, or a fused digest kernel).
    canary_every: int = 64
    graphdiff_every: int = 256  # rerun one graph step in N eagerly
    graphdiff_layers: tuple | str = ()  # indexer layer ids, () none, or "all"
    graphdiff_logits: str = "topk:20"  # "full" | "topk:N" | "none" (normalised)
    checksum_pages: bool = True  # send page_bsum with room checksums
    queue: int = 4096  # emitter queue length (events)
    log: str = "warning"  # level of the "kvcanary" logger
    tls_cert: str = ""  # PEM client certificate for a TLS (mTLS) collector
    tls_key: str = ""  # PEM key of tls_cert
    tls_ca: str = ""  # PEM CA that signed the collector's certificate

    @property
    def enabled(self) -> bool:
        """Hooks are on: a collector address is set."""
        return self.addr is not None

    def instrument(self, name: str) -> bool:
        """Whether instrument `name` is on (needs an address too)."""
        return self.addr is not None and name in self.instruments

    @property
    def canary_sweep(self) -> int:
        """N of `sweep:N`, else 0."""
        return int(self.canary_policy[6:]) if self.canary_policy.startswith("sweep:") else 0

    @property
    def logits_mode(self) -> str:
        """"full", "topk" or "none"."""
        return self.graphdiff_logits.split(":", 1)[0]

    @property
    def logits_k(self) -> int:
        """N of `topk:N`, else 0."""
        return int(self.graphdiff_logits[5:]) if self.graphdiff_logits.startswith("topk:") else 0

    def graphdiff_layer(self, layer_id: int) -> bool:
        """Whether the indexer top-k of `layer_id` is compared."""
        return self.graphdiff_layers == "all" or layer_id in self.graphdiff_layers

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        """Read every KVCANARY_* variable of `environ` (default os.environ).

        Never raises: a bad value logs one warning ("KVCANARY_X=value: problem;
        using the default D") and the default is used.
        """
        env = os.environ if environ is None else environ
        defaults = cls()
        values = {}
        for var, (field, parse) in _VARS.items():
            raw = env.get(var)
            if raw is None:
                continue
            try:
                values[field] = parse(raw)
            except Exception as e:  # noqa: BLE001 - a setting never raises into the engine
                log.warning("kvcanary: %s=%r: %s; using the default %r", var, raw, e,
                            _show(getattr(defaults, field)))
        return dataclasses.replace(defaults, **values)

    def apply_logging(self) -> None:
        """Set the level of the "kvcanary" logger to `log`."""
        log.setLevel(LOG_LEVELS[self.log])


def _parse_path(s: str) -> str:
    v = s.strip()
    if not v:
        raise SettingError("empty path")
    if "\x00" in v:
        raise SettingError("NUL byte in path")
    return v


def _show(v):
    if isinstance(v, frozenset):
        return ",".join(n for n in INSTRUMENTS if n in v)
    return v


_VARS = {
    "KVCANARY_ADDR": ("addr", _parse_addr_str),
    "KVCANARY_RUN": ("run", str),
    "KVCANARY_INSTRUMENTS": ("instruments", _parse_instruments),
    "KVCANARY_CANARY_POLICY": ("canary_policy", _parse_policy),
    "KVCANARY_CANARY_EVERY": ("canary_every", _parse_every),
    "KVCANARY_GRAPHDIFF_EVERY": ("graphdiff_every", _parse_every),
    "KVCANARY_GRAPHDIFF_LAYERS": ("graphdiff_layers", _parse_layers),
    "KVCANARY_GRAPHDIFF_LOGITS": ("graphdiff_logits", _parse_logits),
    "KVCANARY_CHECKSUM_PAGES": ("checksum_pages", _parse_bool),
    "KVCANARY_QUEUE": ("queue", _parse_queue),
    "KVCANARY_LOG": ("log", _parse_log),
    "KVCANARY_TLS_CERT": ("tls_cert", _parse_path),
    "KVCANARY_TLS_KEY": ("tls_key", _parse_path),
    "KVCANARY_TLS_CA": ("tls_ca", _parse_path),
}
VARIABLES = tuple(_VARS)
