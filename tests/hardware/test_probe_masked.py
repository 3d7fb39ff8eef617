"""The probe's prefill chunks on the PyTorch attention path (issue 16, eleventh session): the term fitted from
hand-made steps with a known cost per rectangle pair, its notes line round-tripping through ``jalapeno calibrate
--probe``, the chip with the term loading and validating, and the real measurement on a one-layer model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from jalapeno.hardware import probe as pr
from jalapeno.hardware.catalog import load_spec_file

QUIET = Path(__file__).parent.parent.parent / "benchmarks" / "data" / "local_probe_quiet_1113.yaml"


def _hand_made(res, chip, ns: float, level: float = 1.0) -> None:
    """Masked steps that take ``level`` x the chip's price (overheads and the term at 0) plus ``ns`` per (query head,
    query, key, layer) of their rectangle, and the fresh prompts ``level`` x their price, each plus the layers'
    overhead the probe's figures carry."""
    from jalapeno.calibration.probe_fit import _unpriced_model
    from jalapeno.models.hf_config import arch_from_config
    from jalapeno.perf.model import masked_prefill_pairs
    from jalapeno.perf.shape import StepShape

    cm = _unpriced_model(arch_from_config(pr.llama_config(6, *pr.CROSSOVER_MODEL), "x"), chip)
    fixed = 6 * (res.layer_overhead_us or 0.0) * 1e-6
    res.prefill_s = {t: (f, level * cm.step(StepShape.from_lists(prefill=[(t, 0)])).time_s + fixed)
                     for t, (f, _) in res.prefill_s.items()}
    res.masked_prefill_s = {}
    for c, p, d in pr.MASKED_STEPS:
        shape = StepShape.from_lists(prefill=[(c, p)], decode_ctx=[c + 1] * d)
        res.masked_prefill_s[(c, p, d)] = (level * cm.step(shape).time_s + ns * 1e-9 * 6 * 9
                                           * masked_prefill_pairs(shape) + fixed)


@pytest.mark.parametrize("ns, level", [(40.0, 1.0), (25.0, 1.2), (0.0, 0.9)])
def test_the_fit_recovers_a_known_cost_per_rectangle_pair(ns: float, level: float) -> None:
    """Whatever the level the fresh prompts put the prices at (the compute fraction's residual), the fit returns
    the per-pair cost the steps were made with, and prices them exactly with it."""
    from jalapeno.calibration.probe_fit import fit_masked_prefill, probe_from_chip
    from jalapeno.hardware.schema import ChipSpec

    chip = load_spec_file(QUIET)
    res = probe_from_chip(chip)
    _hand_made(res, ChipSpec.model_validate(chip.model_dump()), ns, level)
    fit = fit_masked_prefill(res, chip)
    assert fit is not None and fit.ns == pytest.approx(ns, abs=1e-3)
    assert fit.worst_error < 1e-6
    assert set(fit.points) == set(pr.MASKED_STEPS)


def test_no_masked_steps_no_fit() -> None:
    from jalapeno.calibration.probe_fit import fit_masked_prefill, probe_from_chip

    res = probe_from_chip(load_spec_file(QUIET))
    assert res.masked_prefill_s == {}  # the 11:13 probe predates them
    assert fit_masked_prefill(res, load_spec_file(QUIET)) is None


def test_calibrate_probe_writes_the_term_and_the_chip_loads(tmp_path: Path) -> None:
    """The probe's notes line -> ``probe_from_chip`` -> the refit chip: the term and its provenance are in the
    efficiency block, and the written YAML loads and validates (the simulator can use it)."""
    from jalapeno.calibration.probe_fit import probe_from_chip, refit_probe_file
    from jalapeno.hardware.schema import ChipSpec

    chip = load_spec_file(QUIET)
    res = probe_from_chip(chip)
    _hand_made(res, ChipSpec.model_validate(chip.model_dump()), 30.0)
    line = next(n for n in pr._measurement_notes(res) if n.startswith("masked prefill step ms"))
    assert line.startswith("masked prefill step ms by chunk/prefix/decode rows: 512/1536/1: ")
    data = yaml.safe_load(QUIET.read_text())
    data["notes"] = [n for n in data["notes"] if not n.startswith("prefill step ms")] + [
        next(n for n in pr._measurement_notes(res) if n.startswith("prefill step ms")), line]
    src = tmp_path / "in" / "local.yaml"
    src.parent.mkdir()
    src.write_text(yaml.safe_dump(data, sort_keys=False))
    assert probe_from_chip(load_spec_file(src)).masked_prefill_s == pytest.approx(res.masked_prefill_s, rel=1e-4)
    path, _ = refit_probe_file(src, tmp_path / "out", "jalapeno calibrate --probe")
    got = load_spec_file(path).efficiency
    assert got.masked_prefill_attention_ns == pytest.approx(30.0, rel=0.02)  # the notes keep 2 decimals of ms
    assert "chunk/prefix/decode rows: 512/1536/1" in got.fitted["masked_prefill_attention_ns"].note


