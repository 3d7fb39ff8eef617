"""The named overhead terms of the cost model, each against a hand count (issue #13).

Every term is a coefficient on a step feature, so its effect on a step is exactly known: these tests build the
same model twice, with and without one term, and check the step-time difference to 1e-9.
"""

from __future__ import annotations

import numpy as np
import pytest
from perf_refdata import DEEPSEEK_R1, GPT_OSS_120B, H200, H200_EFF, LLAMA_8B, LLAMA_70B

from jalapeno.hardware.schema import Efficiency
from jalapeno.perf import CostModel, Parallelism, Precision, StepShape

DECODE = StepShape.from_lists(decode_ctx=[1000] * 24)
PREFILL = StepShape.from_lists(prefill=[(2048, 0)])
MIXED = StepShape.from_lists(prefill=[(512, 0), (256, 1024)], decode_ctx=[3000] * 8)


def _pair(model, par=Parallelism(), prec=Precision("bf16"), **terms):
    base = CostModel(model, H200, par, prec, efficiency=Efficiency(**H200_EFF))
    over = CostModel(model, H200, par, prec, efficiency=Efficiency(**{**H200_EFF, **terms}))
    return base, over


def _dt(base, over, shape):
    return over.step(shape).time_s - base.step(shape).time_s


def test_per_sequence_overhead_is_sequences_times_the_term():
    base, over = _pair(LLAMA_8B, seq_overhead_us=7.0)
    for n in (1, 16, 200):
        s = StepShape.from_lists(decode_ctx=[500] * n)
        assert _dt(base, over, s) == pytest.approx(n * 7e-6, rel=1e-9)
    # a prefill chunk is one sequence of the step too
    assert _dt(base, over, MIXED) == pytest.approx((2 + 8) * 7e-6, rel=1e-9)


def test_moe_layer_overhead_counts_only_moe_layers():
    # DeepSeek-R1: 61 layers, the first 3 dense (first_k_dense_replace=3) -> 58 MoE layers
    base, over = _pair(DEEPSEEK_R1, Parallelism(tp=8, ep=8), Precision("native"), moe_layer_overhead_us=10.0,
                       layer_overhead_us=1.0)
    assert _dt(base, over, DECODE) == pytest.approx(58 * 10e-6 + 61 * 1e-6, rel=1e-9)
    # GPT-OSS: every one of its 36 layers is MoE; a dense Llama has none
    b2, o2 = _pair(GPT_OSS_120B, prec=Precision("native"), moe_layer_overhead_us=10.0)
    assert _dt(b2, o2, DECODE) == pytest.approx(36 * 10e-6, rel=1e-9)
    b3, o3 = _pair(LLAMA_8B, moe_layer_overhead_us=10.0)
    assert _dt(b3, o3, DECODE) == 0.0


def test_prefill_layer_overhead_only_in_steps_that_prefill():
    base, over = _pair(LLAMA_8B, prefill_layer_overhead_us=30.0)
    assert _dt(base, over, DECODE) == 0.0
    assert _dt(base, over, PREFILL) == pytest.approx(32 * 30e-6, rel=1e-9)
    assert _dt(base, over, MIXED) == pytest.approx(32 * 30e-6, rel=1e-9)  # once per step, not per chunk


def test_prefill_kernel_overhead_is_the_kernel_count_of_steps_that_prefill():
    # hand counts (perf.model.KERNELS): DeepSeek-R1 at TP8 EP8 = 3 per step + 61 layers x (2 norms + 2
    # all-reduces + 9 MLA) + 3 dense MLPs x 3 + 58 MoE blocks x (6 + 3 shared) = 3 + 793 + 9 + 522 = 1,327;
    # GPT-OSS-120B at TP1 = 3 + 36 x (2 norms + 4 GQA + 6 MoE) = 435
    base, over = _pair(DEEPSEEK_R1, Parallelism(tp=8, ep=8), Precision("native"), prefill_kernel_overhead_us=20.0)
    assert _dt(base, over, DECODE) == 0.0  # decode steps replay a captured graph: their kernels are kernel_overhead_us
    assert _dt(base, over, PREFILL) == pytest.approx(1327 * 20e-6, rel=1e-9)
    assert _dt(base, over, MIXED) == pytest.approx(1327 * 20e-6, rel=1e-9)  # once per step, not per chunk
    b2, o2 = _pair(GPT_OSS_120B, prec=Precision("native"), prefill_kernel_overhead_us=20.0)
    assert _dt(b2, o2, PREFILL) == pytest.approx(435 * 20e-6, rel=1e-9)
    # the fit's gradient row is the same coefficient per unit of the term
    g = base.fixed_time_gradient("prefill_kernel_overhead_us")
    assert float(g @ base.features(PREFILL)) == pytest.approx(1327e-6, rel=1e-9)
    assert float(g @ base.features(DECODE)) == 0.0


