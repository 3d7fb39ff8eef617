"""Serving-stack scheduling policies reach the ONE scheduler as configuration: framework profile -> SimLimits ->
EngineConfig, and an InferenceX point's launch flags (calibration.launch, from the benchmark scripts)."""

import pytest

from jalapeno.calibration.launch import launch_policy
from jalapeno.calibration.points import Layout, SimSpec
from jalapeno.perf.frameworks import SGLANG_POLICY, get_framework, scheduling_policy
from jalapeno.sim.factory import SimLimits


def spec(chip, fw, weights="fp4", tp=8, conc=64, isl=1024, osl=1024, model="deepseek-r1"):
    return SimSpec(model, chip, Layout(tp=tp), weights, "fp8", isl, osl, conc, 0.8, framework=fw)


def test_profiles_name_their_policy():
    assert scheduling_policy("sglang").separate_prefill is True
    assert scheduling_policy("sglang").max_prefill_tokens == 16384  # SGLang server_args default
    assert scheduling_policy("vllm").separate_prefill is False
    assert scheduling_policy("trt").separate_prefill is False
    assert scheduling_policy("dynamo-sglang") is scheduling_policy("sglang")  # a disaggregated stack: its engine's
    assert scheduling_policy(None).recv_interval == 1
    assert "server_args" in get_framework("sglang").scheduling.source


def test_limits_carry_the_policy_into_the_engine_config():
    cfg = SimLimits(scheduling=SGLANG_POLICY.with_(recv_interval=30)).engine_config(64)
    assert (cfg.separate_prefill, cfg.max_prefill_tokens, cfg.recv_interval) == (True, 16384, 30)
    plain = SimLimits().engine_config(64)
    assert (plain.separate_prefill, plain.max_prefill_tokens, plain.recv_interval) == (False, None, 1)


@pytest.mark.parametrize("chip,weights,tp,conc,want", [
    ("b200", "fp4", 8, 64, (30, 16384)),     # dsr1_fp4_b200.sh: recv interval 30 at CONC >= 16
    ("b200", "fp4", 4, 8, (10, 16384)),      # ... 10 below
    ("b200", "native", 8, 16, (30, 32768)),  # dsr1_fp8_b200.sh TP8
    ("b200", "native", 4, 64, (10, 8192)),   # dsr1_fp8_b200.sh TP4
    ("h200", "native", 8, 64, (1, 32768)),   # dsr1_fp8_h200.sh: no recv interval
    ("mi355x", "fp4", 8, 64, (4, 196608)),   # dsr1_fp4_mi355x.sh: --num-continuous-decode-steps 4
])
def test_inferencex_launch_flags(chip, weights, tp, conc, want):
    p = launch_policy(spec(chip, "sglang", weights, tp, conc))
    assert p.separate_prefill and (p.recv_interval, p.max_prefill_tokens) == want
    assert "InferenceX" in p.source


def test_other_stacks_keep_their_profile():
    assert launch_policy(spec("b200", "vllm", model="gpt-oss-120b")) == scheduling_policy("vllm")
    assert launch_policy(spec("b200", "atom")) is None  # no profile: the engine's default


def test_trt_llm_attention_dp_points_balance_their_context_requests():
    """Every InferenceX TRT-LLM script with DP_ATTENTION=true sets attention_dp_config enable_balance, timeout_iters
    60: the point's policy balances over its attention-DP ranks (= TP); without attention DP it stays off."""
    from jalapeno.calibration.launch import TRT_BALANCE_TIMEOUT_ITERS

    dpa = SimSpec("deepseek-r1", "b200", Layout(tp=4, ep=4, dp_attention=True), "fp4", "fp8", 1024, 1024, 256, 0.8,
                  framework="trt")
    pol = launch_policy(dpa)
    assert (pol.balance_ranks, pol.balance_timeout_iters) == (4, TRT_BALANCE_TIMEOUT_ITERS) == (4, 60)
    assert "enable_balance" in pol.source
    cfg = SimLimits(scheduling=pol).engine_config(256)
    assert (cfg.balance_ranks, cfg.balance_timeout_iters) == (4, 60)
    plain = launch_policy(spec("b200", "trt"))
    assert (plain.balance_ranks, plain.balance_timeout_iters) == (1, 0)
    sglang_dpa = SimSpec("deepseek-r1", "b200", Layout(tp=8, ep=8, dp_attention=True), "fp4", "fp8", 1024, 1024, 64,
                         0.8, framework="sglang")
    assert launch_policy(sglang_dpa).balance_ranks == 1  # SGLang has no such wait


def test_only_the_gpt_oss_tensorrt_llm_script_launches_with_pdl():
    """gptoss_fp4_b200_trt.sh exports TRTLLM_ENABLE_PDL=1; dsr1_fp{4,8}_b200_trt.sh and the vLLM / SGLang scripts do
    not: only GPT-OSS under TensorRT-LLM runs with ``launch_pdl`` (and only where the chip has a PDL share)."""
    from jalapeno.calibration.launch import launch_efficiency, launches_with_pdl
    from jalapeno.calibration.predict import cost_model, efficiency_of

    gpt_trt = spec("b200", "trt", model="gpt-oss-120b", tp=2, conc=4)
    assert launches_with_pdl(gpt_trt)
    for other in (spec("b200", "trt"), spec("b200", "vllm", model="gpt-oss-120b"), spec("b200", "sglang")):
        assert not launches_with_pdl(other)
    eff = efficiency_of("b200")
    on = launch_efficiency(gpt_trt, eff)
    assert on.launch_pdl and not launch_efficiency(spec("b200", "vllm", model="gpt-oss-120b"), eff).launch_pdl
    # the B200 decode step of GPT-OSS at TP2 (507 kernels) is cheaper by exactly kernels x cost x share
    from jalapeno.perf import StepShape

    shape = StepShape.from_lists(decode_ctx=[1500] * 4)
    dt = cost_model(gpt_trt, eff).step(shape).time_s - cost_model(gpt_trt, on).step(shape).time_s
    # ... cheaper by exactly kernels x (the fitted share of each kernel's cost + the chip's PDL saving, a chip fact)
    from jalapeno.hardware.catalog import get_chip

    saving = get_chip("b200").pdl_saving_us
    assert saving > 0
    per = eff.kernel_overhead_us  # B200 states no separate launch gap
    assert dt == pytest.approx(507 * (per * eff.pdl_kernel_fraction + saving) * 1e-6, rel=1e-9)
