"""``jalapeno hardware probe``: measured chips that load and validate, and execution choices that follow the
measurements they are given."""

from __future__ import annotations

from pathlib import Path

import pytest

from jalapeno.errors import ConfigError
from jalapeno.hardware import probe as pr
from jalapeno.hardware.catalog import iter_facts, load_catalog, load_spec_file


def _small_probe(monkeypatch: pytest.MonkeyPatch) -> pr.ProbeResult:
    """Real measurements at tiny sizes (no engine runs): bandwidth on 4 MiB, the quick matmul shapes."""
    monkeypatch.setattr(pr, "matmul_shapes", lambda quick: {"decode-1": (1, 64, 256), "prefill-512": (32, 64, 64)})
    res = pr.ProbeResult("cpu", "test cpu", 1.0, caches_kb=pr.read_caches())
    pr.measure_bandwidth(res, 4, 0.01)
    pr.measure_matmul(res, True, 0.01)
    return res


def test_probe_writes_a_chip_that_loads_and_validates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = _small_probe(monkeypatch)
    res.step_overhead_us, res.layer_overhead_us = 900.0, 40.0
    res.fused_step_s, res.torch_step_s = {1: 0.01, 8: 0.02}, {1: 0.03, 8: 0.01}
    path = pr.write_chip(res, tmp_path, "local", "jalapeno hardware probe --quick")
    spec = load_spec_file(path)
    assert spec.key == "local" and spec.status == "measured"
    statuses = {f.status for _, f in iter_facts(spec)}
    assert statuses <= {"measured", "unknown"}
    measured = [f for _, f in iter_facts(spec) if f.status == "measured"]
    assert all("jalapeno hardware probe" in f.source or "/sys" in f.source for f in measured)
    # the main memory's bandwidth is the best read measured, in TB/s
    assert spec.main_memory is not None
    assert spec.main_memory.bandwidth_tbps.value == pytest.approx(max(res.read_gbps.values()) / 1e3, rel=1e-3)
    assert spec.efficiency.step_overhead_us == 900.0 and spec.efficiency.layer_overhead_us == 40.0
    choices = pr.measured_execution(spec)
    assert choices is not None and choices.fused_max_batch == 1
    # the catalogue finds it through --hardware-dir and resolves 'local'
    assert load_catalog([tmp_path]).resolve("local").key == "local"


def test_too_little_memory_shrinks_the_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pr, "_available_bytes", lambda device: 12 << 20)  # 12 MiB free -> 2 MiB buffers
    res = pr.ProbeResult("cpu", "test cpu", 1.0)
    pr.measure_bandwidth(res, 512, 0.01)
    assert res.read_gbps and all(v > 0 for v in res.read_gbps.values())
    assert any("do not fit the free memory; used 2 MiB" in n for n in res.notes)


def test_unknown_device_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="unknown device 'tpu'"):
        pr.run_probe("tpu", quick=True)


@pytest.mark.parametrize(
    ("fused", "torch_", "cap"),
    [
        ({1: 1.0, 8: 2.0, 32: 5.0}, {1: 3.0, 8: 4.0, 32: 4.0}, 8),  # loses at 32: the crossover is 8
        ({1: 1.0, 8: 2.0, 32: 3.0}, {1: 3.0, 8: 4.0, 32: 4.0}, 32),  # wins everywhere measured
        ({1: 4.0, 8: 5.0}, {1: 3.0, 8: 4.0}, 0),  # never wins: off
        ({1: 1.0, 4: 9.0, 16: 2.0, 64: 2.0}, {1: 3.0, 4: 4.0, 16: 4.0, 64: 1.0}, 16),  # a noisy loss at 4
        ({1: 1.0, 8: 1.0, 12: 1.0}, {1: 2.0, 8: 2.0}, 8),  # 12 measured on one path only: ignored
    ],
)
def test_crossover_follows_the_measurements(fused: dict, torch_: dict, cap: int) -> None:
    assert pr.choose_fused_max_batch(fused, torch_) == cap


@pytest.mark.parametrize(
    ("panels", "dot", "first"),
    [
        ({1: 3.0, 4: 2.0, 8: 1.0, 16: 1.0}, {1: 1.0, 4: 1.5, 8: 1.5, 16: 2.0}, 8),  # panels win from 8 on
        ({1: 3.0, 4: 1.0, 8: 2.0, 16: 1.0}, {1: 1.0, 4: 1.5, 8: 1.5, 16: 2.0}, 16),  # a loss at 8: from 16
        ({1: 3.0, 16: 3.0}, {1: 1.0, 16: 2.0}, 17),  # never: past every measured batch
        ({1: 1.0}, {2: 1.0}, None),  # nothing measured both ways
    ],
)
def test_panel_threshold_follows_the_measurements(panels: dict, dot: dict, first: int | None) -> None:
    assert pr.choose_panel_min_rows(panels, dot) == first