def test_the_probe_steps_run_through_the_runner_down_the_engine_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real measurement on a one-layer model: a later chunk, alone or beside a decode row, runs the C kernel with
    a key offset over its gathered context (``later_chunk_attention``; where no compiler is, the masked path); a
    fresh prompt beside a decode row (the former first masked step) takes the flash path on its own K/V; decode
    rows take the reference path. Each returns one row of logits per sampled sequence."""
    from jalapeno.backends.torch import attention as att
    from jalapeno.backends.torch.runner import ModelRunner

    loaded = pr.random_llama(1, 64, 128, 256, "cpu")
    runner = ModelRunner(loaded.model, 64, 16, "cpu", torch.float32)  # 129-161 tokens: above the fused kernel
    ref_q, fresh, later = [], [], []
    real_ref, real_fresh, real_later = att.paged_attention_ref, att.fresh_prefill_attention, att.later_chunk_attention
    monkeypatch.setattr(att, "paged_attention_ref", lambda q, *a, **k: ref_q.append(q.shape[0]) or real_ref(q, *a, **k))
    monkeypatch.setattr(att, "fresh_prefill_attention", lambda q, *a, **k: fresh.append(q.shape[0])
                        or real_fresh(q, *a, **k))
    monkeypatch.setattr(att, "later_chunk_attention", lambda q, *a, **k: later.append(q.shape[0])
                        or real_later(q, *a, **k))
    kernel = real_later(torch.zeros(2, 4, 16), torch.zeros(2, 4, 1, 16), torch.zeros(2, 4, 1, 16),
                        att.StepMetadata.build([att.SeqSlice(1, 2, [0])], 4, torch.device("cpu")), 0.25) is not None
    for (c, p, d), kind in (((160, 160, 0), "later"), ((128, 32, 1), "later"), ((128, 0, 1), "fresh")):
        ref_q.clear(), fresh.clear(), later.clear()
        out = pr.masked_step(runner, c, p, d)()
        assert out.shape == (d + 1, 256)
        assert fresh == ([c] if kind == "fresh" else []) and later == ([c] if kind == "later" else [])
        masked = kind == "later" and not kernel
        assert sorted(ref_q) == sorted(([c] if masked else []) + [1] * d)


def test_the_masked_steps_are_later_chunks_and_an_old_fresh_step_is_left_out() -> None:
    """Every probe step prices a rectangle (a chunk after cached tokens); an older probe's 2048-token prompt beside a
    decode row (now the flash path) is left out of the fit, which still recovers the per-pair cost."""
    from jalapeno.calibration.probe_fit import fit_masked_prefill, probe_from_chip
    from jalapeno.hardware.schema import ChipSpec
    from jalapeno.perf.model import masked_prefill_pairs
    from jalapeno.perf.shape import StepShape

    assert all(p > 0 and masked_prefill_pairs(StepShape.from_lists(prefill=[(c, p)], decode_ctx=[c + 1] * d))
               == c * (c + p) for c, p, d in pr.MASKED_STEPS)
    chip = load_spec_file(QUIET)
    res = probe_from_chip(chip)
    _hand_made(res, ChipSpec.model_validate(chip.model_dump()), 35.0)
    res.masked_prefill_s[(2048, 0, 1)] = 9.9  # measured on the old path: no rectangle now, so no information
    fit = fit_masked_prefill(res, chip)
    assert fit is not None and fit.ns == pytest.approx(35.0, abs=1e-3) and set(fit.points) == set(pr.MASKED_STEPS)
    res.masked_prefill_s = {(2048, 0, 1): 9.9}
    assert fit_masked_prefill(res, chip) is None


def _made_probe(kernel: dict[int, float], f: float, cd: float, cap: int, pa: float | None = None):
    """The quiet probe with its steps replaced by ones made from known terms: memory fraction ``f``, compute and
    memory adding, the fused kernel's GEMMs at ``kernel`` (rows -> fraction), PyTorch's above ``cap`` at ``cd``, the
    prefill attention at ``pa`` (None: at ``cd``), plus each model's layers' overhead: the crossover model's decode
    steps at ``kernel``'s batches and its prefills, the served model's decode steps at batch 1 and 8 (65 keys) and
    its 512-token prefill. Returns (chip, probe result, the rows table, the step maker)."""
    import numpy as np

    from jalapeno.calibration.probe_fit import _priced, probe_from_chip, rows_table
    from jalapeno.models.catalog import load_model
    from jalapeno.models.hf_config import arch_from_config
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.factory import cost_model_for

    chip = load_spec_file(QUIET)
    res = probe_from_chip(chip)
    res.dot_step_s = {}
    table = {**kernel, **{m: v for m, v in rows_table(res, cd, cap, ceiling=1.0).items() if m > cap}}
    eff = chip.efficiency.model_copy(update={
        "step_overhead_us": 0.0, "layer_overhead_us": 0.0, "seq_overhead_us": 0.0, "compute_default": cd,
        "memory_default": 1.0, "compute_by_rows": table, "compute_memory_overlap": None,
        "prefill_attention_compute": pa})

    def made(arch, shape, layers: int) -> float:
        tc, tm, _ = cost_model_for(arch, chip, precision="fp32", kv="fp32", efficiency=eff).op_times(shape)
        return float(_priced(tc, tm, np.array([f]), np.array([0.0]))[0]) + layers * res.layer_overhead_us * 1e-6

    cross = arch_from_config(pr.llama_config(6, *pr.CROSSOVER_MODEL), "x")
    served = load_model("smollm2-135m")
    res.fused_step_s = {b: made(cross, StepShape.from_lists(decode_ctx=[pr.CROSSOVER_CTX] * b), 6)
                        for b in sorted(kernel)}
    res.prefill_s = {t: (fl, made(cross, StepShape.from_lists(prefill=[(t, 0)]), 6))
                     for t, (fl, _) in res.prefill_s.items()}
    res.served_ctx_step_s = {b: {65: made(served, StepShape.from_lists(decode_ctx=[65] * b), 30)} for b in (1, 8)}
    res.served_prefill_s = {512: made(served, StepShape.from_lists(prefill=[(512, 0)]), 30)}
    return chip, res, table, made


def test_the_joint_fit_recovers_known_fractions_from_both_models_steps() -> None:
    """Decode steps by batch (the crossover model) and at the shortest context (the served model), and prefill steps
    of both, made from known terms (memory 0.7, compute 0.9, compute and memory adding, the fused kernel's GEMMs at
    0.9 for 1 row, 0.25 for 4, 0.4 for 8, 0.6 for 16 and 0.7 for 32: its own rate by rows) plus each model's layers'
    overhead: ``fit_small_m`` recovers every one, and prices every step of both models back; the 4-row rate from the
    served model's small-batch steps once the probe has them."""
    import numpy as np

    from jalapeno.calibration.probe_fit import fit_small_m
    from jalapeno.hardware.schema import ChipSpec
    from jalapeno.models.catalog import load_model
    from jalapeno.perf.model import rows_efficiency
    from jalapeno.perf.shape import StepShape

    f, cd, cap = 0.7, 0.9, 128
    kernel = {1: 0.9, 4: 0.25, 8: 0.4, 16: 0.6, 32: 0.7}
    chip, res, table, made = _made_probe(kernel, f, cd, cap)
    served = load_model("smollm2-135m")
    fit = fit_small_m(res, ChipSpec.model_validate(chip.model_dump()), cap)
    assert fit is not None
    assert fit.memory_default == pytest.approx(f, abs=1e-3) and fit.overlap == 0.0
    assert fit.compute_default == pytest.approx(cd, rel=0.01)
    # the served model's batches (1, 8) first, the crossover model's above them (16, 32); 4 rows interpolated
    assert {m: fit.compute_by_rows[m] for m in (1, 8, 16, 32)} == pytest.approx(
        {m: kernel[m] for m in (1, 8, 16, 32)}, rel=0.01)
    assert 4 not in fit.compute_by_rows
    assert set(fit.served_s) == {"decode b1 @65", "decode b8 @65", "prefill 512"}
    assert all(abs(q / m - 1) < 0.01 for m, q in fit.served_s.values())
    # interpolated in log2(rows) between 1 and 8, the 4-row rate would be 0.57: the served model's own small-batch
    # steps (the probe times them at the shortest context, twenty-second session) give the dot tiles' 0.25 instead
    assert rows_efficiency(fit.compute_by_rows, np.array([4.0]))[0] > 0.5
    res.served_small_step_s = {b: made(served, StepShape.from_lists(decode_ctx=[65] * b), 30) for b in (2, 4)}
    fit = fit_small_m(res, ChipSpec.model_validate(chip.model_dump()), cap)
    assert fit is not None and fit.memory_default == pytest.approx(f, abs=1e-3)
    two = float(rows_efficiency(table, np.array([2.0]))[0])  # what the made-up steps ran their 2 rows at
    assert {m: fit.compute_by_rows[m] for m in (1, 2, 4, 8, 16, 32)} == pytest.approx(
        {**{m: kernel[m] for m in (1, 4, 8, 16, 32)}, 2: two}, rel=0.01)
    assert set(fit.served_s) == {"decode b1 @65", "decode b2 @65", "decode b4 @65", "decode b8 @65", "prefill 512"}
    assert all(abs(q / m - 1) < 0.01 for m, q in fit.served_s.values())
    assert fit.prefill_attention == pytest.approx(cd, rel=0.01)  # the made-up prefills' attention ran at cd


