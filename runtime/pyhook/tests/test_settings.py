"""The engine's settings read from inside (kvcanary.sglang.settings), the
draft-runner pass-through (reference D3) and the forkserver warning (D6),
on small fakes of SGLang's objects (names from sglang-dsv4.md "Engine
settings a hook can read")."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from kvcanary.sglang import finder
from kvcanary.sglang import settings as S
from kvcanary.sglang.hooks import Binding
from test_instruments import ListEmitter, settings

PB = 8448


def fake_runner(draft=False, **sa):
    args = dict(model_path="deepseek-ai/DeepSeek-V3.2", disable_cuda_graph=False, cuda_graph_max_bs=64,
                disaggregation_mode="decode", max_running_requests=32, tp_size=2, speculative_algorithm=None,
                enable_deepseek_v4_fp4_indexer=False)
    args.update(sa)
    pool = types.SimpleNamespace(index_k_with_scale_buffer=[torch.zeros((4, PB), dtype=torch.uint8)] * 2, start_layer=0)
    return types.SimpleNamespace(server_args=types.SimpleNamespace(**args), token_to_kv_pool=pool,
                                 ps=types.SimpleNamespace(tp_rank=1), is_draft_worker=draft,
                                 model_config=types.SimpleNamespace(hf_config=types.SimpleNamespace(
                                     architectures=["DeepseekV32ForCausalLM"])))


def test_engine_config_reads_server_args_env_and_layout(monkeypatch):
    monkeypatch.delenv(S.OVERLAP_ENV, raising=False)
    cfg, rank = S.engine_config(fake_runner())
    assert rank == 1
    assert cfg["cuda_graph"] is True and cfg["cuda_graph_max_bs"] == 64 and cfg["index_k_dtype"] == "fp8"
    assert cfg["disaggregation"] == "pd" and cfg["tp_size"] == 2 and cfg["max_running_requests"] == 32
    assert cfg["model"] == "deepseek-ai/DeepSeek-V3.2"
    assert cfg["extra"]["architecture"] == "DeepseekV32ForCausalLM"
    assert cfg["extra"]["speculative_algorithm"] == "none" and cfg["extra"]["fp4_indexer"] == "false"
    # SGLANG_OPT_USE_MULTI_STREAM_OVERLAP unset: SGLang's default, on (not HIP)
    if not getattr(torch.version, "hip", None):
        assert cfg["multi_stream_overlap"] is True
    # every reported value says where it came from
    for k in ("cuda_graph", "cuda_graph_max_bs", "multi_stream_overlap", "index_k_dtype", "disaggregation", "tp_size",
              "max_running_requests", "extra.architecture", "extra.fp4_indexer", "extra.speculative_algorithm"):
        assert cfg["provenance"][k] == "engine", k
    assert "model" not in cfg["provenance"]


@pytest.mark.parametrize("value,want", [("0", False), ("false", False), ("1", True), ("True", True)])
def test_overlap_from_the_environment(monkeypatch, value, want):
    if getattr(torch.version, "hip", None):
        pytest.skip("HIP forces the overlap off")
    monkeypatch.setenv(S.OVERLAP_ENV, value)
    assert S.engine_config(fake_runner())[0]["multi_stream_overlap"] is want


def test_unreadable_settings_stay_unknown():
    mr = fake_runner(disable_cuda_graph="maybe", cuda_graph_max_bs=None, tp_size=0)
    mr.token_to_kv_pool = types.SimpleNamespace()  # no index-K on this pool
    del mr.model_config
    cfg, _ = S.engine_config(mr)
    for k in ("cuda_graph", "cuda_graph_max_bs", "tp_size", "index_k_dtype"):
        assert k not in cfg and k not in cfg["provenance"], k
    assert "architecture" not in cfg.get("extra", {})
    # nothing reachable: no report at all (an IndexKeyCache, say)
    assert S.engine_config(types.SimpleNamespace(buffer=[]))[0] is None


def test_disabled_graphs_and_the_renamed_flag():
    assert S.engine_config(fake_runner(disable_cuda_graph=True))[0]["cuda_graph"] is False
    assert S.engine_config(fake_runner(cuda_graph_backend_decode="disabled"))[0]["cuda_graph"] is False


def test_a_draft_runner_is_never_the_settings_source():
    target, draft = fake_runner(), fake_runner(draft=True)
    sched = types.SimpleNamespace(server_args=target.server_args, tp_worker=types.SimpleNamespace(model_runner=target),
                                  draft_worker=types.SimpleNamespace(model_runner=draft))
    assert S.model_runner_of(sched) is target
    assert S.model_runner_of(draft) is None


def test_binding_reports_once_and_passes_draft_calls_through():
    em = ListEmitter()
    b = Binding(settings(), em)
    draft = fake_runner(draft=True)
    assert b.skips((draft,), {}) is True
    assert b.skips((types.SimpleNamespace(model_runner=draft),), {}) is True  # its graph runner
    assert not em.of("run.start"), "a draft runner reported the process's settings"
    target = fake_runner()
    assert b.skips((target,), {}) is False
    assert b.skips((target,), {}) is False
    starts = em.of("run.start")
    assert len(starts) == 1 and starts[0]["tp_rank"] == 1 and starts[0]["config"]["provenance"]["cuda_graph"] == "engine"


def test_the_draft_never_replaces_the_target_capturer(monkeypatch):
    em = ListEmitter()
    b = Binding(settings(graphdiff_layers="all"), em)
    # SGLang's capturer module: a global capturer with a getter and a setter
    it = types.ModuleType("sglang.srt.state_capturer.indexer_topk")
    it.current = "sglang's own"
    it.get_global_indexer_capturer = lambda: it.current
    it.set_global_indexer_capturer = lambda c: setattr(it, "current", c)
    parents = ["sglang", "sglang.srt", "sglang.srt.state_capturer"]
    for name in parents:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setattr(sys.modules["sglang.srt.state_capturer"], "indexer_topk", it, raising=False)
    monkeypatch.setitem(sys.modules, it.__name__, it)
    from kvcanary.sglang import targets as T
    from kvcanary.sglang.hooks import wrap

    t = T.by_name("sglang.srt.model_executor.model_runner.ModelRunner.init_indexer_capturer")

    class MR:
        def __init__(self, draft):
            self.is_draft_worker = draft

        def init_indexer_capturer(self):
            it.set_global_indexer_capturer(None)  # SGLang replaces the global capturer each time

    MR.init_indexer_capturer = wrap(MR.init_indexer_capturer, b.hook_for(t), t.hook, t.name)
    MR(False).init_indexer_capturer()
    ours = b.graphdiff.capturer
    assert ours is not None and it.get_global_indexer_capturer() is ours
    MR(True).init_indexer_capturer()  # the draft runner, after the target captured its graphs
    assert b.graphdiff.capturer is ours, "the draft re-installed the top-k capturer"
    assert it.get_global_indexer_capturer() is None  # SGLang's own choice for the draft, untouched


def test_forkserver_warning():
    assert finder.warn_forkserver({}) == ""
    assert finder.warn_forkserver({"SGLANG_EARLY_FORKSERVER": "0"}) == ""
    msg = finder.warn_forkserver({"SGLANG_EARLY_FORKSERVER": "1", "SGLANG_FORKSERVER_FILE": "/run/fs"})
    assert "SGLANG_FORKSERVER_FILE=/run/fs" in msg and "plugin route" in msg
    assert "SGLANG_EARLY_FORKSERVER=1" in finder.warn_forkserver({"SGLANG_EARLY_FORKSERVER": "1"})


def test_several_nodes_report_their_slice():
    cfg, _ = S.engine_config(fake_runner(nnodes=2, node_rank=1))
    assert cfg["extra"]["nnodes"] == "2" and cfg["extra"]["node_rank"] == "1"
    assert "nnodes" not in S.engine_config(fake_runner(nnodes=1, node_rank=0))[0].get("extra", {})