def test_crossover_needs_common_batches() -> None:
    with pytest.raises(ConfigError, match="both decode paths"):
        pr.choose_fused_max_batch({1: 1.0}, {2: 1.0})


def test_threads_follow_the_bandwidth_curve() -> None:
    assert pr.choose_threads({1: 10.0, 2: 19.0, 4: 30.0, 8: 30.5}) == 4  # saturates at 4
    assert pr.choose_threads({1: 10.0, 2: 9.0}) == 1  # a second thread does not help (shared machine)
    assert pr.choose_threads({1: 10.0, 2: 20.0}) == 2


def test_cli_unknown_device_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from jalapeno.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["hardware", "probe", "--device", "tpu", "--quick", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown device 'tpu'" in err and "Traceback" not in err


def _hand_made_local(root: Path) -> Path:
    """A hand-made probed chip (round numbers of a small 2-core machine) in ``root/hardware/local.yaml``."""
    res = pr.ProbeResult("cpu", "hand-made", 16.0, read_gbps={1: 20.0, 2: 30.0}, copy_gbps={1: 15.0, 2: 25.0},
                         matmul_tflops={"fp32": {"prefill-512": 0.1}, "bf16": {"prefill-512": 0.05}})
    res.step_overhead_us, res.layer_overhead_us = 1000.0, 50.0
    return pr.write_chip(res, root / "hardware", "local", "hand-made for tests")


def test_simulate_hardware_local_resolves_the_probed_chip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from jalapeno.cli import main
    from jalapeno.hardware import get_chip

    monkeypatch.setenv("JALAPENO_CACHE", str(tmp_path))
    _hand_made_local(tmp_path)
    assert get_chip("local").name == "local hand-made"
    try:
        main(["simulate", "-m", "smollm2-135m", "-H", "local", "--isl", "64", "--osl", "8", "--concurrency", "2",
              "--num-prompts", "2", "--json"])
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr().err
    assert "local" in capsys.readouterr().out


def test_a_local_chip_on_the_hardware_path_overrides_the_probed_one(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/hardware.md: a ``local.yaml`` in ``JALAPENO_HARDWARE_PATH`` overrides the probe directory's."""
    from jalapeno.hardware import get_chip

    monkeypatch.setenv("JALAPENO_CACHE", str(tmp_path / "cache"))
    _hand_made_local(tmp_path / "cache")
    other = tmp_path / "other"
    res = pr.ProbeResult("cpu", "other machine", 8.0, read_gbps={1: 10.0}, matmul_tflops={"fp32": {"prefill-512": 0.2}})
    pr.write_chip(res, other, "local", "hand-made for tests")
    assert get_chip("local").name == "local hand-made"
    monkeypatch.setenv("JALAPENO_HARDWARE_PATH", str(other))
    assert get_chip("local").name == "local other machine"


def test_hardware_local_without_a_probe_says_how_to_get_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from jalapeno.cli import main

    monkeypatch.setenv("JALAPENO_CACHE", str(tmp_path))
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "-m", "smollm2-135m", "-H", "local", "--isl", "64", "--osl", "8", "--concurrency", "1"])
    assert exc.value.code == 2
    assert "run `jalapeno hardware probe`" in capsys.readouterr().err


def test_memory_fraction_is_what_a_batch1_decode_step_achieved(tmp_path: Path) -> None:
    """memory_default = weight bytes / (step - layers x layer overhead) / best read bandwidth (hand count), written
    into the chip YAML; no measured step keeps the fraction at 1; a step faster than the bandwidth caps it at 1."""
    from jalapeno.hardware.catalog import load_catalog

    res = pr.ProbeResult("cpu", "hand-made", 16.0, read_gbps={1: 10.0, 2: 20.0}, copy_gbps={1: 9.0, 2: 18.0},
                         matmul_tflops={"fp32": {"prefill-512": 0.1}})
    res.step_overhead_us, res.layer_overhead_us = 300.0, 50.0
    assert pr.decode_memory_efficiency(res) is None
    res.fused_step_s, res.torch_step_s = {1: 0.0103}, {1: 0.02}
    res.decode_bytes, res.decode_layers = 120e6, 6
    # 120 MB in 10.3 ms - 6 x 50 us = 10.0 ms -> 12 GB/s of the best 20 GB/s read = 0.6
    assert pr.decode_memory_efficiency(res) == pytest.approx(0.6)
    path = pr.write_chip(res, tmp_path, "local", "hand-made for tests")
    chip = load_catalog([tmp_path]).resolve("local")
    assert chip.efficiency.memory_default == pytest.approx(0.6)
    res.fused_step_s = {1: 0.0011}  # faster than the read bandwidth allows: capped at 1
    assert pr.decode_memory_efficiency(res) == 1.0
    assert path.is_file()


