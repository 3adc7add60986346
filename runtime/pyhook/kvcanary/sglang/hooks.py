"""Hook functions for the targets table, shared by both ways in.

`Binding` holds the process's instruments and builds, per target, ONE hook
callable with SGLang's HookRegistry calling convention:

    BEFORE  fn(*args, **kwargs)           -> None (arguments untouched)
    AFTER   fn(result, *args, **kwargs)   -> None (result untouched)
    AROUND  fn(original, *args, **kwargs) -> original(*args, **kwargs)

The plugin route registers these callables with HookRegistry; the finder route
wraps the class attribute with `wrap()`, which applies them exactly as
HookRegistry's wrappers do. Either way:

- a kvcanary exception never reaches the engine: it is caught, counted, logged
  once per site (target × instrument), and after `MAX_ERRORS` at one site that
  instrument's features there are disabled;
- the original is called exactly once, with the caller's arguments, and its
  result or exception passes through unchanged;
- nothing waits on the device or on I/O (device work is finished off the step
  thread by `Deferred`; events go through the emitter's bounded queue).
"""

from __future__ import annotations

import atexit
import functools
import logging
import threading
import time

from .. import emitter as _emitter  # noqa: F401 - its exit handler registers first, so runs after ours
from . import targets as T

log = logging.getLogger("kvcanary")

MAX_ERRORS = 3  # errors at one site before its instrument is disabled there
MARK = "__kvcanary_target__"  # attribute set on wrappers the finder installs

# Which route applied the hooks in this process: None, "plugin" or "finder".
ROUTE = None


class Site:
    """Error accounting of one (target, instrument) pair."""

    __slots__ = ("binding", "target", "features", "errors", "logged", "synchronous")

    def __init__(self, binding, target: str, features: tuple):
        self.binding = binding
        self.target = target
        self.features = features
        self.errors = 0
        self.logged = False
        # A rank-synchronous feature (the graph-vs-eager rerun, which joins
        # the TP collectives) is never switched off on one rank alone: the
        # other ranks would rerun without it and wait forever. Its errors are
        # counted and logged; the rerun itself always runs.
        self.synchronous = features == ("graphdiff.rerun",)

    def on(self) -> bool:
        return any(self.binding.feature_on(f) for f in self.features)

    def call(self, fn, /, *args, **kwargs):
        """fn(*args, **kwargs), with an exception counted as this site's
        error (fail) instead of raised: returns fn's result, None if it raised."""
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001
            self.fail(e)
            return None

    def fail(self, exc: BaseException) -> None:
        self.errors += 1
        self.binding.stats["errors"] += 1
        if not self.logged:
            self.logged = True
            log.warning("kvcanary: %s at %s raised %s: %s (the engine is unaffected; further "
                        "errors here are counted)", "/".join(self.features), self.target,
                        type(exc).__name__, exc, exc_info=exc)
        if self.errors >= MAX_ERRORS and not self.synchronous:
            self.binding.disable(self.features, "%d errors at %s" % (self.errors, self.target))