def test_the_prefill_fit_tells_the_causal_attentions_rate_from_the_gemms() -> None:
    """Prefill steps of 128 / 512 / 2048 tokens (the crossover model) and 512 (the served model) made with the
    GEMMs at 0.9 of the peak and the causal attention pairs at 0.3 (a CPU's attention path, far below its GEMMs):
    the fit recovers both, where one fraction for every length would misprice the short and the long prompt in
    opposite directions; with one prefill length it cannot tell them apart and keeps one fraction."""
    from jalapeno.calibration.probe_fit import add_small_m, fit_small_m
    from jalapeno.hardware.schema import ChipSpec

    f, cd, pa, cap = 0.7, 0.9, 0.3, 128
    chip, res, _, _ = _made_probe({1: 0.9, 8: 0.4, 16: 0.6, 32: 0.7}, f, cd, cap, pa)
    assert sorted(res.prefill_s) == [128, 512, 2048]
    fit = fit_small_m(res, ChipSpec.model_validate(chip.model_dump()), cap)
    assert fit is not None
    assert fit.compute_default == pytest.approx(cd, rel=0.01)
    assert fit.prefill_attention == pytest.approx(pa, rel=0.02)
    assert all(abs(q / m - 1) < 0.01 for m, q in fit.prefill_s.values())
    assert all(abs(q / m - 1) < 0.01 for m, q in fit.served_s.values())
    out = chip.model_dump(mode="json")  # the chip as `jalapeno calibrate --probe` writes it
    add_small_m(out, res, cap, "test")
    written = ChipSpec.model_validate(out).efficiency
    assert written.prefill_attention_compute == pytest.approx(pa, rel=0.02)
    assert "causal attention pairs" in written.fitted["prefill_attention_compute"].note

    res.prefill_s = {512: res.prefill_s[512]}  # one length of each model: one fraction, the attention at it
    res.served_prefill_s = {}
    one = fit_small_m(res, ChipSpec.model_validate(chip.model_dump()), cap)
    assert one is not None and one.prefill_attention is None
    assert abs(one.prefill_s[512][1] / one.prefill_s[512][0] - 1) < 0.01  # that one step still priced right


