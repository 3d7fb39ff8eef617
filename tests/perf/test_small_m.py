"""The small-M terms of the cost model (``efficiency.compute_by_rows``, ``compute_memory_overlap``): a probed CPU's
GEMMs with few rows run far below the large-GEMM fraction, and their compute does not hide under the weight
stream. Hand counts on a hand-made chip; catalogue chips never take the path."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from jalapeno.hardware import probe as pr
from jalapeno.hardware.catalog import load_catalog, load_spec_file
from jalapeno.hardware.schema import Efficiency
from jalapeno.models.hf_config import arch_from_config
from jalapeno.perf.model import rows_efficiency
from jalapeno.perf.shape import StepShape
from jalapeno.sim.factory import cost_model_for

TABLE = {1: 0.1, 16: 0.4, 512: 0.8}
#: SmolLM2-135M's layer shapes, 2 layers, vocab 2048: 9 query heads and 3 KV heads of 64
ARCH = arch_from_config(pr.llama_config(2, 576, 1536, 2048), "small-m-llama")
GEMM_PARAMS = {"qkv_proj": 576 * (9 + 2 * 3) * 64, "o_proj": 576 * 576, "mlp": 3 * 576 * 1536}
LM_HEAD = 2048 * 576


def _chip(tmp_path: Path, **eff):
    """A hand-made CPU: 0.1 TFLOPS fp32, 10 GB/s read (one memory level), fractions 0.8 / 0.5, no overheads."""
    res = pr.ProbeResult("cpu", "hand-made", 16.0, read_gbps={1: 10.0}, matmul_tflops={"fp32": {"prefill-512": 0.1}})
    chip = load_spec_file(pr.write_chip(res, tmp_path, "local", "hand-made for the small-M tests"))
    base = {"compute_default": 0.8, "memory_default": 0.5, "step_overhead_us": 0.0, "layer_overhead_us": 0.0,
            "seq_overhead_us": 0.0}
    return chip, Efficiency.model_validate({**base, **eff})


def _cm(chip, eff):
    return cost_model_for(ARCH, chip, precision="fp32", kv="fp32", efficiency=eff)


def test_rows_efficiency_interpolates_in_log_rows_and_clamps() -> None:
    got = rows_efficiency(TABLE, np.array([0.0, 1.0, 4.0, 16.0, 128.0, 512.0, 4096.0]))
    # 4 rows: halfway from 1 to 16 in log2 -> (0.1 + 0.4) / 2; 128 rows: 3/5 of the way from 16 to 512
    assert got.tolist() == pytest.approx([0.1, 0.1, 0.25, 0.4, 0.4 + 0.4 * 3 / 5, 0.8, 0.8])


@pytest.mark.parametrize("overlap", [0.0, 0.25, 1.0])
def test_step_time_is_the_hand_count(tmp_path: Path, overlap: float) -> None:
    """A 4-sequence decode step (4 GEMM rows): each weight GEMM's compute at the table's 0.25 of 0.1 TFLOPS, every
    other operator's at 0.8, memory at 0.5 x 10 GB/s; op time = max(c, m) + (1 - overlap) min(c, m), summed."""
    chip, eff = _chip(tmp_path, compute_by_rows=TABLE, compute_memory_overlap=overlap)
    cm = _cm(chip, eff)
    shape = StepShape.from_lists(decode_ctx=[64] * 4)
    ops = {o.name: o for o in cm.breakdown(shape).ops}
    for name, p in GEMM_PARAMS.items():  # the accounting the hand count rests on: 2 FLOPs per weight per row
        assert ops[name].flops == pytest.approx(2 * p * 2 * 4)
    assert ops["lm_head"].flops == pytest.approx(2 * LM_HEAD * 4)
    gemm_frac = (0.1 + 0.4) / 2
    want = 0.0
    for o in ops.values():
        frac = gemm_frac if o.name in (*GEMM_PARAMS, "lm_head") else 0.8
        c = o.flops / (0.1e12 * frac)
        m = sum(o.bytes.values()) / (10e9 * 0.5)
        want += max(c, m) + (1 - overlap) * min(c, m)
        assert o.time_s == pytest.approx(max(c, m) + (1 - overlap) * min(c, m), rel=1e-12)
    assert cm.step(shape).time_s == pytest.approx(want, rel=1e-12)
    # the same step without the terms: every op at max(c, m) with the large-GEMM fraction
    plain = _cm(chip, eff.model_copy(update={"compute_by_rows": None, "compute_memory_overlap": None}))
    roofline = sum(max(o.flops / (0.1e12 * 0.8), sum(o.bytes.values()) / 5e9) for o in ops.values())
    assert plain.step(shape).time_s == pytest.approx(roofline, rel=1e-12)
    if overlap < 1:  # at overlap 1 this memory-bound step's small-M compute still hides under the weight read
        assert cm.step(shape).time_s > plain.step(shape).time_s