def test_prefill_token_overhead_is_per_prefill_token():
    base, over = _pair(LLAMA_8B, prefill_token_overhead_ns=50.0)
    assert _dt(base, over, DECODE) == 0.0
    assert _dt(base, over, PREFILL) == pytest.approx(2048 * 50e-9, rel=1e-9)
    assert _dt(base, over, MIXED) == pytest.approx(768 * 50e-9, rel=1e-9)


def test_collective_overlap_hides_exactly_that_share_of_prefill_collective_time():
    par = Parallelism(tp=8)
    base, over = _pair(LLAMA_70B, par, prefill_collective_overlap=0.4)
    # the per-token part of the in-layer all-reduces (embedding, attention, MLP): T coefficient x prefill tokens
    per_token = sum(o.net_time[1] for o in base._net if o.name.endswith("allreduce")) * PREFILL.prefill_tokens
    assert per_token > 0
    assert _dt(base, over, PREFILL) == pytest.approx(-0.4 * per_token, rel=1e-9)
    # latency terms and the logits gather stay; decode tokens keep their collectives exposed
    assert _dt(base, over, DECODE) == 0.0
    net_b = sum(r.time_s for r in base.breakdown(PREFILL).ops if r.bound == "network")
    net_o = sum(r.time_s for r in over.breakdown(PREFILL).ops if r.bound == "network")
    assert net_b - net_o == pytest.approx(0.4 * per_token, rel=1e-9)


def test_overhead_row_in_breakdown_sums_every_term():
    terms = dict(step_overhead_us=50.0, layer_overhead_us=2.0, seq_overhead_us=3.0, prefill_layer_overhead_us=4.0,
                 prefill_token_overhead_ns=5.0)
    _, over = _pair(LLAMA_8B, **terms)
    row = over.breakdown(MIXED).op("overhead")
    want = (50 + 32 * 2 + 10 * 3 + 32 * 4) * 1e-6 + 768 * 5e-9
    assert row.time_s == pytest.approx(want, rel=1e-9)
    assert over.breakdown(MIXED).time_s == pytest.approx(over.step(MIXED).time_s, rel=1e-12)


def test_decode_steps_closed_form_holds_with_every_term():
    terms = dict(step_overhead_us=50.0, layer_overhead_us=2.0, moe_layer_overhead_us=9.0, seq_overhead_us=3.0,
                 prefill_layer_overhead_us=4.0, prefill_token_overhead_ns=5.0, prefill_collective_overlap=0.5,
                 fp8_moe_layer_overhead_us=70.0)
    _, over = _pair(DEEPSEEK_R1, Parallelism(tp=8, ep=8), Precision("native"), **terms)
    s = StepShape.from_lists(decode_ctx=[700 + 3 * i for i in range(64)])
    t, e = over.decode_steps(s, 40)
    from jalapeno.perf.model import advance_decode

    ref = np.array([over.step(advance_decode(s, i)).time_s for i in range(40)])
    assert np.allclose(t, ref, rtol=1e-12, atol=0)


def test_defaults_leave_step_time_unchanged():
    """All new terms default to 0: a chip without them prices exactly as before (the old two-term formula)."""
    eff = Efficiency(**{**H200_EFF, "step_overhead_us": 100.0, "layer_overhead_us": 5.0})
    cm = CostModel(LLAMA_8B, H200, precision=Precision("bf16"), efficiency=eff)
    bare = CostModel(LLAMA_8B, H200, precision=Precision("bf16"), efficiency=Efficiency(**H200_EFF))
    for s in (DECODE, PREFILL, MIXED):
        assert cm.step(s).time_s - bare.step(s).time_s == pytest.approx(100e-6 + 32 * 5e-6, rel=1e-9)


