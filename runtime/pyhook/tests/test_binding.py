"""The binding's plumbing: target resolution, the check CLI, the finder, the
plugin route and sitecustomize, first on a minimal generated `sglang` package
(every target with the reference's signature, nothing else), then on the
stand-in (tests/standin) when it is present.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PYHOOK = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SITE = os.path.join(PYHOOK, "sitecustomize")
STANDIN = os.path.join(PYHOOK, "tests", "standin")
PY = sys.executable

MINI = {
    "sglang/__init__.py": '__version__ = "0.0.mini"\n',
    "sglang/srt/__init__.py": "",
    "sglang/srt/disaggregation/__init__.py": "",
    "sglang/srt/disaggregation/prefill.py": """
        CALLS = []
        class SchedulerDisaggregationPrefillMixin:
            def send_kv_chunk(self, req, last_chunk=False, end_idx=None):
                CALLS.append(last_chunk)
                return "orig"
    """,
    "sglang/srt/disaggregation/decode.py": """
        class DecodeTransferQueue:
            def pop_transferred(self, rids_to_check=None):
                return []
        class SchedulerDisaggregationDecodeMixin:
            def get_new_prebuilt_batch(self, running_batch):
                return None
    """,
    "sglang/srt/model_executor/__init__.py": "",
    "sglang/srt/model_executor/runner/__init__.py": "",
    "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py": """
        class DecodeCudaGraphRunner:
            def execute(self, forward_batch, pp_proxy_tensors=None):
                return None
    """,
    "sglang/srt/model_executor/model_runner.py": """
        class ModelRunner:
            def init_indexer_capturer(self):
                pass
            def _forward_raw(self, forward_batch, pp_proxy_tensors, reinit_attn_backend=False, split_forward_count=1):
                pass
    """,
    "sglang/srt/mem_cache/__init__.py": "",
    "sglang/srt/mem_cache/index_key_cache.py": """
        class IndexKeyCache:
            def move(self, tgt_loc, src_loc):
                pass
    """,
    "sglang/srt/state_capturer/__init__.py": "",
    "sglang/srt/state_capturer/indexer_topk.py": """
        _c = None
        def get_global_indexer_capturer():
            return _c
        def set_global_indexer_capturer(c):
            global _c
            _c = c
    """,
}


def write_pkg(root, files, edits=None):
    for rel, src in dict(files, **(edits or {})).items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(textwrap.dedent(src))
    return str(root)


def run_py(code, pythonpath, env=None, timeout=120):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("KVCANARY_", "SGLANG_"))}
    e["PYTHONPATH"] = os.pathsep.join(pythonpath)
    e.update(env or {})
    return subprocess.run([PY, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                          timeout=timeout)


# --- check -----------------------------------------------------------------------------------


def check_json(paths, env=None):
    r = run_py("import sys, runpy; sys.argv=['x','check','--json']; runpy.run_module('kvcanary.sglang', run_name='__main__')",
               paths, env)
    return r


def test_check_all_ok_on_a_complete_sglang(tmp_path):
    root = write_pkg(tmp_path, MINI)
    r = check_json([PYHOOK, root])
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["sglang_version"] == "0.0.mini"
    hooked = [t for t in rep["targets"] if t["hooked"]]
    assert len(hooked) == 7 and all(t["ok"] and t["error"] == "" for t in hooked)
    ex = next(t for t in rep["targets"] if t["target"].endswith("DecodeCudaGraphRunner.execute"))
    assert ex["hook"] == "AROUND" and ex["instruments"] == ["graphdiff"]
    fr = next(t for t in rep["targets"] if t["target"].endswith("ModelRunner._forward_raw"))
    assert fr["hook"] == "AROUND" and fr["instruments"] == ["canary"]


def test_check_reports_a_renamed_method_and_a_changed_signature(tmp_path):
    root = write_pkg(tmp_path, MINI, {
        "sglang/srt/mem_cache/index_key_cache.py": """
            class IndexKeyCache:
                def move_kv(self, tgt_loc, src_loc):
                    pass
        """,
        "sglang/srt/disaggregation/decode.py": """
            class DecodeTransferQueue:
                def pop_transferred(self, rids):
                    return []
            class SchedulerDisaggregationDecodeMixin:
                def get_new_prebuilt_batch(self, running_batch):
                    return None
        """})
    r = check_json([PYHOOK, root])
    assert r.returncode == 1
    rep = json.loads(r.stdout)
    bad = {t["target"].rsplit(".", 2)[-2] + "." + t["target"].rsplit(".", 1)[-1]: t["error"]
           for t in rep["targets"] if not t["ok"]}
    assert set(bad) == {"IndexKeyCache.move", "DecodeTransferQueue.pop_transferred"}
    assert "no attribute 'move'" in bad["IndexKeyCache.move"]
    assert "'rids', want 'rids_to_check'" in bad["DecodeTransferQueue.pop_transferred"]
    # The table form names them too.
    r = run_py("import sys, runpy; sys.argv=['x','check']; runpy.run_module('kvcanary.sglang', run_name='__main__')",
               [PYHOOK, root])
    assert r.returncode == 1 and "MISSING  BEFORE sglang.srt.mem_cache.index_key_cache.IndexKeyCache.move" in r.stdout


def test_check_without_sglang_exits_3(tmp_path):
    r = check_json([PYHOOK])
    assert r.returncode == 3
    assert "sglang is not importable" in json.loads(r.stdout)["error"]


def test_check_usage_exits_2():
    r = run_py("import sys, runpy; sys.argv=['x','chek']; runpy.run_module('kvcanary.sglang', run_name='__main__')",
               [PYHOOK])
    assert r.returncode == 2 and "usage" in r.stderr


# --- the finder / sitecustomize route --------------------------------------------------------


FINDER_PROBE = """
    import json, logging, sys
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    import kvcanary.sglang.hooks as H, kvcanary.sglang.finder as F
    from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin as P
    import sglang.srt.mem_cache.index_key_cache as ikc
    import sglang.srt.model_executor.runner.decode_cuda_graph_runner as g
    b = H.get_binding()
    out = {
        "route": H.ROUTE,
        "finder": any(type(f).__name__ == "Finder" for f in sys.meta_path),
        "send_wrapped": H.is_kvcanary_wrapped(P.send_kv_chunk),
        "exec_wrapped": H.is_kvcanary_wrapped(g.DecodeCudaGraphRunner.execute),
        "move_has": hasattr(ikc.IndexKeyCache, "move"),
        "features": b.features_state(),
        "call": P().send_kv_chunk(object(), False),
        "loader": type(sys.modules["sglang.srt.disaggregation.prefill"].__loader__).__name__,
        "war": __import__("os").environ.get("SGLANG_FORCE_COARSE_WAR_BARRIER"),
    }
    F.install()  # idempotent
    F.Finder(b).loaded("sglang.srt.disaggregation.prefill", sys.modules["sglang.srt.disaggregation.prefill"])
    out["wraps"] = 0
    f = P.send_kv_chunk
    while f is not None:
        out["wraps"] += 1 if getattr(f, H.MARK, None) else 0
        f = getattr(f, "__wrapped__", None)
    print(json.dumps(out))