def test_compute_fraction_is_what_a_prefill_step_achieved() -> None:
    """compute_default = prefill FLOPs (hand count) / (step - layers x layer overhead) / fp32 matmul peak."""
    # 2 layers, hidden 64, vocab 100, 8 tokens, 50,000 weights of which 6,400 are the (tied) embedding:
    # 2*8*(50,000-6,400) + 4*64*2*8*9/2 + 2*64*100 = 697,600 + 18,432 + 12,800
    assert pr.prefill_flops(50_000, 6_400, 2, 64, 100, 8) == 697_600 + 18_432 + 12_800
    res = pr.ProbeResult("cpu", "hand-made", 16.0, read_gbps={2: 20.0}, matmul_tflops={"fp32": {"prefill-512": 0.1}})
    res.layer_overhead_us, res.decode_layers = 100.0, 6
    assert pr.prefill_compute_efficiency(res) is None
    res.prefill_flops, res.prefill_step_s = 14e9, 0.2006  # 14 GFLOP in 200 ms (after 0.6 ms of layer overhead)
    assert pr.prefill_compute_efficiency(res) == pytest.approx(0.7)
    chip = pr.chip_dict(res, "local", "hand-made")
    assert chip["efficiency"]["compute_default"] == pytest.approx(0.7)


def test_prefill_step_is_measured_through_the_runner() -> None:
    """The probe's prefill step runs the real runner on a random Llama and counts its FLOPs from the model."""
    pytest.importorskip("torch")
    import torch

    from jalapeno.backends.torch.runner import ModelRunner

    loaded = pr.random_llama(1, 64, 96, 128, "cpu")
    runner = ModelRunner(loaded.model, 40, 16, "cpu", torch.float32)
    res = pr.ProbeResult("cpu", "hand-made", 16.0)
    pr.measure_prefill(res, runner, loaded, 1, 0.01)
    params = sum(p.numel() for p in loaded.model.parameters())
    t = pr.PREFILL_TOKENS
    assert res.prefill_flops == pr.prefill_flops(params, 64 * 128, 1, 64, 128, t)
    assert res.prefill_step_s is not None and res.prefill_step_s > 0


def test_rows_table_follows_the_path_the_engine_takes() -> None:
    """Up to the fused crossover the kernel's GEMMs at compute_default; above it PyTorch's, scaled so the largest
    row count meets compute_default: 0.05 / 0.1 TFLOPS at 32 / 512 rows with fraction 0.8 -> 0.4 / 0.8; one row past
    the crossover PyTorch's rate at the crossover (0.03 measured at 8 -> 0.24; at 128, log2-linear between 32 and
    512: 0.075 -> 0.6; seventeenth session)."""
    from jalapeno.calibration.probe_fit import rows_table

    res = pr.ProbeResult("cpu", "hand-made", 16.0, rows_tflops={1: 0.01, 8: 0.03, 32: 0.05, 512: 0.1})
    assert rows_table(res, 0.8, 8) == {1: 0.8, 4: 0.8, 8: 0.8, 9: 0.24, 32: 0.4, 512: 0.8}
    assert rows_table(res, 0.8, 128) == {**{m: 0.8 for m in pr.ROWS_TABLE}, 129: 0.6}
    assert rows_table(pr.ProbeResult("cpu", "hand-made", 16.0, rows_tflops={512: 0.1}), 0.8, 8) is None


def test_rows_are_measured_at_every_table_size() -> None:
    pytest.importorskip("torch")
    res = pr.ProbeResult("cpu", "hand-made", 16.0)
    pr.measure_matmul_rows(res, 0.01)
    assert sorted(res.rows_tflops) == list(pr.ROWS_TABLE) and all(v > 0 for v in res.rows_tflops.values())