def test_prefill_expert_overhead_is_per_routed_expert_run_in_each_moe_layer():
    # GPT-OSS-120B: 36 MoE layers, 128 experts, top-4; without EP every chip runs a slice of each touched expert
    base, over = _pair(GPT_OSS_120B, prec=Precision("native"), prefill_expert_overhead_us=2.0)
    assert _dt(base, over, DECODE) == 0.0  # decode runs the captured fused-MoE kernel: no per-expert cost
    for t in (1, 16, 2048):
        s = StepShape.from_lists(prefill=[(t, 0)])
        touched = 128 * (1 - (1 - 4 / 128) ** t)  # expected distinct experts
        assert _dt(base, over, s) == pytest.approx(36 * touched * 2e-6, rel=1e-9)
    # with EP the busiest rank's experts count: at most 256/8 = 32 per rank (all touched by a long prompt)
    b2, o2 = _pair(DEEPSEEK_R1, Parallelism(tp=8, ep=8), Precision("native"), prefill_expert_overhead_us=2.0)
    assert _dt(b2, o2, PREFILL) == pytest.approx(58 * 32 * 2e-6, rel=1e-6)


def test_chip_framework_latency_overrides_the_global_profile():
    from jalapeno.perf.frameworks import apply_framework, get_framework

    eff = Efficiency(**H200_EFF, request_overhead_ms=40.0, framework_overhead_ms={"vllm": 12.0})
    assert apply_framework(eff, "vllm").request_overhead_ms == 12.0
    assert apply_framework(eff, "sglang").request_overhead_ms == get_framework("sglang").request_overhead_ms
    assert apply_framework(eff, None).request_overhead_ms == 40.0


def test_expert_overhead_is_per_routed_expert_run_every_step():
    base, over = _pair(GPT_OSS_120B, prec=Precision("native"), expert_overhead_us=0.5)
    for n in (1, 8, 64):  # decode: n tokens touch 128 (1 - (1 - 4/128)^n) experts on average
        s = StepShape.from_lists(decode_ctx=[900] * n)
        assert _dt(base, over, s) == pytest.approx(36 * 128 * (1 - (1 - 4 / 128) ** n) * 0.5e-6, rel=1e-9)
    b3, o3 = _pair(LLAMA_8B, expert_overhead_us=0.5)
    assert _dt(b3, o3, DECODE) == 0.0  # dense: no experts


def test_kernel_overhead_is_the_architectures_kernel_count_times_the_term():
    # hand counts (perf.model.KERNELS): Llama-3.1-8B layer = 2 norms + 4 GQA + 3 dense MLP = 9, x32 + 3 per step;
    # GPT-OSS-120B layer = 2 + 4 + 6 MoE = 12 (+2 all-reduces at TP2), x36 + 3; DeepSeek-R1 at TP8: MoE layer =
    # 2 + 2 collectives + 9 MLA + 6 MoE + 3 shared = 22 (x58), dense layer = 2 + 2 + 9 + 3 = 16 (x3), + 3
    from jalapeno.perf.model import kernel_count

    assert kernel_count(LLAMA_8B) == 32 * 9 + 3 == 291
    assert kernel_count(GPT_OSS_120B) == 36 * 12 + 3
    assert kernel_count(GPT_OSS_120B, tp=2) == 36 * 14 + 3
    assert kernel_count(DEEPSEEK_R1, tp=8, ep=8) == 58 * 22 + 3 * 16 + 3 == 1327
    for model, par, n in ((LLAMA_8B, Parallelism(), 291), (DEEPSEEK_R1, Parallelism(tp=8, ep=8), 1327)):
        base, over = _pair(model, par, Precision("native"), kernel_overhead_us=2.5)
        for shape in (DECODE, PREFILL, MIXED):  # every step runs its kernels
            assert _dt(base, over, shape) == pytest.approx(n * 2.5e-6, rel=1e-9)


def _with_launch(us: float):
    from jalapeno.hardware.schema import Fact

    return H200.model_copy(update={"kernel_launch_us": Fact(value=us, status="inferred", source="test")})


