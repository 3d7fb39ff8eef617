"""``efficiency.weight_dequant_ps_per_byte`` (issue #13 step 8): the SMs' dequantization of weight-only-quantized
weights (MXFP4 on a chip without FP4 tensor cores, INT4) as a compute-side time floor of their GEMMs.

References: a hand count of GPT-OSS-120B's routed-expert bytes (config numbers, the MXFP4 layout of 4 bits + one
8-bit scale per 32 elements), and the simulator itself for the fit (a fit recovers the value the points were
generated with)."""

from __future__ import annotations

import pytest
from perf_refdata import B200, DEEPSEEK_R1, GPT_OSS_120B, H100, H200, H200_EFF, LLAMA_8B

from jalapeno.hardware.schema import Efficiency
from jalapeno.perf import CostModel, Parallelism, Precision, StepShape

B = 16
DECODE = StepShape.from_lists(decode_ctx=[1000] * B)


def _op(cm: CostModel, name: str, shape: StepShape = DECODE):
    return next(o for o in cm.breakdown(shape).ops if o.name == name)


def _cm(model, chip=H200, prec="native", tp=2, **eff) -> CostModel:
    return CostModel(model, chip, Parallelism(tp=tp), Precision(prec), efficiency=Efficiency(**{**H200_EFF, **eff}))


def _expert_bytes_per_chip(tp: int, tokens: int) -> float:
    """GPT-OSS-120B's routed-expert weight bytes one chip reads in one decode step, by hand: 36 MoE layers, 128
    experts of gate/up/down 2880 x 2880 (MXFP4: 0.5 + 1/32 bytes per element) plus bf16 biases (2 x 2880 + 2880),
    top-4 routing: a fraction 1 - (1 - 4/128)^tokens of the experts is touched; each expert split tp ways."""
    per_expert = 3 * 2880 * 2880 * (0.5 + 1 / 32) + (2 * 2880 + 2880) * 2
    touched = 1 - (1 - 4 / 128) ** tokens
    return 36 * touched * 128 * per_expert / tp


def test_dequant_time_is_the_expert_bytes_times_the_term():
    ps = 1.0  # 1 TB/s of MXFP4 bytes: below H200's HBM rate, so the expert GEMM is dequantization-bound
    cm = _cm(GPT_OSS_120B, weight_dequant_ps_per_byte=ps)
    op = _op(cm, "moe_experts")
    gemm_s = 36 * 2 * 3 * 2880 * 2880 * 4 / 2 * B / (989e12 * 0.8)  # the GEMM's own FLOPs at the bf16 rate
    assert op.bound == "compute"
    assert op.time_s == pytest.approx(_expert_bytes_per_chip(2, B) * ps * 1e-12 + gemm_s, rel=1e-6)
    # without the term the same op is HBM-bound: one chip's bytes (weights + activations; the breakdown sums
    # both TP ranks) at 0.9 x 4.8 TB/s
    base = _op(_cm(GPT_OSS_120B), "moe_experts")
    assert base.bound == "memory"
    assert base.time_s == pytest.approx(base.bytes["hbm"] / 2 / (4.8e12 * 0.9), rel=1e-9)
    assert base.bytes["hbm"] / 2 > _expert_bytes_per_chip(2, B)


def test_a_dequantization_bound_gemm_runs_at_the_same_speed_on_h100_and_h200():
    """The point of the term: H100 and H200 share the SMs and clocks, so a GEMM bound by its dequantization takes
    the same time on both, whatever their HBM (3.35 vs 4.8 TB/s)."""
    fast = {c.key: _op(_cm(GPT_OSS_120B, c, weight_dequant_ps_per_byte=1.0), "moe_experts").time_s for c in (H100, H200)}
    slow = {c.key: _op(_cm(GPT_OSS_120B, c), "moe_experts").time_s for c in (H100, H200)}
    assert fast["h100"] == pytest.approx(fast["h200"], rel=1e-9)
    assert slow["h100"] > 1.3 * slow["h200"]


@pytest.mark.parametrize("model,chip,prec", [
    (GPT_OSS_120B, H200, "bf16"),  # no quantized weights
    (DEEPSEEK_R1, H200, "native"),  # FP8: Hopper has FP8 tensor cores, nothing to dequantize
    (GPT_OSS_120B, B200, "native"),  # MXFP4 on a chip with FP4 tensor cores
    (LLAMA_8B, H200, "bf16"),
])
def test_no_dequantization_where_the_chip_computes_the_stored_format(model, chip, prec):
    tp = 8 if model is DEEPSEEK_R1 else 2
    a = _cm(model, chip, prec, tp=tp).step(DECODE).time_s
    b = _cm(model, chip, prec, tp=tp, weight_dequant_ps_per_byte=3.0).step(DECODE).time_s
    assert a == b


def test_int4_dequantizes_every_linear_class():
    """W4A16 (INT4) is weight-only on every chip: attention and MLP projections pay the term, not only experts."""
    cm = _cm(LLAMA_8B, prec="int4", tp=1, weight_dequant_ps_per_byte=3.0)
    base = _cm(LLAMA_8B, prec="int4", tp=1)
    for name in ("qkv_proj", "o_proj", "mlp"):
        op, op0 = _op(cm, name), _op(base, name)
        assert op.bound == "compute" and op.time_s > op0.time_s, name
    assert _op(cm, "lm_head").time_s == _op(base, "lm_head").time_s  # the 16-bit LM head is not quantized
