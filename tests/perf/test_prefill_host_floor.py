"""The eager-prefill host floor (issue #13 step 12b): a step that prefills lasts max(host issue time, device time).

References are hand counts: the floor is ``efficiency.prefill_host_kernel_us`` x the step's kernels
(``perf.model.kernel_count``: Llama-3.1-8B 291, DeepSeek-R1 at TP8 1,327); a step whose
device time is above it is priced exactly as without it; decode steps never see it; the stack's value comes from
``framework_prefill_host_kernel_us`` through ``--framework`` (``perf.frameworks.stack_kernel_terms``).
"""

from __future__ import annotations

import pytest
from perf_refdata import DEEPSEEK_R1, H200, H200_EFF, LLAMA_8B

from jalapeno.hardware.schema import Efficiency
from jalapeno.perf import CostModel, Parallelism, Precision, StepShape
from jalapeno.perf.frameworks import apply_framework, stack_kernel_terms

SHORT = StepShape.from_lists(prefill=[(64, 0)])
LONG = StepShape.from_lists(prefill=[(8192, 0)])
DECODE = StepShape.from_lists(decode_ctx=[1000] * 8)
MIXED = StepShape.from_lists(prefill=[(64, 0)], decode_ctx=[1000] * 8)


def _cm(model=LLAMA_8B, par=Parallelism(), prec=Precision("bf16"), **terms) -> CostModel:
    return CostModel(model, H200, par, prec, efficiency=Efficiency(**{**H200_EFF, **terms}))


def test_a_short_prefill_lasts_the_host_floor_kernels_times_the_term():
    base, floored = _cm(), _cm(prefill_host_kernel_us=110.0)
    assert base.step(SHORT).time_s < 0.03201  # the device needs less than the host: host-bound
    assert floored.prefill_host_s == pytest.approx(291 * 110e-6, rel=1e-12)  # Llama-3.1-8B: 291 kernels
    assert floored.step(SHORT).time_s == pytest.approx(0.03201, rel=1e-12)
    assert floored.step(MIXED).time_s == pytest.approx(0.03201, rel=1e-12)  # a mixed step prefills too
    # DeepSeek-R1 at TP8 EP8: 1,327 kernels (61 layers of MLA + 58 MoE blocks + the TP all-reduces)
    ds = _cm(DEEPSEEK_R1, Parallelism(tp=8, ep=8), Precision("native"), prefill_host_kernel_us=70.0)
    assert ds.step(SHORT).time_s == pytest.approx(1327 * 70e-6, rel=1e-12)


def test_the_floor_is_a_max_not_a_sum():
    base, floored = _cm(), _cm(prefill_host_kernel_us=110.0)
    long = base.step(LONG).time_s
    assert long > 0.03201  # an 8k prompt keeps the device busier than the host
    assert floored.step(LONG).time_s == long  # the host's issue time is hidden under the device's
    assert floored.step(LONG).energy_j == base.step(LONG).energy_j


def test_decode_steps_never_see_the_floor():
    base, floored = _cm(), _cm(prefill_host_kernel_us=500.0)
    assert floored.step(DECODE).time_s == base.step(DECODE).time_s
    t0, _ = base.decode_steps(DECODE, 5)
    t1, _ = floored.decode_steps(DECODE, 5)
    assert list(t1) == list(t0)


def test_a_floored_step_idles_the_device_for_the_rest():
    base, floored = _cm(), _cm(prefill_host_kernel_us=110.0)
    b, f = base.step(SHORT), floored.step(SHORT)
    idle = base.idle_w * (0.03201 - b.time_s) * base.chips_per_replica
    assert f.energy_j == pytest.approx(min(b.energy_j + idle, base.tdp_w * 0.03201 * base.chips_per_replica), rel=1e-9)


def test_the_stack_value_reaches_only_that_stack():
    eff = Efficiency(**H200_EFF, framework_prefill_host_kernel_us={"sglang": 70.0})
    assert eff.prefill_host_kernel_us == 0.0
    assert apply_framework(eff, "sglang").prefill_host_kernel_us == 70.0
    assert apply_framework(eff, "trt-llm").prefill_host_kernel_us == 0.0
    assert apply_framework(eff, "vllm").prefill_host_kernel_us == 0.0
    assert stack_kernel_terms(eff, None) is eff
    # a disaggregated stack's pools carry their own fitted terms: no engine kernel terms there
    assert apply_framework(eff, "dynamo-sglang").prefill_host_kernel_us == 0.0


def test_a_negative_stack_value_is_refused():
    with pytest.raises(ValueError, match="framework_prefill_host_kernel_us sglang=-1.0 must be >= 0"):
        Efficiency(**H200_EFF, framework_prefill_host_kernel_us={"sglang": -1.0})


def _engine(cm: CostModel):
    from jalapeno.engine import Engine, EngineConfig, VirtualClock
    from jalapeno.sim.backend import SimBackend

    backend = SimBackend(cm)
    backend.max_multi_step = 1  # one step per engine.step(): arrivals land between the steps counted here
    return Engine(backend, EngineConfig(max_num_seqs=8, max_num_batched_tokens=1000, separate_prefill=True),
                  clock=VirtualClock())


def _scenario(cm: CostModel):
    """SGLang-style scheduling (prefill batches alone): A (64-token prompt, 10 tokens) alone for its prefill and
    two decode steps, then B (64 tokens, 3) arrives and is prefilled while A pauses."""
    from jalapeno.engine import SamplingParams
    from jalapeno.testing.engine_fakes import run_to_completion

    e = _engine(cm)
    a = e.add_request(prompt_len=64, sampling=SamplingParams(max_tokens=10), request_id="a")
    for _ in range(3):
        e.step()
    b = e.add_request(prompt_len=64, sampling=SamplingParams(max_tokens=3), request_id="b")
    run_to_completion(e)
    return a, b


def test_through_the_scheduler_each_prefill_step_lasts_the_floor():
    base, floored = _cm(), _cm(prefill_host_kernel_us=110.0)
    p64 = base.step(SHORT).time_s  # one 64-token prompt: the shape of A's and B's prefill steps
    a0, b0 = _scenario(base)
    a1, b1 = _scenario(floored)
    assert a0.first_token_s == pytest.approx(p64, rel=1e-9)
    assert a1.first_token_s == pytest.approx(0.03201, rel=1e-9)  # 291 kernels x 110 us: host-bound
    assert b1.first_token_s - b1.arrival_s == pytest.approx(0.03201, rel=1e-9)
    # A's life holds both prefill steps (its own, and B's while it pauses); its decode steps are unchanged
    assert a1.finish_s - a0.finish_s == pytest.approx(2 * (0.03201 - p64), rel=1e-9)
    assert b1.finish_s - b1.first_token_s == pytest.approx(b0.finish_s - b0.first_token_s, rel=1e-9)