def test_decode_step_fixed_cost_is_chip_launch_plus_stack_term_per_kernel():
    # hand count: GPT-OSS-120B at TP1 runs 36 x 12 + 3 = 435 kernels a decode step; the chip's launch gap 0.6 us
    # (a chip fact) + the stack's fitted 4.1 us per kernel + 100 us per step = 100 + 435 x 4.7 = 2144.5 us
    terms = {**H200_EFF, "step_overhead_us": 100.0, "kernel_overhead_us": 4.1}
    none = CostModel(GPT_OSS_120B, H200, Parallelism(), Precision("native"), efficiency=Efficiency(**H200_EFF))
    split = CostModel(GPT_OSS_120B, _with_launch(0.6), Parallelism(), Precision("native"),
                      efficiency=Efficiency(**terms))
    assert split.kernels == 435
    assert _dt(none, split, DECODE) == pytest.approx((100.0 + 435 * (0.6 + 4.1)) * 1e-6, rel=1e-9)


def test_a_split_per_kernel_cost_prices_like_the_unsplit_fit():
    # a fit with the launch gap held as a chip fact moves only the stack's share: launch + stack = the old total,
    # so the same chip prices every step exactly as before (same-chip held-out errors cannot move)
    for model, par in ((DEEPSEEK_R1, Parallelism(tp=8, ep=8)), (LLAMA_8B, Parallelism())):
        whole = CostModel(model, H200, par, Precision("native"), efficiency=Efficiency(**{**H200_EFF, "kernel_overhead_us": 4.7}))
        split = CostModel(model, _with_launch(1.2), par, Precision("native"),
                          efficiency=Efficiency(**{**H200_EFF, "kernel_overhead_us": 3.5}))
        for shape in (DECODE, PREFILL, MIXED):
            assert split.step(shape).time_s == pytest.approx(whole.step(shape).time_s, rel=1e-12)


def test_a_transferred_stack_term_keeps_the_target_chips_launch_gap():
    # fitted values moved to another chip (its efficiency block) leave that chip's launch fact in place: the step
    # differs from the launch-free chip by exactly kernels x the target's gap
    eff = Efficiency(**{**H200_EFF, "kernel_overhead_us": 2.0})
    a = CostModel(LLAMA_8B, H200, Parallelism(), Precision("bf16"), efficiency=eff)
    b = CostModel(LLAMA_8B, _with_launch(3.0), Parallelism(), Precision("bf16"), efficiency=eff)
    assert _dt(a, b, DECODE) == pytest.approx(291 * 3.0e-6, rel=1e-9)
    # the fit's gradient for the stack term is unchanged by the chip fact (it is not a fitted parameter)
    assert np.array_equal(a.fixed_time_gradient("kernel_overhead_us"), b.fixed_time_gradient("kernel_overhead_us"))


def _with_pdl_saving(us: float, launch: float | None = None, status: str = "inferred"):
    from jalapeno.hardware.schema import Fact

    upd = {"pdl_kernel_saving_us": Fact(value=us, status=status, source="test")}
    if launch is not None:
        upd["kernel_launch_us"] = Fact(value=launch, status="inferred", source="test")
    return H200.model_copy(update=upd)


