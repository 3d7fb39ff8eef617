"""The probe's decode steps of the served model's shape (issue 16, tenth session): the attention term fitted over
both models' steps by hand-made numbers, the real measurement on a tiny config, its notes line round-tripping
through ``jalapeno calibrate --probe``, and bad input as one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jalapeno.hardware import probe as pr
from jalapeno.hardware.catalog import load_spec_file

QUIET = Path(__file__).parent / "data" / "local_probe_quiet_2334.yaml"


def _hand_made_steps(chip, arch, layers: int, ns: float, icpt_s: float) -> dict[int, dict[int, float]]:
    """Steps that take the chip's own price (engine overheads and the term at 0) plus ``icpt_s`` per row plus
    ``ns`` per (query head, key, layer) of each row: layers x 9 heads x ctx x batch pairs."""
    from jalapeno.calibration.probe_fit import _unpriced_model
    from jalapeno.perf.shape import StepShape

    cm = _unpriced_model(arch, chip)
    return {b: {c: cm.step(StepShape.from_lists(decode_ctx=[c] * b)).time_s + icpt_s * b
                + ns * 1e-9 * layers * 9 * c * b for c in pr.LONG_CONTEXTS} for b in pr.LONG_BATCHES}


def test_attention_term_is_fitted_over_both_models_and_the_served_steps_are_priced_beside_it() -> None:
    """Crossover (6 layers) and served (SmolLM2-135M, 30 layers) steps with a known cost per (head, key, layer):
    the same 60 ns in both -> the shared fit and each model alone give 60 and the served steps priced by the chip
    are what they took less their per-row intercept; 60 vs 120 ns -> each model alone recovers its own slope and the
    shared one falls between with a residual that says so. The notes line round-trips through probe_from_chip."""
    from jalapeno.calibration.probe_fit import fit_decode_attention, fitted_chip_dict, probe_from_chip
    from jalapeno.hardware.schema import ChipSpec
    from jalapeno.models.catalog import load_model
    from jalapeno.models.hf_config import arch_from_config

    res = probe_from_chip(load_spec_file(QUIET))
    chip = ChipSpec.model_validate(fitted_chip_dict(res, "local", "refit"))
    cross = arch_from_config(pr.llama_config(6, *pr.CROSSOVER_MODEL), "x")
    served = load_model("smollm2-135m")
    res.ctx_step_s = _hand_made_steps(chip, cross, 6, 60.0, 1e-3)
    res.served_model, res.served_layers = "smollm2-135m", 30
    res.served_ctx_step_s = _hand_made_steps(chip, served, 30, 60.0, 3e-3)
    fit = fit_decode_attention(res, chip)
    assert fit is not None and fit.ns == pytest.approx(60.0, abs=0.01) and fit.rms_error < 1e-6
    assert fit.by_model == pytest.approx({"crossover": 60.0, "smollm2-135m": 60.0}, abs=0.01)
    assert sorted(fit.served_points) == sorted((b, c) for b in pr.LONG_BATCHES for c in pr.LONG_CONTEXTS)
    for (b, c), (measured, priced) in fit.served_priced.items():
        assert measured - priced == pytest.approx(3e-3 * b, rel=1e-6)  # the price lacks only the intercept

    res.served_ctx_step_s = _hand_made_steps(chip, served, 30, 120.0, 3e-3)
    fit = fit_decode_attention(res, chip)
    assert fit.by_model == pytest.approx({"crossover": 60.0, "smollm2-135m": 120.0}, abs=0.01)
    assert 60.0 < fit.ns < 120.0 and fit.worst_error > 0.01

    notes = pr._measurement_notes(res)
    line = next(n for n in notes if n.startswith("served-model decode step ms at context 65/129/577/1153/2305"))
    assert "(smollm2-135m, 30 layers, random weights): 1: " in line
    again = probe_from_chip(chip.model_copy(update={"notes": [*chip.notes, *notes]}))
    assert again.served_model == "smollm2-135m" and again.served_layers == 30
    assert again.served_ctx_step_s[8] == pytest.approx(res.served_ctx_step_s[8], abs=1e-6)
    assert not again.served_small_step_s
    res.served_small_step_s = {2: 0.0412345, 4: 0.0456789}  # the small batches' line round-trips apart
    notes = pr._measurement_notes(res)
    assert "served-model decode step ms at context 65 by small batch (smollm2-135m, 30 layers, random weights): " \
        "2: 41.234, 4: 45.679" in notes
    again = probe_from_chip(chip.model_copy(update={"notes": [*chip.notes, *notes]}))
    assert again.served_small_step_s == pytest.approx({2: 0.041234, 4: 0.045679}, abs=1e-9)
    assert again.served_ctx_step_s[8] == pytest.approx(res.served_ctx_step_s[8], abs=1e-6)
    written = ChipSpec.model_validate(fitted_chip_dict(again, "local", "refit"))
    note = written.efficiency.fitted["decode_attention_ns"].note
    # the refit also fits the memory / compute fractions jointly over both models' steps (eleventh session), so the
    # chip the slopes are read against moves with these made-up steps: each model's own slope is reported
    assert "each model alone: crossover " in note and ", smollm2-135m " in note and "priced by this chip" in note
    assert fit_decode_attention(again, written).by_model["smollm2-135m"] > \
        fit_decode_attention(again, written).by_model["crossover"]


def test_calibrate_says_each_models_own_slope(tmp_path: Path) -> None:
    """`jalapeno calibrate --probe` on a probe with the served model's steps: its one-line summary carries each
    model's own attention slope (the transfer check), read back from the written chip."""
    from jalapeno.calibration.probe_fit import fitted_chip_dict, probe_from_chip, refit_probe_file
    from jalapeno.hardware.schema import ChipSpec
    from jalapeno.models.catalog import load_model
    from jalapeno.models.hf_config import arch_from_config

    spec = load_spec_file(QUIET)
    res = probe_from_chip(spec)
    chip = ChipSpec.model_validate(fitted_chip_dict(res, "local", "refit"))
    res.ctx_step_s = _hand_made_steps(chip, arch_from_config(pr.llama_config(6, *pr.CROSSOVER_MODEL), "x"), 6,
                                      40.0, 1e-3)
    res.served_model, res.served_layers = "smollm2-135m", 30
    res.served_ctx_step_s = _hand_made_steps(chip, load_model("smollm2-135m"), 30, 40.0, 2e-3)
    src = tmp_path / "local.yaml"
    src.write_text(QUIET.read_text())
    raw = load_spec_file(src)
    extra = [n for n in pr._measurement_notes(res) if n.startswith(("decode step ms at", "served-model"))]
    import yaml

    data = yaml.safe_load(src.read_text())
    data["notes"] = [*raw.notes, *extra]
    src.write_text(yaml.safe_dump(data, sort_keys=False))
    _, line = refit_probe_file(src, tmp_path / "fit", "test")
    # both models' slopes agree (the transfer check); the refit fits the memory / compute fractions jointly over both
    # models' steps too (eleventh session), so the chip they are read against moves a little with made-up steps
    import re

    got = re.search(r"decode_attention_ns, crossover ([0-9.]+) ns, smollm2-135m ([0-9.]+) ns", line)
    assert got and float(got[1]) == pytest.approx(float(got[2]), abs=0.01)
    assert float(got[1]) == pytest.approx(40, rel=0.1)