class Binding:
    """kvcanary's state in one engine process."""

    def __init__(self, settings=None, emitter=None):
        if settings is None:
            from ..config import Settings

            settings = Settings.from_env()
        self.settings = settings
        self._emitter = emitter  # None: the process-wide emitter, fetched at the first event
        from .deferred import Deferred  # torch: imported once a Binding exists, not by sitecustomize

        self.deferred = Deferred(self.emit)
        # Events still waiting on the device at exit are built before the
        # emitter's own exit handler flushes and closes (atexit runs LIFO).
        atexit.register(self.deferred.flush, 2.0)
        self.disabled: dict = {}  # feature -> reason
        self.infos: list = []  # "<feature> on: <why>" notes for run.end (informational)
        self.resolved: dict = {}  # target name -> targets.Resolved
        self.stats = {"errors": 0}
        self.tls = threading.local()  # .busy: inside kvcanary's own calls into the engine
        self.sites: dict = {}
        from .instruments.canary import Canary
        from .instruments.checksum import Checksum
        from .instruments.graphdiff import GraphDiff

        self.checksum = Checksum(self)
        self.canary = Canary(self)
        self.graphdiff = GraphDiff(self)
        if emitter is not None:
            self._report_to(emitter)

    # -- features -------------------------------------------------------
    def feature_on(self, feature: str) -> bool:
        inst = feature.split(".", 1)[0]
        if inst == "replay":
            on = self.settings.instrument("canary") or self.settings.instrument("graphdiff")
        else:
            on = self.settings.instrument(inst)
        return on and feature not in self.disabled and inst not in self.disabled

    def disable(self, features, reason: str) -> None:
        new = [f for f in features if f not in self.disabled]
        for f in new:
            self.disabled[f] = reason
        if new:
            log.warning("kvcanary: disabled %s: %s", ",".join(new), reason)

    def info(self, note: str) -> None:
        """A note for run.end that loses nothing ("<feature> on: <why>"; notes
        are joined with "; ", so a note never contains one)."""
        note = note.replace("; ", ", ")
        if note not in self.infos:
            self.infos.append(note)
            log.warning("kvcanary: %s", note)

    def note_resolved(self, res: "T.Resolved", version: str | None = None) -> None:
        """Record a resolution; a missing target disables its features with
        ONE log line naming the target and the SGLang version."""
        self.resolved[res.target.name] = res
        if res.ok or not res.target.hooked:
            return
        wanted = [f for f in res.target.features if self.settings.instrument(f.split(".", 1)[0])
                  or f.startswith("replay.")]
        for f in res.target.features:
            self.disabled.setdefault(f, "target missing: " + res.target.name)
        if wanted:
            log.warning("kvcanary: SGLang %s: target %s is missing or changed (%s); disabled %s",
                        version if version is not None else T.sglang_version(), res.target.name,
                        res.error, ",".join(res.target.features))

    def features_state(self) -> dict:
        """{feature: on?} for every feature of the table."""
        return {f: self.feature_on(f) for t in T.TARGETS for f in t.features}

    @property
    def emitter(self):
        if self._emitter is None:
            from ..emitter import get_emitter

            self._emitter = get_emitter()
            self._report_to(self._emitter)
        return self._emitter

    def _report_to(self, em) -> None:
        add = getattr(em, "add_run_end_source", None)
        if add is not None:
            add(self.run_end_report)

    def run_end_report(self):
        """(dropped, error) for this process's run.end: device work dropped or
        failed before it became an event, and every feature switched off
        (missing target, repeated errors) with why. A producer whose run.end
        says nothing lost nothing."""
        st = self.deferred.stats
        dropped = st.get("dropped", 0) + st.get("errors", 0)
        notes = ["%s off: %s" % (f, why) for f, why in sorted(self.disabled.items())
                 if self.settings.instrument(f.split(".", 1)[0]) or f.startswith("replay.")]
        notes.extend(self.infos)
        if self.stats["errors"]:
            notes.append("%d instrument errors" % self.stats["errors"])
        if self.checksum.skipped_not_held:
            notes.append("%d room checksums skipped (index-K on the host)" % self.checksum.skipped_not_held)
        return dropped, "; ".join(notes)

    def note_source(self, role: str, rank: int) -> None:
        """Stamp the emitter's src with this process's PD role and TP rank
        (WIRE.md "Role and rank"), once: the first PD hook that runs knows
        them (the scheduler's disaggregation_mode, its ps.tp_rank)."""
        if getattr(self, "_source_noted", False):
            return
        self._source_noted = True
        try:
            set_source = getattr(self.emitter, "set_source", None)
            if set_source is not None:
                set_source(role, rank)
        except Exception:  # noqa: BLE001 - never into the engine
            pass

    def emit(self, kind: str, body: dict) -> bool:
        try:
            return bool(self.emitter.emit(kind, body))
        except Exception:  # noqa: BLE001 - the emitter promises not to raise; be sure
            return False

    def site(self, target: str, features: tuple) -> Site:
        key = (target, features)
        s = self.sites.get(key)
        if s is None:
            s = self.sites[key] = Site(self, target, features)
        return s

    def busy(self) -> bool:
        return getattr(self.tls, "busy", False)

    # -- hook callables per target ------------------------------------------
    def hook_for(self, target: "T.Target"):
        """The hook callable for `target` (HookRegistry's convention)."""
        name = target.name
        short = name.rsplit(".", 2)[-2:]
        key = ".".join(short)
        if key == "SchedulerDisaggregationPrefillMixin.send_kv_chunk":
            return self._after(name, [(("checksum.sent",), self.checksum.on_send_kv_chunk)])
        if key == "DecodeTransferQueue.pop_transferred":
            return self._after(name, [(("checksum.transferred",), self.checksum.on_pop_transferred),
                                      (("canary.transfer",), self.canary.on_pop_transferred)])
        if key == "SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch":
            return self._before(name, [(("checksum.admitted",), self.checksum.on_prebuilt)])
        if key == "IndexKeyCache.move":
            return self._before(name, [(("canary.between",), self.canary.on_move)])
        if key == "ModelRunner.init_indexer_capturer":
            return self._after(name, [(("graphdiff.topk",), self.graphdiff.on_init_capturer)])
        if key == "DecodeCudaGraphRunner.execute":
            return self._around_execute(name)
        if key == "ModelRunner._forward_raw":
            return self._around_forward_raw(name)
        raise KeyError("no hook for target %s" % name)

    def _before(self, target, handlers):
        sites = [(self.site(target, feats), fn) for feats, fn in handlers]

        def kvcanary_before(*args, **kwargs):
            if self.busy():
                return None
            for site, fn in sites:
                if site.on():
                    site.call(fn, *args, **kwargs)
            return None

        kvcanary_before.kvcanary_target = target
        return kvcanary_before

    def _after(self, target, handlers):
        sites = [(self.site(target, feats), fn) for feats, fn in handlers]

        def kvcanary_after(result, *args, **kwargs):
            if self.busy():
                return None
            for site, fn in sites:
                if site.on():
                    site.call(fn, result, *args, **kwargs)
            return None

        kvcanary_after.kvcanary_target = target
        return kvcanary_after

    def _around_execute(self, target):
        """AROUND DecodeCudaGraphRunner.execute(self, forward_batch, pp_proxy_tensors=None):
        graphdiff's eager rerun of a sampled graph step. It restores every
        row it lets the rerun write, so the state the engine continues from
        (and the canary's after-snapshot, taken around _forward_raw) is the
        graph's."""
        s_graph = self.site(target, ("graphdiff.rerun",))

        def kvcanary_around(original, *args, **kwargs):
            if self.busy():
                return original(*args, **kwargs)
            runner, fb = self_and_batch(args, kwargs)
            gst = s_graph.call(self.graphdiff.pre, runner, fb) if s_graph.on() else None
            result = original(*args, **kwargs)
            if gst is not None:
                pp = args[2] if len(args) > 2 else kwargs.get("pp_proxy_tensors")
                s_graph.call(self.graphdiff.post, gst, runner, fb, pp, result)
            return result

        kvcanary_around.kvcanary_target = target
        return kvcanary_around

    def _around_forward_raw(self, target):
        """AROUND ModelRunner._forward_raw(self, forward_batch, ...), decode
        forwards only: the canary's before- and after-snapshots and the
        replay event, for graph replays and eager steps alike (a batch above
        the largest captured bucket runs eager_runner.execute, and the
        engine's writes there need the same canary).

        Graph or eager comes from the result's can_run_graph (a
        ModelRunnerOutput; a tuple in older versions); the bucket from the
        graph runner's bs, set by
        its load_batch during the call. An unrecognised result leaves the mode
        unknown: the canary still runs (no padding claimed) and no replay
        event is sent, since a replay's mode is graph or eager, never a guess.
        """
        s_canary = self.site(target, ("canary.replay",))
        s_replay = self.site(target, ("replay.step",))

        def kvcanary_around(original, *args, **kwargs):
            if self.busy():
                return original(*args, **kwargs)
            mr, fb = self_and_batch(args, kwargs)
            if not is_decode(fb):
                return original(*args, **kwargs)
            step = StepView(mr, fb)
            cst = s_canary.call(self.canary.pre, step, fb) if s_canary.on() else None
            t0 = time.perf_counter_ns()
            result = original(*args, **kwargs)
            dur = time.perf_counter_ns() - t0
            step.settle(result)
            if cst is not None:
                s_canary.call(self.canary.post, cst, step, fb, result)
            if s_replay.on() and step.mode is not None:
                s_replay.call(self._replay_event, step, dur)
            return result

        kvcanary_around.kvcanary_target = target
        return kvcanary_around

    def _replay_event(self, step: "StepView", dur_ns: int) -> None:
        body = {"step": step_of(step), "bs": step.raw_bs, "mode": step.mode, "dur_ns": max(0, int(dur_ns))}
        if step.mode == "graph" and step.bs:
            body["bucket"] = step.bs
        self.emit("replay", body)

    def apply_features(self, names=None):
        """Iterate (target, hook callable) for every hooked target whose
        features are wanted and that resolved (names: limit to these)."""
        for t in T.TARGETS:
            if not t.hooked or (names is not None and t.name not in names):
                continue
            res = self.resolved.get(t.name)
            if res is None or not res.ok:
                continue
            if not any(self.feature_on(f) for f in t.features):
                continue
            yield t, res, self.hook_for(t)