def test_a_chip_pdl_saving_comes_off_each_kernel_only_in_a_run_launched_with_pdl():
    # hand count: GPT-OSS-120B at TP1 runs 435 kernels a step; launch gap 0.6 + stack 4.0 = 4.6 us per kernel;
    # the chip's PDL saving 0.94 us per kernel (a chip fact): 435 x (4.6 - 0.94) = 1592.1 us in a PDL run
    terms = {**H200_EFF, "kernel_overhead_us": 4.0}
    none = CostModel(GPT_OSS_120B, H200, Parallelism(), Precision("native"), efficiency=Efficiency(**H200_EFF))
    chip = _with_pdl_saving(0.94, launch=0.6)
    off = CostModel(GPT_OSS_120B, chip, Parallelism(), Precision("native"), efficiency=Efficiency(**terms))
    on = CostModel(GPT_OSS_120B, chip, Parallelism(), Precision("native"),
                   efficiency=Efficiency(**terms, launch_pdl=True))
    for shape in (DECODE, PREFILL, MIXED):
        assert _dt(none, off, shape) == pytest.approx(435 * 4.6e-6, rel=1e-9)  # no PDL launch: the fact does nothing
        assert _dt(none, on, shape) == pytest.approx(435 * (4.6 - 0.94) * 1e-6, rel=1e-9)
    # with a fitted share as well (a user's own fit), the share comes off first: 435 x (4.6 x 0.75 - 0.94)
    both = CostModel(GPT_OSS_120B, chip, Parallelism(), Precision("native"),
                     efficiency=Efficiency(**terms, pdl_kernel_fraction=0.25, launch_pdl=True))
    assert _dt(none, both, DECODE) == pytest.approx(435 * (4.6 * 0.75 - 0.94) * 1e-6, rel=1e-9)
    # a kernel never costs less than nothing: a saving above the per-kernel cost leaves 0
    tiny = CostModel(GPT_OSS_120B, _with_pdl_saving(9.0), Parallelism(), Precision("native"),
                     efficiency=Efficiency(**terms, launch_pdl=True))
    assert _dt(none, tiny, DECODE) == pytest.approx(0.0, abs=1e-15)
    # the stack term's fit gradient is unchanged by the fact (not a fitted parameter): kernels x 1
    assert on.fixed_time_gradient("kernel_overhead_us") @ on.features(DECODE) == pytest.approx(435e-6, rel=1e-12)


def test_the_pdl_saving_is_a_chip_fact_never_a_fitted_value(tmp_path):
    """A chip file stating the PDL saving as a fitted value is refused in one line naming the file and the field."""
    import yaml

    from jalapeno.hardware.catalog import BUILTIN_DIR, SpecError, load_spec_file

    data = yaml.safe_load((BUILTIN_DIR / "b200.yaml").read_text())
    assert data["pdl_kernel_saving_us"]["status"] == "inferred"  # the shipped value is sourced
    data["pdl_kernel_saving_us"] = {"value": 0.9, "status": "fitted", "source": "fit_terms.py"}
    bad = tmp_path / "fitpdl.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as ei:
        load_spec_file(bad)
    msg = str(ei.value)
    assert "fitpdl.yaml: pdl_kernel_saving_us" in msg and "pdl_kernel_fraction" in msg and "\n" not in msg.strip()
    data["pdl_kernel_saving_us"]["status"] = "inferred"  # a sourced value loads
    bad.write_text(yaml.safe_dump(data))
    assert load_spec_file(bad).pdl_saving_us == 0.9


def test_fp8_moe_layer_overhead_counts_moe_layers_with_fp8_routed_experts_only():
    # DeepSeek-R1 native: FP8 128x128 block-scaled experts in 58 MoE layers (3 of 61 layers are dense)
    base, over = _pair(DEEPSEEK_R1, Parallelism(tp=8, ep=8), Precision("native"), fp8_moe_layer_overhead_us=80.0)
    for shape in (DECODE, PREFILL, MIXED):  # once per step, whatever the step holds
        assert _dt(base, over, shape) == pytest.approx(58 * 80e-6, rel=1e-9)
    # the FP4 checkpoint keeps attention and shared experts in FP8 but its routed experts are FP4: no term
    b2, o2 = _pair(DEEPSEEK_R1, Parallelism(tp=8, ep=8), Precision("fp4"), fp8_moe_layer_overhead_us=80.0)
    assert _dt(b2, o2, DECODE) == 0.0
    # a dense model quantized to FP8 has no MoE layer; GPT-OSS's native experts are MXFP4
    b3, o3 = _pair(LLAMA_8B, prec=Precision("fp8"), fp8_moe_layer_overhead_us=80.0)
    assert _dt(b3, o3, DECODE) == 0.0
    b4, o4 = _pair(GPT_OSS_120B, prec=Precision("native"), fp8_moe_layer_overhead_us=80.0)
    assert _dt(b4, o4, DECODE) == 0.0
    # the breakdown's overhead row carries it, and the fit's linearisation has its gradient
    def ovh(cm):
        return sum(o.time_s for o in cm.breakdown(DECODE).ops if o.name == "overhead")

    assert ovh(over) == pytest.approx(ovh(base) + 58 * 80e-6, rel=1e-9)
    assert over.fixed_time_gradient("fp8_moe_layer_overhead_us") @ over.features(DECODE) == pytest.approx(58e-6)


