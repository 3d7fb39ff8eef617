"""One multi-token-prediction (MTP) draft pass, priced as what it runs (issue #13 item 4).

DeepSeek-V3's MTP module (``num_nextn_predict_layers``; DeepSeek-V3 technical report §2.2) is one full transformer
block of the target's own configuration (MLA attention over the sequence's context + the MoE FFN), fed by
``eh_proj`` (2h -> h) over the RMS-normed next-token embedding and the target's last hidden state, and read out
through the target's shared embedding and LM head (vocab x hidden, read in full on every pass) and a sampler.
Each draft pass is priced by the same cost model as the target's step: a :class:`~jalapeno.perf.model.CostModel`
of that one block (``mtp_draft=True`` adds the input projection's operators and kernels), on the same chips,
sharding, precision and efficiency: roofline + the chip's per-kernel cost for the pass's own kernels
(``perf.model.kernel_count``: 29 for DeepSeek-R1 at TP8) + one layer's and one MoE layer's fixed costs. The
per-step and per-sequence terms (scheduler iteration, input preparation, host work per sequence) and the per-token
prefill bookkeeping are not charged again: the pass runs inside the engine step that already pays them.
"""

from __future__ import annotations

import dataclasses

from jalapeno.hardware.schema import Efficiency
from jalapeno.models.arch import ModelArch
from jalapeno.perf.model import CostModel

#: efficiency terms that belong to the engine step (or its prefill tokens), not to a pass run inside it
STEP_ONLY_TERMS = ("step_overhead_us", "seq_overhead_us", "prefill_token_overhead_ns")


def mtp_block_arch(m: ModelArch) -> ModelArch:
    """The MTP module's transformer block as a one-layer model: the target's configuration with one layer of
    full attention (DSA kept when the target has it), a MoE FFN when the target has experts (the MTP layer sits
    after ``first_k_dense_replace``: TensorRT-LLM's ``DeepseekV3MTP`` builds it as a MoE layer), and the target's
    shared embedding and LM head."""
    return dataclasses.replace(
        m, name=f"{m.name}-mtp", num_layers=1, layer_types=(), first_dense_layers=0, moe_layer_freq=1,
        moe_layers=(True,) if m.num_experts else (), mtp_layers=0,
    )


def draft_efficiency(eff: Efficiency) -> Efficiency:
    """``eff`` without the terms a pass inside an engine step does not pay again (:data:`STEP_ONLY_TERMS`)."""
    return eff.model_copy(update={f: 0.0 for f in STEP_ONLY_TERMS})


def mtp_draft_cost_model(cm: CostModel) -> CostModel:
    """The cost model of one MTP draft pass of ``cm``'s model on ``cm``'s chips: its ``decode_steps`` of a
    one-token-per-sequence decode shape price the draft passes, its ``step`` of a prefill shape the pass over a
    prompt chunk. The block sits on the last pipeline stage (one stage: ``pp`` = 1); KV tiers are not modelled
    for it (its one layer's KV is read from main memory)."""
    par = dataclasses.replace(cm.parallel, pp=1)
    return CostModel(mtp_block_arch(cm.model), cm.chip, par, cm.precision, draft_efficiency(cm.eff),
                     chip_features=cm.chip_features, mtp_draft=True)


__all__ = ["STEP_ONLY_TERMS", "draft_efficiency", "mtp_block_arch", "mtp_draft_cost_model"]