"""


def test_sitecustomize_installs_the_finder_which_patches_on_import(tmp_path):
    root = write_pkg(tmp_path, MINI)
    r = run_py(FINDER_PROBE, [SITE, PYHOOK, root], {"KVCANARY_ADDR": "tcp://127.0.0.1:9"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["route"] == "finder" and out["finder"]
    assert out["send_wrapped"] and out["exec_wrapped"]
    assert out["call"] == "orig"
    assert out["wraps"] == 1  # never wrapped twice
    assert out["loader"] == "SourceFileLoader"  # no trace of the finder's loader
    assert all(out["features"].values())
    assert out["war"] == "1"  # graphdiff is on by default: coarse WAR barrier


def test_finder_disables_only_the_features_of_a_missing_target(tmp_path):
    root = write_pkg(tmp_path, MINI, {"sglang/srt/mem_cache/index_key_cache.py": """
        class IndexKeyCache:
            def move_kv(self, tgt_loc, src_loc):
                pass
    """})
    r = run_py(FINDER_PROBE, [SITE, PYHOOK, root], {"KVCANARY_ADDR": "tcp://127.0.0.1:9"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    off = sorted(f for f, on in out["features"].items() if not on)
    assert off == ["canary.between"]
    assert out["exec_wrapped"] and out["send_wrapped"]
    lines = [l for l in r.stderr.splitlines() if "IndexKeyCache.move" in l]
    assert len(lines) == 1 and "SGLang 0.0.mini" in lines[0] and "canary.between" in lines[0]


def test_finder_wraps_a_method_the_target_class_inherits(tmp_path):
    """Resolution walks the MRO; the patch must too, or the feature would read
    as on while nothing is hooked."""
    root = write_pkg(tmp_path, MINI, {"sglang/srt/mem_cache/index_key_cache.py": """
        class _Base:
            def move(self, tgt_loc, src_loc):
                return "base"
        class IndexKeyCache(_Base):
            pass
    """})
    r = run_py("""
        import json
        from sglang.srt.mem_cache.index_key_cache import IndexKeyCache, _Base
        import kvcanary.sglang.hooks as H
        print(json.dumps([H.is_kvcanary_wrapped(IndexKeyCache.move), H.is_kvcanary_wrapped(_Base.move),
                          IndexKeyCache().move([1], [2])]))
    """, [SITE, PYHOOK, root], {"KVCANARY_ADDR": "tcp://127.0.0.1:9"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [True, False, "base"]


def test_without_kvcanary_addr_sitecustomize_does_nothing(tmp_path):
    root = write_pkg(tmp_path, MINI)
    r = run_py("""
        import sys
        from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin as P
        import kvcanary.sglang.hooks as H
        print(H.ROUTE, any(type(f).__name__ == "Finder" for f in sys.meta_path), H.is_kvcanary_wrapped(P.send_kv_chunk))
    """, [SITE, PYHOOK, root])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["None", "False", "False"]


def test_sitecustomize_chains_to_the_next_one_on_the_path(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = '1'\n")
    # A second copy of kvcanary's own file in between is skipped, not run twice.
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "sitecustomize.py").write_text(open(os.path.join(SITE, "sitecustomize.py")).read()
                                           + "\nimport os\nos.environ['COPY_RAN'] = '1'\n")
    r = run_py("import os; print(os.environ.get('USER_SITECUSTOMIZE_RAN'), os.environ.get('COPY_RAN'))",
               [SITE, str(copy), str(user)])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "None"]


# --- the plugin route ------------------------------------------------------------------------


def dist_info(root, name="kvcanary"):
    d = os.path.join(root, "%s-0.2.0.dist-info" % name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: %s\nVersion: 0.2.0\n" % name)
    with open(os.path.join(d, "entry_points.txt"), "w") as f:
        f.write("[sglang.srt.plugins]\nkvcanary = kvcanary.sglang.plugin:load\n")
    return root


needs_standin = pytest.mark.skipif(
    not all(os.path.isfile(os.path.join(STANDIN, *p.split("/"))) for p in (
        "sglang/srt/plugins/hook_registry.py", "sglang/srt/disaggregation/prefill.py",
        "sglang/srt/disaggregation/decode.py",
        "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py")),
    reason="the SGLang stand-in (tests/standin) is not in this tree yet")

PLUGIN_PROBE = """
    import json, sys
    import kvcanary.sglang.hooks as H
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin as P
    import sglang.srt.model_executor.runner.decode_cuda_graph_runner as g
    wraps = 0
    f = P.send_kv_chunk
    while f is not None:
        wraps += 1 if getattr(f, H.MARK, None) else 0
        f = getattr(f, "__wrapped__", None)
    print(json.dumps({"route": H.ROUTE, "send": H.is_kvcanary_wrapped(P.send_kv_chunk),
                      "exec": H.is_kvcanary_wrapped(g.DecodeCudaGraphRunner.execute),
                      "finder_marks": wraps,
                      "finder": any(type(f).__name__ == "Finder" for f in sys.meta_path)}))