def test_stack_fp8_moe_term_applies_under_its_engine_stack_only():
    from jalapeno.perf.frameworks import apply_framework

    eff = Efficiency(**H200_EFF, framework_fp8_moe_layer_us={"trt-llm": 80.0})
    assert apply_framework(eff, "trt").fp8_moe_layer_overhead_us == 80.0  # alias of trt-llm
    assert apply_framework(eff, "sglang").fp8_moe_layer_overhead_us == 0.0
    assert apply_framework(eff, None).fp8_moe_layer_overhead_us == 0.0
    # a disaggregated stack over TensorRT-LLM: its pools carry their own fitted per-precision terms
    assert apply_framework(eff, "dynamo-trt").fp8_moe_layer_overhead_us == 0.0


def test_a_calibrated_fp8_moe_value_prices_tensorrt_llms_fp8_moe_path_per_moe_layer():
    """A B200 efficiency block carrying the stack's FP8 MoE value (fitted by `fit_terms.py`, not shipped:
    docs/fidelity.md "Step 5") through the public cost-model factory: DeepSeek-R1's FP8 checkpoint under
    TensorRT-LLM pays 58 MoE layers x the value per step; SGLang, the FP4 checkpoint and the shipped catalogue
    (no value) do not."""
    from jalapeno.hardware.catalog import get_chip
    from jalapeno.sim.factory import cost_model_for

    us = 95.0
    b200 = get_chip("b200")
    eff = b200.efficiency.model_copy(update={"framework_fp8_moe_layer_us": {"trt-llm": us}})

    def t(prec, fw, e=eff):
        cm = cost_model_for("deepseek-r1", b200, tp=8, ep=8, precision=prec, framework=fw, efficiency=e)
        return cm.step(DECODE).time_s

    assert t("native", "trt-llm") - t("native", "sglang") == pytest.approx(58 * us * 1e-6, rel=1e-9)
    assert t("fp4", "trt-llm") == t("fp4", "sglang")
    shipped = b200.efficiency
    assert t("native", "trt-llm", shipped) == t("native", "sglang", shipped)
    assert not shipped.framework_fp8_moe_layer_us  # the catalogue ships no value (held-out rows overshoot)


def test_pdl_hides_its_share_of_each_kernels_cost_only_in_a_run_launched_with_pdl():
    # hand count: GPT-OSS-120B at TP1 runs 36 x 12 + 3 = 435 kernels a step; the chip's launch gap 0.6 us + the
    # stack's 4.0 us per kernel, 25% of it hidden by Programmatic Dependent Launch: 435 x 4.6 x 0.75 = 1500.75 us
    terms = {**H200_EFF, "kernel_overhead_us": 4.0, "pdl_kernel_fraction": 0.25}
    none = CostModel(GPT_OSS_120B, H200, Parallelism(), Precision("native"), efficiency=Efficiency(**H200_EFF))
    off = CostModel(GPT_OSS_120B, _with_launch(0.6), Parallelism(), Precision("native"), efficiency=Efficiency(**terms))
    on = CostModel(GPT_OSS_120B, _with_launch(0.6), Parallelism(), Precision("native"),
                   efficiency=Efficiency(**terms, launch_pdl=True))
    for shape in (DECODE, PREFILL, MIXED):
        assert _dt(none, off, shape) == pytest.approx(435 * 4.6e-6, rel=1e-9)  # not launched with PDL: the whole cost
        assert _dt(none, on, shape) == pytest.approx(435 * 4.6 * 0.75e-6, rel=1e-9)
    # the fit's gradients: d/d(kernel_overhead_us) = kernels x (1 - share); d/d(share) = -kernels x the full cost
    assert on.fixed_time_gradient("kernel_overhead_us") @ on.features(DECODE) == pytest.approx(435 * 0.75e-6, rel=1e-12)
    assert on.fixed_time_gradient("pdl_kernel_fraction") @ on.features(DECODE) == pytest.approx(-435 * 4.6e-6, rel=1e-12)
    assert not off.fixed_time_gradient("pdl_kernel_fraction").any()
