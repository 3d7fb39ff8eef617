"""Measured prefill-kernel efficiencies (issue #13 step 10): context attention's own compute fraction and fixed
costs, and the MoE grouped GEMMs' compute fraction, each against a hand count.

The same model is priced twice, with and without the terms; the step-time difference is computed by hand from
the architecture (FLOPs, heads, layers) and the test chip's peaks.
"""

from __future__ import annotations

import pytest
from perf_refdata import DEEPSEEK_R1, GPT_OSS_120B, H200, H200_EFF, LLAMA_8B

from jalapeno.hardware.schema import Efficiency
from jalapeno.perf import CostModel, Parallelism, Precision, StepShape

BF16_PEAK, FP8_PEAK = 989e12, 1979e12  # the test chip's (perf_refdata.H200)
DECODE = StepShape.from_lists(decode_ctx=[1000] * 24)
PREFILL = StepShape.from_lists(prefill=[(2048, 0)])
MIXED = StepShape.from_lists(prefill=[(512, 0), (256, 1024)], decode_ctx=[3000] * 8)


def _dt(model, shape, par=Parallelism(), prec=Precision("bf16"), **terms) -> float:
    base = CostModel(model, H200, par, prec, efficiency=Efficiency(**H200_EFF))
    over = CostModel(model, H200, par, prec, efficiency=Efficiency(**{**H200_EFF, **terms}))
    return over.step(shape).time_s - base.step(shape).time_s


def test_prefill_attention_pairs_run_at_their_own_fraction_and_decode_attention_does_not():
    # Llama-3.1-8B: 32 layers x 32 query heads x head_dim 128; a 2048-token prompt has 2048 x 2049 / 2 causal
    # pairs, 4 x 128 FLOPs per (pair, head): compute-bound at both fractions, so the step grows by exactly
    # FLOPs / peak x (1 / 0.5 - 1 / 0.8)
    flops = 4 * 128 * 32 * (2048 * 2049 / 2) * 32
    assert _dt(LLAMA_8B, PREFILL, prefill_attention_compute=0.5) == pytest.approx(
        flops / BF16_PEAK * (1 / 0.5 - 1 / 0.8), rel=1e-9)
    assert _dt(LLAMA_8B, DECODE, prefill_attention_compute=0.5) == 0.0  # decode rows' attention is not prefill
    # at the large-GEMM fraction the term changes nothing
    assert _dt(LLAMA_8B, PREFILL, prefill_attention_compute=0.8) == pytest.approx(0.0, abs=1e-15)


def test_prefill_attention_fixed_costs_count_query_tokens_heads_and_attention_layers():
    ns, us = 0.4, 20.0
    # Llama-3.1-8B TP1: 2048 tokens x 32 heads x 32 layers x 0.4 ns + 32 layers x 20 us
    assert _dt(LLAMA_8B, PREFILL, prefill_attention_ns_per_query_head=ns, prefill_attention_layer_us=us) == \
        pytest.approx(2048 * 32 * 32 * ns * 1e-9 + 32 * us * 1e-6, rel=1e-9)
    # TP2: 16 heads per chip, the same layers
    assert _dt(LLAMA_8B, PREFILL, Parallelism(tp=2), prefill_attention_ns_per_query_head=ns) == \
        pytest.approx(2048 * 16 * 32 * ns * 1e-9, rel=1e-9)
    # a mixed step: 768 prefill tokens (two chunks), the layer cost once per step; decode alone: nothing
    assert _dt(LLAMA_8B, MIXED, prefill_attention_ns_per_query_head=ns, prefill_attention_layer_us=us) == \
        pytest.approx(768 * 32 * 32 * ns * 1e-9 + 32 * us * 1e-6, rel=1e-9)
    assert _dt(LLAMA_8B, DECODE, prefill_attention_ns_per_query_head=ns, prefill_attention_layer_us=us) == 0.0
    # GPT-OSS-120B: 36 layers, full and sliding-window alike, 64 query heads
    assert _dt(GPT_OSS_120B, PREFILL, prec=Precision("native"), prefill_attention_ns_per_query_head=ns,
               prefill_attention_layer_us=us) == pytest.approx(2048 * 64 * 36 * ns * 1e-9 + 36 * us * 1e-6,
                                                                 rel=1e-9)


def _t(model, shape, par, prec, **terms) -> float:
    return CostModel(model, H200, par, prec, efficiency=Efficiency(**{**H200_EFF, **terms})).step(shape).time_s


def test_moe_compute_prices_only_the_routed_experts_of_its_dtype():
    # DeepSeek-R1 FP8 at TP8 (no EP): each chip runs 16384 tokens x top-8 x 2 x 3 x 7168 x 2048 / 8 FLOPs in each
    # of its 58 MoE layers: 0.21 s at 0.2 of the FP8 peak, 0.17 s at 0.25, above the 0.075 s its (token, expert)
    # activations and weights take to stream (at 0.73, 0.058 s, it is memory-bound): compute-bound at both, so the
    # step grows by exactly
    # FLOPs / peak x (1 / 0.2 - 1 / 0.25)
    par, prec = Parallelism(tp=8), Precision("native")
    shape = StepShape.from_lists(prefill=[(16384, 0)])
    flops = 16384 * 8 * 2 * 3 * 7168 * 2048 / 8 * 58
    t20 = _t(DEEPSEEK_R1, shape, par, prec, moe_compute={"fp8": 0.2})
    t25 = _t(DEEPSEEK_R1, shape, par, prec, moe_compute={"fp8": 0.25})
    assert t20 - t25 == pytest.approx(flops / FP8_PEAK * (1 / 0.2 - 1 / 0.25), rel=1e-9)
    assert _dt(DEEPSEEK_R1, shape, par, prec, moe_compute={"fp8": 0.25}) > 0.0  # slower than at 0.73
    # decode of 24 sequences streams the experts: memory-bound either way
    assert _dt(DEEPSEEK_R1, DECODE, par, prec, moe_compute={"fp8": 0.25}) == 0.0
    # another dtype's fraction does not touch FP8 experts, and a dense model has no routed experts
    assert _dt(DEEPSEEK_R1, shape, par, prec, moe_compute={"fp4": 0.1, "bf16": 0.3}) == 0.0
    assert _dt(LLAMA_8B, PREFILL, moe_compute={"bf16": 0.3}) == 0.0


@pytest.mark.parametrize("bad", [{"moe_compute": {"fp8": 0.0}}, {"moe_compute": {"fp4": 1.5}},
                                 {"prefill_attention_compute": 0.0}, {"prefill_attention_compute": 1.2},
                                 {"prefill_attention_ns_per_query_head": -1.0}, {"prefill_attention_layer_us": -2.0}])
def test_out_of_range_prefill_kernel_terms_are_refused(bad):
    with pytest.raises(ValueError):
        Efficiency(**bad)


def test_the_catalogue_states_measured_terms_on_the_six_nvidia_chips_only():
    from jalapeno.hardware.catalog import get_chip

    for key in ("h100", "h200", "b200", "b300", "gb200", "gb300"):
        e = get_chip(key).efficiency
        assert e.prefill_attention_compute is not None and 0.4 < e.prefill_attention_compute < 0.7
        assert "MEASURED" in e.source and "aic_ops.py --prefill-terms" in e.source
    for key in ("mi355x", "mi300x", "vera-rubin"):
        e = get_chip(key).efficiency
        assert e.prefill_attention_compute is None and not e.moe_compute
        assert e.prefill_attention_ns_per_query_head == 0 and e.prefill_attention_layer_us == 0
