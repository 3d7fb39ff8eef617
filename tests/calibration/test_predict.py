"""The predictor: metric names and units against the cost model's own step time, KV-filling offline runs."""

from __future__ import annotations

import pytest

from jalapeno.calibration import Layout, SimSpec
from jalapeno.calibration.predict import cost_model, efficiency_of, offline_concurrency, simulate, with_efficiency
from jalapeno.perf import StepShape


def test_single_stream_tpot_equals_decode_step_time():
    # one request at a time, fixed lengths: every decode step has one sequence, so TPOT (s) must be the cost
    # model's decode step time at that context, and output tok/s per chip = 1 / TPOT over the decode phase
    spec = SimSpec("llama-3.1-8b", "h200", Layout(1), "bf16", "bf16", isl=512, osl=64, concurrency=1,
                   range_ratio=1.0, num_prompts_per_concurrency=2)
    got = simulate(spec)
    cm = cost_model(spec)
    mid = cm.step(StepShape.from_lists(decode_ctx=[512 + 32])).time_s
    assert got["median_tpot"] == pytest.approx(mid, rel=0.02)
    prefill = cm.step(StepShape.from_lists(prefill=[(512, 0)])).time_s
    # the serving front end's per-request latency: a fixed part and a part per prompt token
    front = cm.eff.request_overhead_ms / 1000 + cm.eff.request_overhead_us_per_token * 1e-6 * 512
    assert got["median_ttft"] == pytest.approx(front + prefill, rel=0.05)
    e2e = front + prefill + 63 * mid
    assert got["median_e2e_latency"] == pytest.approx(e2e, rel=0.03)
    # one request at a time: the next is sent when the last finishes, so the front end's latency is in the cycle
    assert got["output_tput_per_gpu"] == pytest.approx(64 / e2e, rel=0.03)
    assert got["median_interactivity"] == pytest.approx(1 / mid, rel=0.03)


def test_efficiency_override_slows_memory_bound_decode():
    spec = SimSpec("llama-3.1-8b", "h200", Layout(1), "bf16", "bf16", isl=256, osl=32, concurrency=1,
                   range_ratio=1.0, num_prompts_per_concurrency=1)
    base = with_efficiency(efficiency_of("h200"), step_overhead_us=0.0, layer_overhead_us=0.0)
    slow = with_efficiency(base, memory={"hbm": base.memory["hbm"] / 2})
    assert slow.compute == base.compute  # dicts are merged, not replaced
    a, b = simulate(spec, base)["median_tpot"], simulate(spec, slow)["median_tpot"]
    assert 1.6 < b / a < 2.05  # weight streaming dominates a batch-1 decode step


def test_offline_concurrency_fills_the_kv_cache():
    spec = SimSpec("llama-3.1-8b", "h200", Layout(1), "fp8", "bf16", isl=1000, osl=1000, concurrency=None,
                   range_ratio=1.0, kind="offline")
    assert offline_concurrency(spec, 2_016_000) == 1000
    assert offline_concurrency(spec, 10**9) == 2048  # capped
    assert offline_concurrency(spec, 10) == 1


def test_inferencex_rows_use_their_frameworks_request_overhead():
    from jalapeno.calibration.predict import framework_profile
    from jalapeno.perf.frameworks import get_framework

    base = dict(model="llama-3.1-8b", chip="h200", layout=Layout(1), weights="bf16", kv="bf16", isl=256, osl=16,
                concurrency=1, range_ratio=1.0, num_prompts_per_concurrency=2)
    ix = SimSpec(**base, kind="ix", framework="trt")
    assert framework_profile(ix) == "trt-llm"
    assert framework_profile(SimSpec(**base, kind="nim", framework="nim")) is None
    assert framework_profile(SimSpec(**base, kind="ix", framework="atom")) is None  # no profile: the chip's
    # a disaggregated stack is a profile (its engine's front end; the handoff applies only between pools)
    assert framework_profile(SimSpec(**base, kind="ix", framework="dynamo-sglang")) == "dynamo-sglang"
    with_fw, generic = simulate(ix)["median_ttft"], simulate(ix, frameworks=False)["median_ttft"]
    eff = efficiency_of("h200")
    fw_ms = eff.framework_overhead_ms.get("trt-llm", get_framework("trt").request_overhead_ms)
    d = (fw_ms - eff.request_overhead_ms) / 1000
    assert with_fw - generic == pytest.approx(d, abs=1e-9)
    no_front = simulate(ix, request_overhead_ms=0.0)["median_ttft"]
    assert no_front == pytest.approx(generic - eff.request_overhead_ms / 1000, abs=1e-9)


def test_request_latency_grows_with_the_prompt_by_the_per_token_term():
    # fixed lengths, one request at a time: TTFT and E2E grow by exactly per-token time x prompt length
    spec = SimSpec("llama-3.1-8b", "h200", Layout(1), "bf16", "bf16", isl=512, osl=16, concurrency=1,
                   range_ratio=1.0, num_prompts_per_concurrency=2)
    base = with_efficiency(efficiency_of("h200"), request_overhead_us_per_token=0.0)
    slow = with_efficiency(base, request_overhead_us_per_token=10.0)
    a, b = simulate(spec, base), simulate(spec, slow)
    assert b["median_ttft"] - a["median_ttft"] == pytest.approx(512 * 10e-6, rel=1e-6)
    assert b["median_e2e_latency"] - a["median_e2e_latency"] == pytest.approx(512 * 10e-6, rel=1e-6)
    assert b["median_tpot"] == pytest.approx(a["median_tpot"], rel=1e-9)  # not in step time