"""


@needs_standin
@pytest.mark.parametrize("with_site", [False, True])
def test_plugin_route_registers_and_wins_over_the_finder(tmp_path, with_site):
    ep = dist_info(str(tmp_path))
    paths = ([SITE] if with_site else []) + [PYHOOK, STANDIN, ep]
    r = run_py(PLUGIN_PROBE, paths, {"KVCANARY_ADDR": "tcp://127.0.0.1:9", "SGLANG_PLUGINS": "kvcanary"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["route"] == "plugin" and out["send"] and out["exec"]
    assert out["finder_marks"] == 0 and not out["finder"]


@needs_standin
def test_plugin_not_whitelisted_is_not_loaded(tmp_path):
    ep = dist_info(str(tmp_path))
    r = run_py(PLUGIN_PROBE, [PYHOOK, STANDIN, ep],
               {"KVCANARY_ADDR": "tcp://127.0.0.1:9", "SGLANG_PLUGINS": "someone_else"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["route"] is None and not out["send"]


# --- the stand-in ----------------------------------------------------------------------------


@needs_standin
def test_check_on_the_standin_all_ok():
    r = check_json([PYHOOK, STANDIN])
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert rep["sglang_version"].endswith("standin")
    assert all(t["ok"] for t in rep["targets"]), [t for t in rep["targets"] if not t["ok"]]


RENAME_PROBE = """
    import importlib, json, logging, sys
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    mod, cls, meth = sys.argv[1:4]
    C = getattr(importlib.import_module(mod), cls)
    setattr(C, meth + "_v2", C.__dict__[meth])
    delattr(C, meth)
    from kvcanary.config import Settings
    from kvcanary.sglang import targets as T
    from kvcanary.sglang.__main__ import check, exit_code
    from kvcanary.sglang.hooks import Binding
    rep = check()
    b = Binding(Settings.from_env(), emitter=object())
    for t in T.TARGETS:
        if t.hooked:
            b.note_resolved(T.resolve(t))
    print(json.dumps({"code": exit_code(rep), "version": rep["sglang_version"], "missing": [t["target"] for t in rep["targets"] if not t["ok"]],
                      "off": sorted(f for f, on in b.features_state().items() if not on)}))
