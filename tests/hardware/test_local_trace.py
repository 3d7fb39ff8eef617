"""The simulator on a hand-made local chip reproduces a recorded real-engine trace (no timing in the test).

``tests/hardware/data/local_trace.json`` was recorded by ``benchmarks/record_local_trace.py``: the torch backend
on the project's CPU VM running six requests (at most four at a time) on a tiny random Llama whose steps are all
engine overhead, with the probe's per-step / per-layer overhead measured just before. The local chip is rebuilt
from those two measured numbers (compute and bandwidth are irrelevant at this size); the simulator runs the same
requests through the same scheduler.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jalapeno.engine.sequence import SamplingParams
from jalapeno.hardware import probe as pr
from jalapeno.hardware.catalog import load_spec_file
from jalapeno.models.hf_config import arch_from_config
from jalapeno.sim.factory import SimLimits, build_sim_engine, cost_model_for

TRACE = json.loads((Path(__file__).parent / "data" / "local_trace.json").read_text())


def _simulate(tmp_path: Path) -> tuple[list, int]:
    res = pr.ProbeResult("cpu", "hand-made from the trace", 16.0, read_gbps={1: 10.0}, copy_gbps={1: 10.0},
                         matmul_tflops={"fp32": {"prefill-512": 0.05}, "bf16": {"prefill-512": 0.05}})
    res.step_overhead_us, res.layer_overhead_us = TRACE["step_overhead_us"], TRACE["layer_overhead_us"]
    res.seq_overhead_us = TRACE["seq_overhead_us"]
    chip = load_spec_file(pr.write_chip(res, tmp_path, "local", "hand-made from the recorded trace"))
    arch = arch_from_config(TRACE["model_config"], "trace-llama")
    engine = build_sim_engine(cost_model_for(arch, chip), limits=SimLimits(max_num_seqs=TRACE["max_num_seqs"]),
                              single_step=True)
    seqs = [engine.add_request(None, SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True),
                               prompt_len=r["prompt_len"]) for r in TRACE["requests"]]
    steps = 0
    while engine.has_unfinished():
        engine.step()
        steps += 1
    return seqs, steps


def test_simulator_reproduces_the_recorded_engine_trace(tmp_path: Path) -> None:
    seqs, steps = _simulate(tmp_path)
    assert steps == TRACE["steps"]  # the same scheduler takes the same steps
    sim_e2e = np.array([s.finish_s - s.arrival_s for s in seqs])
    rec_e2e = np.array([r["e2e_s"] for r in TRACE["requests"]])
    # the requests finish in the recorded order, and each one's simulated E2E is the same fraction of its
    # recorded E2E (the trace's shape: which steps each request waited through, and how long each kind takes)
    assert list(np.argsort(sim_e2e, kind="stable")) == list(np.argsort(rec_e2e, kind="stable"))
    ratio = sim_e2e / rec_e2e
    assert ratio.std() / ratio.mean() < 0.35
    # NOT asserted: the absolute scale. The trace and its overheads were recorded on the shared 2-core VM at
    # load ~14; there the simulated E2E came out 0.2-0.35x the recorded one (the overhead runs and the traced
    # run were disturbed differently). Re-record on a quiet machine, then tighten to |ratio - 1| < 0.25.


def test_sequence_overhead_adds_per_row_through_the_lm_head(tmp_path: Path) -> None:
    """Hand count: 100 µs per sequence adds 8 × 100 µs to an 8-sequence decode step, 3 × 100 µs to a step of one
    prefill chunk and two decodes, and the breakdown's overhead row carries it."""
    from jalapeno.perf.shape import StepShape

    res = pr.ProbeResult("cpu", "hand-made", 16.0, read_gbps={1: 10.0}, matmul_tflops={"bf16": {"prefill-512": 0.05}})
    chip = load_spec_file(pr.write_chip(res, tmp_path, "local", "hand-made"))
    arch = arch_from_config(TRACE["model_config"], "trace-llama")
    base = cost_model_for(arch, chip)
    more = cost_model_for(arch, chip, efficiency=chip.efficiency.model_copy(update={"seq_overhead_us": 100.0}))
    dec = StepShape(decode_seqs=8, decode_tokens=8, decode_ctx_sum=8 * 100)
    mixed = StepShape(prefill_tokens=32, prefill_seqs=1, prefill_attn_pairs=32 * 33 / 2, prefill_kv_tokens=32,
                      decode_seqs=2, decode_tokens=2, decode_ctx_sum=200)
    assert more.step(dec).time_s - base.step(dec).time_s == pytest.approx(800e-6, rel=1e-9)
    assert more.step(mixed).time_s - base.step(mixed).time_s == pytest.approx(300e-6, rel=1e-9)
    t, _ = more.decode_steps(dec, 5)
    t0, _ = base.decode_steps(dec, 5)
    assert np.allclose(t - t0, 800e-6)
    rows = {o.name: o for o in more.breakdown(dec).ops}
    rows0 = {o.name: o for o in base.breakdown(dec).ops}
    before = rows0["overhead"].time_s if "overhead" in rows0 else 0.0
    assert rows["overhead"].time_s - before == pytest.approx(800e-6)


def test_fp32_precision_doubles_the_bytes_and_takes_the_fp32_rate(tmp_path: Path) -> None:
    """The torch backend runs float32: with precision fp32 (and an fp32 KV cache) every weight, the LM head and
    the KV cache are 4 bytes (2x the 16-bit model's) and GEMMs run at the chip's fp32 rate."""
    from jalapeno.perf.shape import StepShape

    res = pr.ProbeResult("cpu", "hand-made", 16.0, read_gbps={1: 10.0},
                         matmul_tflops={"bf16": {"prefill-512": 0.0003}, "fp32": {"prefill-512": 0.02}})
    chip = load_spec_file(pr.write_chip(res, tmp_path, "local", "hand-made"))
    arch = arch_from_config(pr.llama_config(4, 576, 1536, 2048), "llama-like")
    b16 = cost_model_for(arch, chip)
    f32 = cost_model_for(arch, chip, precision="fp32", kv="fp32")
    assert set(f32.compute_dtypes.values()) == {"fp32"} and b16.compute_dtypes["attn"] == "bf16"
    dec = StepShape(decode_seqs=1, decode_tokens=1, decode_ctx_sum=100)
    ops16 = {o.name: o for o in b16.breakdown(dec).ops}
    ops32 = {o.name: o for o in f32.breakdown(dec).ops}
    for name in ("lm_head", "embed"):
        assert sum(ops32[name].bytes.values()) > 1.9 * sum(ops16[name].bytes.values())
    total16 = sum(sum(o.bytes.values()) for o in ops16.values())
    total32 = sum(sum(o.bytes.values()) for o in ops32.values())
    assert 1.95 < total32 / total16 <= 2.0  # all but the float32 logits double
    pre = StepShape(prefill_tokens=512, prefill_seqs=1, prefill_attn_pairs=512 * 513 / 2, prefill_kv_tokens=512)
    assert f32.step(pre).time_s < b16.step(pre).time_s / 10  # prefill at 0.02 TFLOPS, not 0.0003
