"""The measured prefill MoE op per expert weight format (issue #13 step 11, ``efficiency.prefill_moe``), against
hand counts: the same model priced with and without an entry; the step-time difference is computed by hand from
the architecture (MoE layers, experts per rank, tokens, FLOPs) and the test chip's peaks."""

from __future__ import annotations

import pytest
from perf_refdata import DEEPSEEK_R1, GPT_OSS_120B, H200, H200_EFF, LLAMA_8B

from jalapeno.hardware.schema import Efficiency
from jalapeno.perf import CostModel, Parallelism, Precision, StepShape
from jalapeno.perf.dtypes import weight_dtypes
from jalapeno.perf.model import expert_format

FP8_PEAK, BF16_PEAK = 1979e12, 989e12  # the test chip's (perf_refdata.H200)
PREFILL = StepShape.from_lists(prefill=[(16384, 0)])
MIXED = StepShape.from_lists(prefill=[(4096, 0)], decode_ctx=[2000] * 16)
DECODE = StepShape.from_lists(decode_ctx=[1000] * 24)
MOE_LAYERS_R1, MOE_LAYERS_OSS = 61 - 3, 36


def _dt(model, shape, par, prec, prefill_moe) -> float:
    base = CostModel(model, H200, par, prec, efficiency=Efficiency(**H200_EFF))
    over = CostModel(model, H200, par, prec, efficiency=Efficiency(**H200_EFF, prefill_moe=prefill_moe))
    return over.step(shape).time_s - base.step(shape).time_s


def test_expert_format_names_the_checkpoint_the_experts_come_from():
    assert expert_format(DEEPSEEK_R1, weight_dtypes(DEEPSEEK_R1, Precision("native"))) == "fp8"
    assert expert_format(DEEPSEEK_R1, weight_dtypes(DEEPSEEK_R1, Precision("fp4"))) == "nvfp4"  # a 4-bit re-quant
    assert expert_format(GPT_OSS_120B, weight_dtypes(GPT_OSS_120B, Precision("native"))) == "mxfp4"  # its own
    assert expert_format(GPT_OSS_120B, weight_dtypes(GPT_OSS_120B, Precision("bf16"))) == "bf16"
    assert expert_format(LLAMA_8B, weight_dtypes(LLAMA_8B, Precision("bf16"))) is None


def test_fixed_terms_count_moe_layers_experts_on_the_rank_and_prefill_tokens():
    us, e_us, ns = 10.0, 2.0, 5.0
    k = {"fp8": {"layer_us": us, "expert_us": e_us, "token_ns": ns}}
    # DeepSeek-R1 FP8 at TP8 (no EP): 58 MoE layers, all 256 experts on every chip (16384 tokens touch them all)
    want = MOE_LAYERS_R1 * (us * 1e-6 + 256 * e_us * 1e-6 + 16384 * ns * 1e-9)
    assert _dt(DEEPSEEK_R1, PREFILL, Parallelism(tp=8), Precision("native"), k) == pytest.approx(want, rel=1e-9)
    # EP8: 32 experts per rank
    want = MOE_LAYERS_R1 * (us * 1e-6 + 32 * e_us * 1e-6 + 16384 * ns * 1e-9)
    assert _dt(DEEPSEEK_R1, PREFILL, Parallelism(tp=8, ep=8), Precision("native"), k) == pytest.approx(want, rel=1e-9)
    # a mixed step pays for its 4096 prefill tokens only; a decode step pays nothing
    want = MOE_LAYERS_R1 * (us * 1e-6 + 256 * e_us * 1e-6 + 4096 * ns * 1e-9)
    assert _dt(DEEPSEEK_R1, MIXED, Parallelism(tp=8), Precision("native"), k) == pytest.approx(want, rel=1e-6)
    assert _dt(DEEPSEEK_R1, DECODE, Parallelism(tp=8), Precision("native"), k) == 0.0
    # another format's entry does not touch these experts; a dense model has none
    assert _dt(DEEPSEEK_R1, PREFILL, Parallelism(tp=8), Precision("native"),
               {"nvfp4": {"layer_us": 99.0}, "mxfp4": {"expert_us": 9.0}}) == 0.0
    assert _dt(LLAMA_8B, StepShape.from_lists(prefill=[(2048, 0)]), Parallelism(), Precision("bf16"),
               {"bf16": {"layer_us": 99.0}}) == 0.0
    # GPT-OSS-120B's native MXFP4 experts read the mxfp4 entry: 36 layers x 128 experts on one chip
    assert _dt(GPT_OSS_120B, PREFILL, Parallelism(), Precision("native"), {"mxfp4": {"expert_us": e_us}}) == \
        pytest.approx(MOE_LAYERS_OSS * 128 * e_us * 1e-6, rel=1e-9)


def test_compute_reprices_the_prefill_tokens_routed_flops_at_the_measured_fraction():
    # DeepSeek-R1 FP8 TP8: each chip runs 16384 x top-8 x 2 x 3 x 7168 x 2048 / 8 FLOPs per MoE layer, priced by
    # the roofline at 0.73 of the FP8 peak; at 0.2 they take FLOPs / peak x (1 / 0.2 - 1 / 0.73) longer
    flops = 16384 * 8 * 2 * 3 * 7168 * 2048 / 8 * MOE_LAYERS_R1
    got = _dt(DEEPSEEK_R1, PREFILL, Parallelism(tp=8), Precision("native"), {"fp8": {"compute": 0.2}})
    assert got == pytest.approx(flops / FP8_PEAK * (1 / 0.2 - 1 / 0.73), rel=1e-9)
    # decode tokens keep the roofline's rate; a fraction above the roofline's never makes a step faster
    assert _dt(DEEPSEEK_R1, DECODE, Parallelism(tp=8), Precision("native"), {"fp8": {"compute": 0.2}}) == 0.0
    assert _dt(DEEPSEEK_R1, PREFILL, Parallelism(tp=8), Precision("native"), {"fp8": {"compute": 0.9}}) == 0.0
    # GPT-OSS's MXFP4 experts on a chip without FP4 tensor cores run at the bf16 rate (0.8 of 989 TFLOPS)
    flops = 16384 * 4 * 2 * 3 * 2880 * 2880 * MOE_LAYERS_OSS
    got = _dt(GPT_OSS_120B, PREFILL, Parallelism(), Precision("native"), {"mxfp4": {"compute": 0.4}})
    assert got == pytest.approx(flops / BF16_PEAK * (1 / 0.4 - 1 / 0.8), rel=1e-9)


@pytest.mark.parametrize("bad", [{"fp6": {"layer_us": 1.0}}, {"fp8": {"compute": 0.0}}, {"fp8": {"compute": 1.5}},
                                 {"nvfp4": {"expert_us": -1.0}}, {"mxfp4": {"token_ns": -2.0}},
                                 {"bf16": {"layer_us": -3.0}}, {"fp8": {"per_expert": 1.0}}])
def test_bad_prefill_moe_entries_are_refused(bad):
    with pytest.raises(ValueError):
        Efficiency(prefill_moe=bad)