def test_served_model_steps_are_timed_through_the_runner(tiny_llama_with_kernel: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The real measurement on a tiny Llama config.json (the catalogue's SmolLM2 would take seconds): a step at
    every context and batch, every sample kept; too little memory for it is a note, nothing measured."""
    cfg = tiny_llama_with_kernel
    res = pr.ProbeResult("cpu", "hand-made", 16.0)
    pr.measure_served_context(res, False, 0.0, str(cfg))
    assert res.served_model == str(cfg) and res.served_layers == 2
    assert sorted(res.served_ctx_step_s) == list(pr.LONG_BATCHES)
    assert all(sorted(by) == list(pr.LONG_CONTEXTS) and min(by.values()) > 0 for by in res.served_ctx_step_s.values())
    # and the small batches at the shortest context, in the same rounds and processes
    assert sorted(res.served_small_step_s) == list(pr.SERVED_SMALL_BATCHES)
    assert min(res.served_small_step_s.values()) > 0
    assert len(res.samples[f"{cfg} decode b4 ctx{pr.LONG_CONTEXTS[0]}"]) == pr.LONG_ROUNDS[0] * pr.SERVED_CONTEXT_PROCESSES
    # timed in SERVED_CONTEXT_PROCESSES processes (this one and fresh ones), every sample pooled, the spread noted
    assert len(res.samples[f"{cfg} decode b8 ctx{pr.LONG_CONTEXTS[-1]}"]) == pr.LONG_ROUNDS[0] * pr.SERVED_CONTEXT_PROCESSES
    assert any(n.startswith(f"served-model steps timed in {pr.SERVED_CONTEXT_PROCESSES} processes") for n in res.notes)
    assert list(res.served_prefill_s) == [pr.PREFILL_TOKENS] and res.served_prefill_s[pr.PREFILL_TOKENS] > 0
    assert len(res.samples[f"{cfg} prefill {pr.PREFILL_TOKENS}"]) == pr.PREFILL_ROUNDS[0]

    monkeypatch.setattr(pr, "_available_bytes", lambda device: 1_000_000)
    small = pr.ProbeResult("cpu", "hand-made", 16.0)
    pr.measure_served_context(small, False, 0.0, str(cfg))
    assert not small.served_ctx_step_s and "more than half the free memory; not measured" in small.notes[0]
    quick = pr.ProbeResult("cpu", "hand-made", 16.0)
    pr.measure_served_context(quick, True, 0.0, str(cfg))
    assert not quick.served_ctx_step_s and not quick.notes


def test_probe_times_its_steps_under_the_serving_thread_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy the probe sets before torch loads is the one `jalapeno serve` runs (the default, whatever an
    earlier probe recorded), unless the user set one; the line lands in the notes."""
    from jalapeno.hardware.threads import DEFAULT_POLICY, apply_thread_policy

    env: dict[str, str] = {}
    line = apply_thread_policy(env, loaded=lambda: False, serving=True)
    assert env == DEFAULT_POLICY.env([]) and DEFAULT_POLICY.label in line
    res = pr.ProbeResult("cpu", "hand-made", 16.0, thread_policy_line=line)
    assert f"engine steps timed under {line}" in pr._measurement_notes(res)
    user = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert "set in the environment" in apply_thread_policy(user, loaded=lambda: False, serving=True)
    assert user == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_an_unknown_served_model_is_one_line_before_any_probing(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from jalapeno.cli import main

    env = dict(os.environ)
    try:
        with pytest.raises(SystemExit) as exc:
            main(["hardware", "probe", "--served-model", "no-such-model-xyz", "--out", str(tmp_path)])
    finally:
        os.environ.clear()
        os.environ.update(env)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "no-such-model-xyz" in err and not (tmp_path / "local.yaml").exists()


def test_served_prefill_is_checked_against_the_chips_price() -> None:
    """A served-model prefill step that took the chip's own price plus its layers' engine overhead (30 x the chip's
    per-layer overhead) is reported as measured = priced (the overhead set aside, as the simulator prices it
    separately), appended to the compute fraction's provenance, and round-trips through the notes."""
    from jalapeno.calibration.probe_fit import (
        _unpriced_model,
        fitted_chip_dict,
        probe_from_chip,
        served_prefill_check,
    )
    from jalapeno.hardware.schema import ChipSpec
    from jalapeno.models.catalog import load_model
    from jalapeno.perf.shape import StepShape

    res = probe_from_chip(load_spec_file(QUIET))
    chip = ChipSpec.model_validate(fitted_chip_dict(res, "local", "refit"))
    price = _unpriced_model(load_model("smollm2-135m"), chip).step(StepShape.from_lists(prefill=[(512, 0)])).time_s
    res.served_model, res.served_layers = "smollm2-135m", 30
    res.served_prefill_s = {512: price + 30 * res.layer_overhead_us * 1e-6}
    (measured, priced), = served_prefill_check(res, chip).values()
    assert measured == pytest.approx(price, rel=1e-9) and priced == pytest.approx(price, rel=1e-9)
    again = probe_from_chip(chip.model_copy(update={"notes": [*chip.notes, *pr._measurement_notes(res)]}))
    assert again.served_prefill_s[512] == pytest.approx(res.served_prefill_s[512], abs=1e-5)
    note = ChipSpec.model_validate(fitted_chip_dict(again, "local", "x")).efficiency.fitted["compute_default"].note
    assert f"smollm2-135m (random weights) prefill step ms measured/priced by tokens: 512: {price * 1e3:.1f}/" in note


def test_context_steps_of_several_processes_are_pooled_and_a_failing_one_is_a_note(
        tiny_llama_with_kernel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chip's served-model steps pool every process's samples (one shape varies more from process to process
    than within one, issue 16); a further process that fails leaves a note and the steps already timed."""
    runs = [{(1, 65): [1.0, 3.0], (8, 65): [2.0]}, {(1, 65): [5.0], (8, 65): [4.0, 6.0], (16, 65): [9.0]}]
    assert pr.pool_processes(runs) == {(1, 65): [1.0, 3.0, 5.0], (8, 65): [2.0, 4.0, 6.0]}
    assert pr.process_spread_note(runs).endswith("at 65 keys by batch: 1: 2000.0/5000.0, 8: 2000.0/5000.0")

    def broken(model: str, budget_s: float) -> dict:
        raise pr.ConfigError("the context-step process failed: boom")

    monkeypatch.setattr(pr, "context_steps_in_child", broken)
    res = pr.ProbeResult("cpu", "hand-made", 16.0)
    pr.measure_served_context(res, False, 0.0, str(tiny_llama_with_kernel))
    assert len(res.samples[f"{tiny_llama_with_kernel} decode b1 ctx65"]) == pr.LONG_ROUNDS[0]
    assert any("a further process failed (ConfigError: the context-step process failed: boom)" in n
               for n in res.notes)
    assert not any(n.startswith("served-model steps timed in") for n in res.notes)


def test_an_unknown_model_in_the_context_step_process_is_a_clear_error() -> None:
    with pytest.raises(pr.ConfigError, match="context-step process failed: error: .*no-such-model"):
        pr.context_steps_in_child("no-such-model", 0.0)