"""


@needs_standin
@pytest.mark.parametrize("mod,cls,meth,off", [
    ("sglang.srt.mem_cache.index_key_cache", "IndexKeyCache", "move", ["canary.between"]),
    ("sglang.srt.model_executor.runner.decode_cuda_graph_runner", "DecodeCudaGraphRunner", "execute",
     ["graphdiff.rerun"]),
    ("sglang.srt.model_executor.model_runner", "ModelRunner", "_forward_raw", ["canary.replay", "replay.step"]),
    ("sglang.srt.disaggregation.prefill", "SchedulerDisaggregationPrefillMixin", "send_kv_chunk", ["checksum.sent"]),
])
def test_standin_with_a_renamed_target_turns_off_only_its_features(mod, cls, meth, off):
    code = "import sys; sys.argv = ['x', %r, %r, %r]\n" % (mod, cls, meth) + textwrap.dedent(RENAME_PROBE)
    r = run_py(code, [PYHOOK, STANDIN], {"KVCANARY_ADDR": "tcp://127.0.0.1:9", "KVCANARY_GRAPHDIFF_LAYERS": "all"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["code"] == 1
    assert out["missing"] == ["%s.%s.%s" % (mod, cls, meth)]
    assert out["off"] == off
    lines = [l for l in r.stderr.splitlines() if "%s.%s" % (cls, meth) in l]
    assert len(lines) == 1 and "SGLang %s:" % out["version"] in lines[0]


def test_resolution_falls_back_to_an_alias_and_names_every_failure(tmp_path, monkeypatch):
    from kvcanary.sglang import targets as T

    write_pkg(tmp_path, {"altpkg/__init__.py": "", "altpkg/mod.py": """
        class NSAPool:
            def move(self, tgt_loc, src_loc):
                pass
    """})
    monkeypatch.syspath_prepend(str(tmp_path))
    t = T.Target("altpkg.mod.DSAPool.move", T.BEFORE, ("canary.between",), "", ("self", "tgt_loc", "src_loc"),
                 aliases=("altpkg.mod.NSAPool.move",))
    r = T.resolve(t)
    assert r.ok and r.name == "altpkg.mod.NSAPool.move" and r.attr == "move" and r.owner.__name__ == "NSAPool"
    t2 = T.Target("altpkg.mod.DSAPool.move", T.BEFORE, (), "", ("self", "tgt_loc", "src_loc"),
                  aliases=("altpkg.nomod.NSAPool.move",))
    r2 = T.resolve(t2)
    assert not r2.ok
    assert "altpkg.mod has no attribute or submodule 'DSAPool'" in r2.error
    assert r2.error.count(";") == 1 and "altpkg.nomod.NSAPool.move:" in r2.error


def test_module_of_stops_at_the_class():
    from kvcanary.sglang import targets as T

    assert T.module_of("sglang.srt.disaggregation.decode.DecodeTransferQueue.pop_transferred") == \
        "sglang.srt.disaggregation.decode"
    assert T.module_of("a.b.func") == "a.b"


def test_sitecustomize_does_not_import_torch_until_a_target_module_loads(tmp_path):
    root = write_pkg(tmp_path, MINI)
    r = run_py("""
        import sys
        before = "torch" in sys.modules
        import sglang.srt.disaggregation.prefill
        print(before, "torch" in sys.modules)
    """, [SITE, PYHOOK, root], {"KVCANARY_ADDR": "tcp://127.0.0.1:9"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"]