def test_the_attention_fit_reports_each_batchs_own_slope() -> None:
    """Decode steps whose cost per (head, key, layer) is 20 ns at batch 1 and 8 and 40 ns at batch 16, in both
    models: each batch alone recovers its own slope, the shared one falls between (the residual says so), and the
    note carries them."""
    from jalapeno.calibration.probe_fit import (_unpriced_model, add_decode_attention, fit_decode_attention,
                                                probe_from_chip)
    from jalapeno.hardware.schema import ChipSpec
    from jalapeno.models.catalog import load_model
    from jalapeno.models.hf_config import arch_from_config
    from jalapeno.perf.shape import StepShape

    chip = load_spec_file(QUIET)
    res = probe_from_chip(chip)
    ns = {1: 20.0, 8: 20.0, 16: 40.0}

    def made(arch, layers: int) -> dict[int, dict[int, float]]:
        cm = _unpriced_model(arch, chip)
        return {b: {c: cm.step(StepShape.from_lists(decode_ctx=[c] * b)).time_s + 1e-3 * b
                    + ns[b] * 1e-9 * layers * 9 * c * b for c in pr.LONG_CONTEXTS} for b in pr.LONG_BATCHES}

    res.ctx_step_s = made(arch_from_config(pr.llama_config(6, *pr.CROSSOVER_MODEL), "x"), 6)
    res.served_ctx_step_s = made(load_model("smollm2-135m"), 30)
    fit = fit_decode_attention(res, chip)
    assert fit.by_batch == pytest.approx(ns, abs=0.01)
    assert 20.0 < fit.ns < 40.0 and fit.worst_error > 0.01
    out = chip.model_dump(mode="json")
    add_decode_attention(out, res, "test")
    assert "each batch alone: batch 1 20.0 ns, batch 8 20.0 ns, batch 16 40.0 ns" in \
        ChipSpec.model_validate(out).efficiency.fitted["decode_attention_ns"].note