def self_and_batch(args, kwargs):
    """(self, forward_batch) of a call to a hooked method, positional or keyword."""
    return (args[0] if args else kwargs.get("self"),
            args[1] if len(args) > 1 else kwargs.get("forward_batch"))


def is_decode(fb) -> bool:
    """forward_batch.forward_mode.is_decode(), False when it cannot tell."""
    fm = getattr(fb, "forward_mode", None)
    f = getattr(fm, "is_decode", None)
    try:
        return bool(f()) if callable(f) else False
    except Exception:  # noqa: BLE001 - an engine's mode object we do not know
        return False


class StepView:
    """One decode forward as the canary and the replay event see it: the
    ModelRunner (model_runner), the rows it ran (raw_bs), and once the call
    returned whether the graph replayed (mode) on which bucket (bs)."""

    def __init__(self, mr, fb):
        self.model_runner = mr
        self.raw_bs = int(getattr(fb, "batch_size", 0) or 0)
        self.bs = None
        self.mode = None

    def settle(self, result) -> None:
        """Read graph-or-eager from _forward_raw's result: a ModelRunnerOutput
        (.can_run_graph, current SGLang) or an (output, can_run_graph) tuple
        (earlier versions)."""
        graph = getattr(result, "can_run_graph", None)
        if graph is None and isinstance(result, tuple) and len(result) == 2:
            graph = result[1]
        if not isinstance(graph, bool):
            return
        if not graph:
            self.mode, self.bs = "eager", self.raw_bs
            return
        self.mode = "graph"
        g = getattr(self.model_runner, "decode_cuda_graph_runner", None)
        raw, bs = getattr(g, "raw_bs", None), getattr(g, "bs", None)
        if isinstance(raw, int) and isinstance(bs, int) and raw == self.raw_bs:
            self.bs = bs


