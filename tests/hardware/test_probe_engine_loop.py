"""The PyTorch (unfused) path's per-layer host term (issue 16, eighteenth session): the cost model adds it to exactly
the steps past the fused crossover, in every pricing path; ``calibrate --probe`` recovers a known value from an
engine loop's steps made by hand (whatever the machine's level), its notes line round-trips, and the probe's real
engine loop on a tiny model records every scheduled token."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jalapeno.hardware import probe as pr
from jalapeno.hardware.catalog import load_spec_file

ROOT = Path(__file__).parent.parent.parent
#: the 06:11 quiet probe of the committed full grid: a fused crossover of 128 and the served model's steps
CHIP = ROOT / "benchmarks" / "data" / "grid_check_0610_full_median" / "local.yaml"


def _cost_model(us: float, chip_path: Path = CHIP):
    from jalapeno.sim.factory import cost_model_for

    chip = load_spec_file(chip_path)
    eff = chip.efficiency.model_copy(update={"unfused_layer_overhead_us": us})
    return cost_model_for("smollm2-135m", chip, precision="fp32", kv="fp32", efficiency=eff)


def test_the_term_is_added_to_the_steps_past_the_crossover_only() -> None:
    """30 layers x 2,500 us = 75 ms on a step of more than 128 tokens (a prompt beside decode rows, a long fresh
    prompt, a decode batch of 129), nothing on one of at most 128 (the fused kernel's)."""
    from jalapeno.perf.shape import StepShape

    off, on = _cost_model(0.0), _cost_model(2500.0)
    cases = {
        StepShape.from_lists(prefill=[(110, 0)], decode_ctx=[200] * 18): 0.0,  # 128 tokens: fused
        StepShape.from_lists(prefill=[(111, 0)], decode_ctx=[200] * 18): 0.075,  # 129: PyTorch
        StepShape.from_lists(prefill=[(512, 0)]): 0.075,
        StepShape.from_lists(decode_ctx=[300] * 128): 0.0,
        StepShape.from_lists(decode_ctx=[300] * 129): 0.075,
    }
    for shape, extra in cases.items():
        assert on.step(shape).time_s - off.step(shape).time_s == pytest.approx(extra, abs=1e-12)


@pytest.mark.parametrize("rows", [24, 129])
def test_runs_of_decode_steps_price_as_their_single_steps(rows: int) -> None:
    """``decode_steps`` / ``decode_step_lists`` (the simulator's multi-step path) equal k calls of ``step`` with the
    term, on either side of the crossover."""
    from jalapeno.perf.shape import StepShape

    cm = _cost_model(2500.0)
    shape = StepShape.from_lists(decode_ctx=[150] * rows)
    k = 5
    one = [cm.step(StepShape.from_lists(decode_ctx=[150 + i] * rows)).time_s for i in range(k)]
    ts, _ = cm.decode_steps(shape, k)
    lists, _ = cm.decode_step_lists(shape, k)
    assert ts.tolist() == pytest.approx(one, rel=1e-12)
    assert lists == pytest.approx(one, rel=1e-12)


def test_a_chip_without_a_fused_kernel_pays_it_on_every_step() -> None:
    """A chip that records no crossover (or 0: the kernel off) runs every step on the PyTorch path."""
    from jalapeno.hardware.schema import ChipSpec
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.factory import cost_model_for

    data = load_spec_file(CHIP).model_dump(mode="json")
    data["execution"]["fused_max_batch"]["value"] = 0
    chip = ChipSpec.model_validate(data)
    shape = StepShape.from_lists(decode_ctx=[100] * 4)
    t = {us: cost_model_for("smollm2-135m", chip, precision="fp32", kv="fp32",
                            efficiency=chip.efficiency.model_copy(update={"unfused_layer_overhead_us": us}))
         .step(shape).time_s for us in (0.0, 1000.0)}
    assert t[1000.0] - t[0.0] == pytest.approx(0.030, abs=1e-12)


def _hand_made_loop(us: float, level: float, seed: int = 0, chip_path: Path = CHIP) -> list:
    """Engine-loop steps of a closed loop's kinds — decode-only (16-24 rows), a prompt beside them on either side of
    the crossover, a first wave of fresh prompts —, each taking ``level`` x its price without the term, plus
    ``level`` x 30 layers x ``us`` on the PyTorch path, with +-2 % noise."""
    from jalapeno.perf.shape import StepShape

    cm = _cost_model(0.0, chip_path)
    rng = np.random.default_rng(seed)
    steps = []
    for i in range(120):
        rows = int(rng.integers(16, 25))
        ctx = int(rng.integers(rows * 110, rows * 170))
        q, r = divmod(ctx, rows)
        kind = i % 4
        pre: tuple = () if kind < 2 else ((int(rng.integers(113, 129)), 0),) if kind == 2 else \
            ((int(rng.integers(100, 112)), 0),)
        if kind == 3:
            rows, ctx, q, r = 16, 16 * 120, 120, 0  # <= 128 tokens: fused
        if i == 0:
            pre, rows, ctx, q, r = tuple((110, 0) for _ in range(24)), 0, 0, 0, 0  # the first wave
        shape = StepShape.from_lists(prefill=list(pre), decode_ctx=[q + 1] * r + [q] * (rows - r))
        t = cm.step(shape).time_s + (30 * us * 1e-6 if shape.tokens > 128 else 0.0)
        steps.append((pre, rows, ctx, level * t * (1 + 0.02 * rng.uniform(-1, 1))))
    return steps


@pytest.mark.parametrize("us, level", [(2500.0, 1.0), (3000.0, 1.25), (0.0, 0.9)])
def test_the_fit_recovers_a_known_term_at_any_machine_level(us: float, level: float) -> None:
    """The fit reads every step at the loop's decode-only level, so a machine 0.9-1.25x the probe's other
    measurements returns the term the steps were made with (to the noise), and the fused prompts' residual is ~0."""
    from jalapeno.calibration.probe_fit import fit_unfused_overhead, probe_from_chip

    chip = load_spec_file(CHIP)
    res = probe_from_chip(chip)
    res.engine_loop_steps = _hand_made_loop(us, level)
    fit = fit_unfused_overhead(res, chip)
    assert fit is not None and fit.cap == 128 and fit.layers == 30
    assert fit.decode_level == pytest.approx(level, rel=0.02)
    assert fit.us == pytest.approx(us, abs=150.0)
    assert abs(fit.extra["fused prompt"][1]) < 0.005
    assert fit.extra["unfused"][0] == 31  # 30 prompts beside rows + the first wave


def test_no_loop_or_no_unfused_step_no_fit() -> None:
    from jalapeno.calibration.probe_fit import fit_unfused_overhead, probe_from_chip

    chip = load_spec_file(CHIP)
    res = probe_from_chip(chip)
    assert res.engine_loop_steps == []  # the 06:11 probe predates the loop
    assert fit_unfused_overhead(res, chip) is None
    res.engine_loop_steps = [s for s in _hand_made_loop(2500.0, 1.0) if not s[0] or sum(t for t, _ in s[0]) + s[1] <= 128]
    assert fit_unfused_overhead(res, chip) is None


def test_calibrate_probe_reads_the_loop_from_the_notes_and_writes_the_term(tmp_path: Path) -> None:
    """The probe's notes line -> ``probe_from_chip`` -> the refit chip: the steps round-trip (to the note's
    0.01 ms), the term and its provenance are in the efficiency block, and the chip loads and prices with it."""
    import yaml

    from jalapeno.calibration.probe_fit import probe_from_chip, refit_probe_file

    data = yaml.safe_load(CHIP.read_text())
    src = tmp_path / "in" / "local.yaml"
    src.parent.mkdir()
    src.write_text(yaml.safe_dump(data, sort_keys=False))
    refit, _ = refit_probe_file(src, tmp_path / "refit", "jalapeno calibrate --probe local.yaml")  # as calibrate prices
    res = probe_from_chip(load_spec_file(CHIP))
    res.engine_loop_steps = _hand_made_loop(2500.0, 1.1, chip_path=refit)
    line = pr.engine_loop_note(res)
    assert line.startswith("engine loop steps (prefill chunks/decode rows/context keys: ms; smollm2-135m, 30 layers")
    back = pr.parse_engine_loop_note(line)
    assert [s[:3] for s in back] == [s[:3] for s in res.engine_loop_steps]
    assert [s[3] for s in back] == pytest.approx([s[3] for s in res.engine_loop_steps], abs=6e-6)
    data["notes"] = [*data["notes"], line]
    src.write_text(yaml.safe_dump(data, sort_keys=False))
    path, _ = refit_probe_file(src, tmp_path / "out", "jalapeno calibrate --probe local.yaml")
    eff = load_spec_file(path).efficiency
    assert eff.unfused_layer_overhead_us == pytest.approx(2500.0, abs=150.0)
    note = eff.fitted["unfused_layer_overhead_us"].note
    assert "fused crossover's 128 tokens" in note and "unfused (31 steps)" in note


def test_the_probes_engine_loop_records_every_scheduled_token() -> None:
    """The real measurement on a two-layer random model: every prompt token is prefilled once and every output token
    after the first is decoded once (the first comes with the prefill), each step timed; the steps past the
    crossover (here 8 tokens) and up to it are both there."""
    import torch

    from jalapeno.backends.torch.runner import DecodePolicy

    loaded = pr.random_llama(2, 64, 96, 128, "cpu")
    res = pr.ProbeResult("cpu", "test", 1.0)
    res.fused_step_s, res.torch_step_s = {4: 1.0, 8: 1.0, 16: 2.0}, {4: 2.0, 8: 2.0, 16: 1.0}  # crossover 8
    res.served_model, res.served_layers = "tiny", 2
    loop = (3, 7, (5, 9), (2, 5))
    torch.manual_seed(0)
    pr.measure_engine_loop(res, loaded, "tiny", loop)
    assert not [n for n in res.notes if "not measured" in n], res.notes
    rng = np.random.default_rng(0)
    prompts, outputs = rng.integers(5, 10, 7), rng.integers(2, 6, 7)
    steps = res.engine_loop_steps
    assert sum(t for pre, _, _, _ in steps for t, _ in pre) == prompts.sum()
    assert sum(rows for _, rows, _, _ in steps) == (outputs - 1).sum()
    assert all(s[3] > 0 for s in steps) and len(res.samples["tiny engine loop steps"]) == len(steps)
    tokens = [sum(t for t, _ in pre) + rows for pre, rows, _, _ in steps]
    assert max(tokens) > DecodePolicy(fused_max_batch=8).fused_max_batch >= min(tokens)
