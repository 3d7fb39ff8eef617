"""The probe's repeated timings and the fits that use them (issue 16): interleaved rounds, the attention term by
least squares over contexts (recovered from hand-made noisy timings), the compute fraction over several prefill
lengths (and the peak raised when real prefill steps beat the microbenchmark), and the probe output round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jalapeno.hardware import probe as pr
from jalapeno.hardware.catalog import load_spec_file

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]


def test_interleaved_times_call_every_key_once_per_round() -> None:
    """A warm-up of each, then rounds a, b, a, b, ...: at least the minimum rounds, at most the maximum, more only
    while the budget lasts."""
    calls: list[str] = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    got = pr.interleaved_times(fns, 0.0, (3, 9))
    assert calls == ["a", "b"] * 4 and all(len(v) == 3 for v in got.values())
    calls.clear()
    got = pr.interleaved_times(fns, 1e9, (3, 5))
    assert calls == ["a", "b"] * 6 and all(len(v) == 5 for v in got.values())
    assert pr.robust_time([0.3, 0.1, 0.2]) == 0.2  # the median: the step the machine sustains, not its best
    assert pr.robust_time([0.4, 0.1, 0.2, 0.3]) == pytest.approx(0.25)


def test_attention_least_squares_recovers_the_slope_from_noisy_hand_made_steps() -> None:
    """Steps made by hand: base + b x (intercept_b + 45 ns x 54 pairs per key x ctx), each then off by a fixed
    pattern of up to +-3 % (the spread of one loaded sample). The least-squares slope over five contexts lands
    within 2 ns of 45; the two-point estimate of the old probe (65 and 577 keys) from the same noisy steps is off
    by more than 5 ns: the spread the fit had between quiet probes."""
    from jalapeno.calibration.probe_fit import attention_least_squares

    per_key, ctxs = 54.0, (65, 129, 577, 1153, 2305)
    base = {b: {c: 5e-3 + 2e-6 * b * c for c in ctxs} for b in (1, 8)}  # what the chip prices without the term
    icpt = {1: 1.0e-3, 8: 0.4e-3}
    exact = {b: {c: base[b][c] + b * (icpt[b] + 45e-9 * per_key * c) for c in ctxs} for b in (1, 8)}
    slope, got_icpt = attention_least_squares(exact, base, per_key)
    assert slope == pytest.approx(45e-9, rel=1e-9) and got_icpt[8] == pytest.approx(0.4e-3, rel=1e-6)
    noise = {1: (0.03, -0.02, -0.03, 0.01, 0.02), 8: (-0.02, 0.03, 0.02, -0.03, 0.01)}
    noisy = {b: {c: exact[b][c] * (1 + n) for c, n in zip(ctxs, noise[b], strict=True)} for b in (1, 8)}
    slope, _ = attention_least_squares(noisy, base, per_key)
    assert abs(slope * 1e9 - 45) < 2.0
    two = [((noisy[b][577] - base[b][577]) - (noisy[b][65] - base[b][65])) / (b * per_key * 512) for b in (1, 8)]
    assert abs(float(np.median(two)) * 1e9 - 45) > 5.0
    # no cost per key at all (steps flat in the context, under the chip's price): slope 0, not negative
    flat = {b: {c: base[b][c] - 1e-9 * c for c in ctxs} for b in (1, 8)}
    assert attention_least_squares(flat, base, per_key)[0] == 0.0


def _quiet_probe():
    from jalapeno.calibration.probe_fit import probe_from_chip

    return probe_from_chip(load_spec_file(DATA / "local_probe_quiet_2334.yaml"))


def _hand_made_probe(make, cd: float) -> pr.ProbeResult:
    """A probe whose decode steps by batch (the fused kernel up to batch 8, PyTorch above) and prefill steps at
    128 / 512 / 2048 tokens are what the cost model prices with memory fraction 0.6, compute and memory adding, and compute fraction
    ``cd`` of a 0.1 TFLOPS matmul peak (plus 6 layers x 10 us of overhead, which the probe's steps carry); ``make``
    is the ``hand_made_probe_result`` fixture (tests/hardware/conftest.py)."""
    from jalapeno.calibration.probe_fit import rows_table
    from jalapeno.hardware.schema import ChipSpec
    from jalapeno.models.hf_config import arch_from_config
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.factory import cost_model_for

    res = make()
    chip = ChipSpec.model_validate(pr.chip_dict(res, "local", "hand-made"))
    truth = chip.efficiency.model_copy(update={"memory_default": 0.6, "compute_memory_overlap": 0.0,
                                               "compute_default": cd, "layer_overhead_us": 0.0,
                                               "compute_by_rows": rows_table(res, cd, 8, ceiling=max(1.0, cd))})
    cm = cost_model_for(arch_from_config(pr.llama_config(6, *pr.CROSSOVER_MODEL), "t"), chip, precision="fp32",
                        kv="fp32", efficiency=truth)
    for b in (1, 4, 8, 16, 32):
        t = cm.step(StepShape.from_lists(decode_ctx=[pr.CROSSOVER_CTX] * b)).time_s + 60e-6
        res.fused_step_s[b], res.torch_step_s[b] = (t, 2 * t) if b <= 8 else (2 * t, t)
    res.prefill_s = {t: (1e9, cm.step(StepShape.from_lists(prefill=[(t, 0)])).time_s + 60e-6)
                     for t in pr.PREFILL_LENGTHS}
    return res


def test_compute_fraction_is_fitted_over_every_prefill_length(hand_made_probe_result) -> None:
    """Prefill steps at 128 / 512 / 2048 tokens made by the cost model at compute fraction 0.8 (with the decode
    steps of the same chip): the fit finds 0.8 (and the memory fraction) and prices each prefill step as
    made; the fitted fraction's provenance lists every length."""
    from jalapeno.calibration.probe_fit import fit_small_m, fitted_chip_dict
    from jalapeno.hardware.schema import ChipSpec

    res = _hand_made_probe(hand_made_probe_result, 0.8)
    fit = fit_small_m(res, ChipSpec.model_validate(pr.chip_dict(res, "local", "hand-made")), 8)
    assert fit is not None and fit.compute_default == pytest.approx(0.8, abs=2e-3) and fit.peak_scale == 1.0
    assert fit.memory_default == pytest.approx(0.6, abs=2e-3) and fit.overlap == 0.0
    assert sorted(fit.prefill_s) == [128, 512, 2048]
    assert all(abs(q / m - 1) < 2e-3 for m, q in fit.prefill_s.values())
    eff = ChipSpec.model_validate(fitted_chip_dict(res, "local", "hand-made")).efficiency
    assert "128: " in eff.fitted["compute_default"].note and "2048: " in eff.fitted["compute_default"].note


def test_prefill_steps_faster_than_the_matmul_peak_raise_the_peak_not_cap_the_fraction(hand_made_probe_result) -> None:
    """The TTFT swing between quiet probes: a 512xKxK matmul "peak" measured below what the probe's real prefill
    steps reached capped compute_default at 1, and TTFT was priced at the low peak. Steps made at fraction 1.3 of
    the recorded peak: the fit writes compute_default 1 and the fp32 peak x 1.3 (status fitted), and prices the
    prefill steps as made."""
    from jalapeno.calibration.probe_fit import fit_small_m, fitted_chip_dict
    from jalapeno.hardware.schema import ChipSpec

    res = _hand_made_probe(hand_made_probe_result, 1.3)
    fit = fit_small_m(res, ChipSpec.model_validate(pr.chip_dict(res, "local", "hand-made")), 8)
    assert fit is not None and fit.compute_default == 1.0 and fit.peak_scale == pytest.approx(1.3, abs=3e-3)
    assert all(abs(q / m - 1) < 2e-3 for m, q in fit.prefill_s.values())
    chip = ChipSpec.model_validate(fitted_chip_dict(res, "local", "hand-made"))
    assert chip.compute_tflops["fp32"].value == pytest.approx(0.1 * fit.peak_scale, rel=1e-3)
    assert chip.compute_tflops["fp32"].status == "fitted" and chip.efficiency.compute_default == 1.0
    # the fused kernel's rows (up to the crossover, 8) stay at the microbenchmark's rate: 1 / 1.3 of the raised peak
    assert chip.efficiency.compute_by_rows[8] == pytest.approx(1 / fit.peak_scale, abs=1e-4)
    assert fit.memory_default == pytest.approx(0.6, abs=2e-3) and fit.overlap == 0.0


def test_probe_output_with_the_repeated_timings_loads_validates_and_refits(tmp_path: Path) -> None:
    """A probe carrying steps at five contexts and prefill at three lengths writes a chip YAML that loads, the
    samples beside it, and `jalapeno calibrate --probe` reads both back (the same fit as from the result itself);
    an older probe's two-context line still parses."""
    from jalapeno.calibration.probe_fit import fitted_chip_dict, probe_from_chip, refit_probe_file
    from jalapeno.hardware.schema import ChipSpec

    res = _quiet_probe()
    res.matmul_tflops["fp32"]["prefill-512"] = 0.1
    res.caches_kb = {}
    res.ctx_step_s = {1: {c: 7e-3 + 3e-6 * c for c in pr.LONG_CONTEXTS},
                      8: {c: 10e-3 + 25e-6 * c for c in pr.LONG_CONTEXTS}}
    res.prefill_s = {128: (5.9e9, 0.061), 512: (23.6e9, 0.231), 2048: (99.0e9, 1.02)}
    res.samples = {"prefill 512": [0.25, 0.231, 0.24]}
    path = pr.write_chip(res, tmp_path / "raw", "local", "hand-made")
    spec = load_spec_file(path)
    assert any(n.startswith("prefill step ms (GFLOP) by tokens: 128: 61.00/5.9000") for n in spec.notes)
    assert json.loads((tmp_path / "raw" / "local.samples.json").read_text())["seconds"]["prefill 512"][1] == 0.231
    again = probe_from_chip(spec)
    assert again.prefill_s[2048] == pytest.approx((99.0e9, 1.02)) and again.prefill_step_s == pytest.approx(0.231)
    assert again.ctx_step_s[8][2305] == pytest.approx(res.ctx_step_s[8][2305], abs=1e-6)
    out, line = refit_probe_file(path, tmp_path / "fit", "test")
    eff = load_spec_file(out).efficiency
    direct = ChipSpec.model_validate(fitted_chip_dict(again, "local", "x")).efficiency
    assert eff.decode_attention_ns == pytest.approx(direct.decode_attention_ns) and eff.decode_attention_ns > 0
    assert "rms" in eff.fitted["decode_attention_ns"].note and "decode_attention_ns" in line
    old = spec.model_copy(update={"notes": [n for n in spec.notes if not n.startswith(("decode step ms at context",
                                                                                       "prefill step ms"))]
                                  + ["decode step ms at context 65/577 by batch: 1: 7.00/8.35, 8: 10.53/23.74"]})
    got = probe_from_chip(old).ctx_step_s
    assert sorted(got) == [1, 8] and got[8] == pytest.approx({65: 10.53e-3, 577: 23.74e-3})


def test_long_context_and_prefill_steps_are_timed_through_the_runner() -> None:
    """The real measurements on a tiny random Llama: a step at every context and batch, every sample kept; a
    prefill length the cache cannot hold is skipped with a note, not a crash."""
    pytest.importorskip("torch")
    import torch

    from jalapeno.backends.torch.runner import ModelRunner

    loaded = pr.random_llama(1, 64, 96, 128, "cpu")
    res = pr.ProbeResult("cpu", "hand-made", 16.0)
    pr.measure_long_context(res, loaded, False, 0.0)
    assert sorted(res.ctx_step_s) == list(pr.LONG_BATCHES)
    assert all(sorted(by) == list(pr.LONG_CONTEXTS) and min(by.values()) > 0 for by in res.ctx_step_s.values())
    assert len(res.samples[f"decode b8 ctx{pr.LONG_CONTEXTS[-1]}"]) == pr.LONG_ROUNDS[0]
    runner = ModelRunner(loaded.model, 40, 16, "cpu", torch.float32)
    pr.measure_prefill(res, runner, loaded, 1, 0.0)
    assert sorted(res.prefill_s) == [128, 512] and res.prefill_step_s == res.prefill_s[512][1]
    assert any("[2048] tokens do not fit" in n for n in res.notes)


def test_refit_of_the_quiet_0551_probe_prices_prefill_at_what_its_step_reached() -> None:
    """The lead's quiet 05:51 probe (its microbenchmark read 0.0771 TFLOPS, its 512-token prefill step 23.6 GFLOP
    in 228.7 ms, 0.103 TFLOPS, so the old fit capped compute_default at 1 and priced TTFT at 0.0771): refitted, the
    peak is raised to what the step reached (the cost model's price of that step = its time), the decode steps by
    batch 1-32 within 12 % (the kernel's rate by rows, compute and memory adding) and the attention term is the old two-point one."""
    from jalapeno.calibration.probe_fit import fitted_chip_dict, probe_from_chip
    from jalapeno.hardware.schema import ChipSpec

    res = probe_from_chip(load_spec_file(ROOT / "benchmarks" / "data" / "local_probe_quiet_0551.yaml"))
    chip = ChipSpec.model_validate(fitted_chip_dict(res, "local", "refit"))
    assert chip.compute_tflops["fp32"].status == "fitted" and chip.efficiency.compute_default == 1.0
    assert 0.103 < chip.compute_tflops["fp32"].value < 0.12
    assert "512: 228.5/228.5" in chip.efficiency.fitted["compute_default"].note
    assert "(worst 11." in chip.efficiency.fitted["compute_memory_overlap"].note
    assert chip.efficiency.compute_memory_overlap == 0.0
    assert chip.efficiency.decode_attention_ns == pytest.approx(41.6, abs=0.5)