def test_small_m_decode_costs_grow_with_the_batch_where_the_roofline_is_flat(tmp_path: Path) -> None:
    """The physics the terms add: below the ridge the roofline prices batch 1 and batch 16 alike (the weight read);
    with small-M compute that does not hide, batch 16 costs clearly more."""
    chip, eff = _chip(tmp_path, compute_by_rows=TABLE, compute_memory_overlap=0.5)
    plain = _cm(chip, eff.model_copy(update={"compute_by_rows": None, "compute_memory_overlap": None}))
    cm = _cm(chip, eff)

    def ratio(model) -> float:
        one, sixteen = (model.step(StepShape.from_lists(decode_ctx=[64] * b)).time_s for b in (1, 16))
        return sixteen / one

    # the GEMMs' compute is 1/4 of their weight read at 1 row and equal to it at 16 (0.1 vs 0.4 of peak): with half
    # of it hidden, 1.125 -> 1.5 of the read (x 1.33), on top of the KV and activations the roofline already grows
    assert ratio(plain) < 1.2 and ratio(cm) > 1.2 * ratio(plain)


def test_decode_runs_fall_back_to_the_exact_path(tmp_path: Path) -> None:
    """decode_steps and decode_step_lists with the terms equal k calls of step (no closed-form line), with and
    without speculative verification rows."""
    from jalapeno.perf.model import advance_decode

    chip, eff = _chip(tmp_path, compute_by_rows=TABLE, compute_memory_overlap=0.3)
    cm = _cm(chip, eff)
    for shape in (StepShape.from_lists(decode_ctx=[64, 100, 7]),
                  StepShape.from_lists(decode_ctx=[64, 100], decode_tokens_per_seq=4)):
        k = 6
        want = [cm.step(advance_decode(shape, i)).time_s for i in range(k)]
        t, e = cm.decode_steps(shape, k)
        tl, el = cm.decode_step_lists(shape, k)
        assert t.tolist() == pytest.approx(want, rel=1e-12) and tl == pytest.approx(want, rel=1e-12)
        assert e.tolist() == pytest.approx(el, rel=1e-12)


def test_neutral_terms_give_the_roofline_on_a_catalogue_chip() -> None:
    """On a catalogue chip the general path with neutral terms (overlap 1, every row count at the large-GEMM
    fraction) prices what the fast paths price."""
    chip = load_catalog().resolve("h100")
    eff = chip.efficiency
    neutral = eff.model_copy(update={"compute_memory_overlap": 1.0,
                                     "compute_by_rows": {1: eff.compute.get("bf16", eff.compute_default)}})
    fast = cost_model_for("llama-3.1-8b", chip, precision="native", kv="bf16")
    slow = cost_model_for("llama-3.1-8b", chip, precision="native", kv="bf16", efficiency=neutral)
    assert not fast._small_m and slow._small_m
    for shape in (StepShape.from_lists(decode_ctx=[300] * 32),
                  StepShape.from_lists(prefill=[(512, 0)], decode_ctx=[100] * 8)):
        assert slow.step(shape).time_s == pytest.approx(fast.step(shape).time_s, rel=1e-12)
    shape = StepShape.from_lists(decode_ctx=[300] * 32)
    assert slow.decode_step_lists(shape, 5)[0] == pytest.approx(fast.decode_step_lists(shape, 5)[0], rel=1e-12)


def test_no_catalogue_chip_carries_the_terms() -> None:
    cat = load_catalog()
    for key in cat:
        chip = cat[key]
        assert chip.efficiency.compute_by_rows is None and chip.efficiency.compute_memory_overlap is None


@pytest.mark.parametrize("bad", [{}, {0: 0.5}, {4: 0.0}, {4: 1.5}])
def test_a_bad_rows_table_is_rejected(bad: dict) -> None:
    with pytest.raises(ValidationError, match="compute_by_rows"):
        Efficiency(compute_by_rows=bad)


def test_overlap_outside_zero_one_is_rejected() -> None:
    with pytest.raises(ValidationError):
        Efficiency(compute_memory_overlap=1.5)
    assert math.isclose(Efficiency(compute_memory_overlap=0.0).compute_memory_overlap or 0.0, 0.0)