def step_of(runner) -> int:
    """The rank-synchronous step id: model_runner.forward_pass_id (-1 if absent)."""
    mr = getattr(runner, "model_runner", runner)
    v = getattr(mr, "forward_pass_id", None)
    return int(v) if isinstance(v, int) else -1


def wrap(original, hook, hook_type: str, target: str):
    """Apply `hook` to `original` as HookRegistry does (finder route)."""
    if hook_type == T.BEFORE:
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            r = hook(*args, **kwargs)
            if r is not None:
                args, kwargs = r
            return original(*args, **kwargs)
    elif hook_type == T.AFTER:
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            result = original(*args, **kwargs)
            r = hook(result, *args, **kwargs)
            return r if r is not None else result
    elif hook_type == T.AROUND:
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            return hook(original, *args, **kwargs)
    else:
        raise ValueError("hook type %r" % hook_type)
    wrapper.__wrapped__ = original
    setattr(wrapper, MARK, target)
    return wrapper


def is_kvcanary_wrapped(func) -> bool:
    """Whether func (or anything it wraps) is a kvcanary finder wrapper, or a
    HookRegistry wrapper around one of kvcanary's hook callables."""
    seen = 0
    f = func
    while f is not None and seen < 32:
        if getattr(f, MARK, None) or getattr(f, "kvcanary_target", None):
            return True
        for cell in getattr(f, "__closure__", None) or ():
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            if getattr(v, "kvcanary_target", None):
                return True
        f = getattr(f, "__wrapped__", None)
        seen += 1
    return False


_binding = None
_binding_lock = threading.Lock()


def get_binding() -> Binding:
    """The process's Binding (created on first use from the environment)."""
    global _binding
    if _binding is None:
        with _binding_lock:
            if _binding is None:
                b = Binding()
                b.settings.apply_logging()
                _binding = b
    return _binding


def set_binding(b) -> None:
    """Replace the process's Binding (tests)."""
    global _binding
    _binding = b