def test_the_fit_recovers_the_memory_fraction_and_the_kernels_rate_by_rows(tmp_path: Path,
                                                                          hand_made_probe_result) -> None:
    """Decode steps by batch made by the cost model with memory fraction 0.6, compute and memory adding, and the
    fused kernel's GEMMs at their own rate by rows (1 row at compute_default 1, 4 rows 0.3, 8 rows 0.5: dot tiles
    slower than the matrix-vector pass, as on the twenty-first session's VM), plus 6 layers x 10 us of overhead (the
    probe's steps carry it): the fit finds 0.6 and each rate again, writes them with PyTorch's rows above the
    crossover (8) into a chip mapping that validates and prices every step back; the probe alone (hardware, below
    the cost model) does not fit them."""
    from jalapeno.hardware.schema import ChipSpec
    from jalapeno.calibration.probe_fit import rows_table
    from jalapeno.models.hf_config import arch_from_config
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.factory import cost_model_for

    res = hand_made_probe_result()
    chip = ChipSpec.model_validate(pr.chip_dict(res, "local", "hand-made"))
    kernel = {1: 1.0, 4: 0.3, 8: 0.5}
    table = {**kernel, **{m: v for m, v in rows_table(res, 1.0, 8).items() if m > 8}}
    truth = chip.efficiency.model_copy(update={"memory_default": 0.6, "compute_memory_overlap": 0.0,
                                               "compute_by_rows": table, "layer_overhead_us": 0.0})
    cm = cost_model_for(arch_from_config(pr.llama_config(6, *pr.CROSSOVER_MODEL), "t"), chip, precision="fp32",
                        kv="fp32", efficiency=truth)
    for b in (1, 4, 8, 16, 32):  # the engine's path: the fused kernel up to batch 8, PyTorch above (2x faster there)
        t = cm.step(StepShape.from_lists(decode_ctx=[pr.CROSSOVER_CTX] * b)).time_s + 60e-6
        res.fused_step_s[b], res.torch_step_s[b] = (t, 2 * t) if b <= 8 else (2 * t, t)
    from jalapeno.calibration.probe_fit import fitted_chip_dict

    eff = ChipSpec.model_validate(fitted_chip_dict(res, "local", "hand-made for tests")).efficiency
    assert eff.memory_default == pytest.approx(0.6, abs=1e-4)
    assert eff.compute_memory_overlap == 0.0
    assert eff.compute_by_rows == pytest.approx({1: 1.0, 4: 0.3, 8: 0.5, 9: 0.3, 32: 0.5, 512: 1.0}, abs=1e-4)
    assert eff.fitted["compute_memory_overlap"].status == "inferred"
    assert "(worst 0.0%)" in eff.fitted["compute_memory_overlap"].note
    plain = load_spec_file(pr.write_chip(res, tmp_path, "local", "hand-made for tests")).efficiency
    assert plain.compute_by_rows is None and plain.compute_memory_overlap is None


def test_refit_of_the_quiet_probe_prices_its_decode_steps_by_batch() -> None:
    """The lead's quiet probe (2026-12-01 23:34 UTC, before the small-M terms; tests/hardware/data): refitted from
    its recorded steps, every decode batch 1-32 on the engine's path (dot tiles at 1-4 rows, panels from 8: 7.47 ->
    21.68 ms) is priced within 13 % (each batch's kernel rate is measured on its step, up to the matmul peak), where
    the roofline max prices batch 16 at about batch 1's time (the miss that motivated the terms: 1.7x)."""
    from jalapeno.hardware.schema import ChipSpec
    from jalapeno.calibration.probe_fit import engine_decode_steps, fit_small_m, probe_from_chip

    old = load_spec_file(Path(__file__).parent / "data" / "local_probe_quiet_2334.yaml")
    res = probe_from_chip(old)
    steps = engine_decode_steps(res, 128)
    assert steps[1] == pytest.approx(7.56e-3) and steps[16] == pytest.approx(15.60e-3)
    fit = fit_small_m(res, ChipSpec.model_validate(pr.chip_dict(res, "local", "refit")), 128)
    # its steps at 4-16 rows ran faster than their weight stream plus their GEMMs at the matmul peak: the kernel's
    # rate stops at the peak there (1 / peak_scale of the raised peak) and those batches are priced up to 12.6 % slow
    assert fit is not None and fit.overlap == 0.0 and fit.worst_error < 0.13
    assert fit.compute_by_rows[8] == pytest.approx(1 / fit.peak_scale, abs=1e-4)
    assert fit.priced_s[16] / fit.priced_s[1] > 1.6  # measured 15.51 / 7.47 = 2.08 (less the layers' overhead)


