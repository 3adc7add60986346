"""EAGLEWorker (stand-in of ``sglang.srt.speculative.eagle_worker``): the
draft model of speculative decoding, in the target's scheduler process.

Its ``model_runner`` is a second ModelRunner with ``is_draft_worker`` True: it
shares the target's ``req_to_token_pool``, owns its own KV pool (index-K
included), runs ``init_indexer_capturer()`` again after the target captured
its graphs (replacing SGLang's global capturer; the target's graphs keep the
one they captured), captures decode graphs of its own and counts its own
``forward_pass_id``. ``draft_forward(batch_fields)`` runs one draft decode
forward over the target's batch before the target's forward; its proposals
are not used by the stand-in (the target's outputs stay exact).
"""

from __future__ import annotations

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.model_runner import ModelRunner


class EAGLEWorker:
    def __init__(self, server_args, gpu_id: int, tp_rank: int, target_worker):
        self.server_args = server_args
        self.target_worker = target_worker
        tgt = target_worker.model_runner
        self.model_runner = ModelRunner(server_args, gpu_id=gpu_id, tp_rank=tp_rank, tp_size=server_args.tp_size,
                                        req_to_token_pool=tgt.req_to_token_pool, is_draft_worker=True)

    def draft_forward(self, ids, rpis, seq, locs, pos, rids):
        """One draft decode forward over the target's rows (draft KV written
        at the same slots, in the draft's own pool)."""
        bs = len(rids)
        fb = ForwardBatch(ForwardMode.DECODE, bs, torch.tensor(ids, dtype=torch.int64), torch.tensor(rpis, dtype=torch.int64),
                          seq.clone(), torch.tensor(locs, dtype=torch.int64), torch.tensor(pos, dtype=torch.int64),
                          rids=list(rids), seq_lens_sum=int(seq.sum()), seq_lens_cpu=seq.clone())
        return self.model_runner.forward(fb)