def test_calibrate_probe_writes_the_refitted_chip_and_bad_files_are_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`jalapeno calibrate --probe` (the CLI of the second step): the quiet probe's chip comes back with the small-M
    terms the fit finds (the same as calling it directly) and loads; a missing file or a catalogue chip (no probe
    measurements in its notes) is one line, exit 2."""
    from jalapeno.calibration.probe_fit import fit_small_m, probe_from_chip
    from jalapeno.cli import main
    from jalapeno.hardware.schema import ChipSpec

    src = Path(__file__).parent / "data" / "local_probe_quiet_2334.yaml"
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--probe", str(src), "--out", str(tmp_path)])
    assert exc.value.code in (0, None)
    eff = load_spec_file(tmp_path / "local.yaml").efficiency
    res = probe_from_chip(load_spec_file(src))
    fit = fit_small_m(res, ChipSpec.model_validate(pr.chip_dict(res, "local", "refit")), 128)
    assert eff.compute_memory_overlap == pytest.approx(fit.overlap) and eff.compute_by_rows
    capsys.readouterr()
    for bad in (tmp_path / "missing.yaml", Path(pr.__file__).parent / "chips" / "h100.yaml"):
        with pytest.raises(SystemExit) as exc:
            main(["calibrate", "--probe", str(bad), "--out", str(tmp_path / "x")])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_decode_attention_term_is_what_the_long_context_steps_took_beyond_their_price() -> None:
    """The quiet probe refitted, given decode steps at every LONG_CONTEXTS length whose time is the chip's own
    price plus a per-batch constant plus a known 60 ns per (query head, key, layer) (6 layers x 9 heads x ctx x b
    pairs): the least-squares fit recovers 60 ns exactly (rms 0); a probe without steps at two contexts fits no
    term; the notes line round-trips through ``probe_from_chip``."""
    from jalapeno.calibration.probe_fit import fit_decode_attention, fitted_chip_dict, probe_from_chip
    from jalapeno.hardware.schema import ChipSpec
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.factory import cost_model_for

    res = probe_from_chip(load_spec_file(Path(__file__).parent / "data" / "local_probe_quiet_2334.yaml"))
    chip = ChipSpec.model_validate(fitted_chip_dict(res, "local", "refit"))
    assert chip.efficiency.decode_attention_ns == 0.0 and fit_decode_attention(res, chip) is None
    arch = pr.llama_config(6, *pr.CROSSOVER_MODEL)
    from jalapeno.models.hf_config import arch_from_config

    zero = {k: 0.0 for k in ("step_overhead_us", "layer_overhead_us", "seq_overhead_us")}
    cm = cost_model_for(arch_from_config(arch, "x"), chip, precision="fp32", kv="fp32",
                        efficiency=chip.efficiency.model_copy(update=zero))
    for b in pr.LONG_BATCHES:
        res.ctx_step_s[b] = {c: cm.step(StepShape.from_lists(decode_ctx=[c] * b)).time_s + 1e-3 * b
                             + 60e-9 * 6 * 9 * c * b for c in pr.LONG_CONTEXTS}
    fit = fit_decode_attention(res, chip)
    assert fit is not None and fit.ns == pytest.approx(60.0, abs=0.01) and fit.rms_error < 1e-6
    notes = pr._measurement_notes(res)
    assert any(n.startswith("decode step ms at context 65/129/577/1153/2305 by batch: 1: ") for n in notes)
    again = probe_from_chip(chip.model_copy(update={"notes": [*chip.notes, *notes]}))
    assert again.ctx_step_s[8] == pytest.approx(res.ctx_step_s[8], abs=1e-6)
    written = ChipSpec.model_validate(fitted_chip_dict(res, "local", "refit"))
    assert written.efficiency.decode_attention_ns == pytest.approx(60.0, abs=0.5)
    assert "least squares" in written.efficiency.fitted["decode_attention_ns"].note


def test_calibrate_probe_keeps_the_measured_thread_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The refit redoes the small-M terms from the notes, not the thread-policy measurement (its timings live in
    the fact's note): `jalapeno calibrate --probe` must carry it over, or the entry points silently fall back to
    the default policy after the second step of the documented probe -> calibrate pipeline."""
    import yaml

    from jalapeno.cli import main

    data = yaml.safe_load((Path(__file__).parent / "data" / "local_probe_quiet_2334.yaml").read_text())
    policy = {"wait": "ACTIVE", "pinned": True, "status": "measured", "source": "probe (test)",
              "note": "decode/prefill ms: passive-unpinned 9.00/300.0, active-pinned 7.00/250.0"}
    data["execution"]["thread_policy"] = policy
    src = tmp_path / "probe" / "local.yaml"
    src.parent.mkdir()
    src.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--probe", str(src), "--out", str(tmp_path / "out")])
    assert exc.value.code in (0, None), capsys.readouterr().err
    got = load_spec_file(tmp_path / "out" / "local.yaml").execution.thread_policy
    assert got is not None and (got.wait, got.pinned, got.note) == ("ACTIVE", True, policy["note"])
