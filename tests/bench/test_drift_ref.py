"""The closed loop's drift reference (``benchmarks/sim_vs_engine.py --drift-ref``; issue 16, fourteenth session): the
ratio of the reference timed around a point to the probe's samples of the same steps (hand-computed), the chip
scaled by that ratio prices every step that many times longer (the unscaled cost model's own steps), a recorded
point's TPOT corrected by it, and bad input one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "sim_vs_engine.py"
DATA = ROOT / "benchmarks" / "data"
RESULT = DATA / "sim_vs_engine_isl512_quiet_1420.jsonl"
CHIP = DATA / "local_probe_quiet_1416.yaml"


def test_the_drift_ratio_is_the_geometric_mean_of_reference_over_probe(sve) -> None:
    """Step a: reference samples 1.5, 1.2 (before), 1.8 (after): median 1.5 over the probe's min 1.0 = 1.5; step b:
    3.0 / 2.6, 2.2: median 2.6 over min 2.0 = 1.3; the point's ratio sqrt(1.5 x 1.3). Median / median: a 1.5 / 2.0,
    b 2.6 / 2.0; min / min: a 1.2 / 1.0, b 2.2 / 2.0."""
    d = {"probe": {"a": [1.0, 2.0, 3.0], "b": [2.0, 2.0]},
         "before": {"seconds": {"a": [1.5, 1.2], "b": [3.0]}}, "after": {"seconds": {"a": [1.8], "b": [2.6, 2.2]}}}
    assert sve.drift_ratio(d) == pytest.approx(np.sqrt(1.5 * 1.3))
    assert sve.drift_ratio(d, "median", "median") == pytest.approx(np.sqrt(0.75 * 1.3))
    assert sve.drift_ratio(d, "min", "min") == pytest.approx(np.sqrt(1.2 * 1.1))
    assert sve.drift_ratio({"probe": d["probe"]}) is None and sve.drift_ratio({}) is None
    # a point recorded against a chip that keeps its steps' median (the probe since the sixteenth session) is
    # compared with the probe's median by default: a 1.5 / 2.0, b 2.6 / 2.0
    assert sve.drift_ratio({**d, "probe_statistic": "median"}) == pytest.approx(np.sqrt(0.75 * 1.3))


def test_the_probe_statistic_is_read_from_the_samples_file(sve, tmp_path) -> None:
    """The chip's samples file says which statistic the YAML kept; one written before it said is the best (min)."""
    chip = tmp_path / "local.yaml"
    chip.write_text("{}\n")
    side = tmp_path / "local.samples.json"
    side.write_text('{"seconds": {}}')
    assert sve.probe_statistic(str(chip)) == "min"
    side.write_text('{"statistic": "median", "seconds": {}}')
    assert sve.probe_statistic(str(chip)) == "median"


def test_each_point_is_matched_to_the_reference_step_of_its_batch_and_context(sve) -> None:
    """c = 1 decodes one row: batch 1; c = 4-32 decode several: batch 8, the reference's largest; ISL 128 decodes at
    128-192 keys: context 129; ISL 512 and 2048: 577, the reference's nearest."""
    assert sve.drift_keys(1, 128) == [sve.drift_key(1, 129)]
    assert sve.drift_keys(8, 512) == [sve.drift_key(8, 577)]
    assert sve.drift_keys(32, 2048) == [sve.drift_key(8, 577)]


@pytest.mark.parametrize("k", [0.8, 1.3])
def test_the_scaled_chip_prices_every_step_k_times_longer(sve, k: float) -> None:
    """Decode at batch 1 / 8 / 32 and short / long contexts, prefills of 128 and 512 tokens and a prefill beside
    decode rows: each priced on the scaled chip is k x its price on the chip as probed; the front end is not a
    step and stays."""
    from jalapeno.hardware.catalog import load_spec_file
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim import cost_model_for

    chip = load_spec_file(CHIP)
    scaled = sve.drift_scaled_chip(chip, k)
    raw, slow = (cost_model_for("smollm2-135m", c, precision="fp32", kv="fp32") for c in (chip, scaled))
    shapes = [StepShape.from_lists(decode_ctx=[129]), StepShape.from_lists(decode_ctx=[577] * 8),
              StepShape.from_lists(decode_ctx=[2000] * 32), StepShape.from_lists(prefill=[(128, 0)]),
              StepShape.from_lists(prefill=[(512, 0)], decode_ctx=[600] * 7)]
    for s in shapes:
        assert slow.step(s).time_s == pytest.approx(k * raw.step(s).time_s, rel=1e-9)
    assert scaled.efficiency.request_overhead_ms == chip.efficiency.request_overhead_ms
    assert chip.efficiency.step_overhead_us > 0  # the fixed terms were there to scale


def test_the_compute_ratio_slows_the_compute_bound_steps(sve) -> None:
    """The decode reference unchanged (k = 1), the prefill reference 1.6x slower: prefills of 512 and 2048 tokens
    (compute-bound) are priced more than 1.5x longer, a batch-1 decode step (memory and fixed times) under 1.06x;
    the other way round (k = 1.3, compute 1.0) the prefills under 1.05x, the batch-1 decode more than 1.25x."""
    from jalapeno.hardware.catalog import load_spec_file
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim import cost_model_for

    chip = load_spec_file(CHIP)
    raw = cost_model_for("smollm2-135m", chip, precision="fp32", kv="fp32")
    pre = [StepShape.from_lists(prefill=[(t, 0)]) for t in (512, 2048)]
    dec = StepShape.from_lists(decode_ctx=[129])
    for k, kc, lo_pre, hi_pre, lo_dec, hi_dec in ((1.0, 1.6, 1.5, 1.6, 1.0, 1.06), (1.3, 1.0, 1.0, 1.05, 1.25, 1.3)):
        slow = cost_model_for("smollm2-135m", sve.drift_scaled_chip(chip, k, kc), precision="fp32", kv="fp32")
        for s in pre:
            assert lo_pre < slow.step(s).time_s / raw.step(s).time_s <= hi_pre
        assert lo_dec <= slow.step(dec).time_s / raw.step(dec).time_s < hi_dec
    assert sve.drift_prefill_key().endswith(f" prefill {sve.DRIFT_PREFILL}")


def test_a_recorded_point_drift_corrected_takes_the_ratio_in_its_tpot(sve) -> None:
    """The quiet 14:20 c = 1 ISL 512 point with a reference 20 % slower than the probe: its simulated TPOT (decode
    steps only) corrected is 1.2 x raw, raw is the point simulated on the chip as probed."""
    p = json.loads(RESULT.read_text().splitlines()[0])
    key, other = sve.drift_keys(p["concurrency"], p["isl"])[0], sve.drift_key(8, 129)
    p["drift"] = {"probe": {key: [1.0, 1.1], other: [1.0]}, "before": {"seconds": {key: [1.2], other: [3.0]}},
                  "after": {"seconds": {key: [1.2], other: [3.0]}}}  # the point's own step 1.2x, another 3x
    got = sve.drift_report([p], str(CHIP), None)
    row = got["points"][0]
    assert row["ratio"] == pytest.approx(1.2) and row["ratio_all_shapes"] == pytest.approx(np.sqrt(1.2 * 3.0))
    assert row["raw"]["TPOT"]["simulated"] == pytest.approx(sve.resimulate([p], str(CHIP))[0]["TPOT"]["simulated"])
    assert row["corrected"]["TPOT"]["simulated"] == pytest.approx(1.2 * row["raw"]["TPOT"]["simulated"], rel=2e-3)
    assert set(got["raw"]) == set(got["corrected"]) == set(sve.METRICS)


def test_the_probe_samples_are_read_beside_the_chip(sve, tmp_path: Path) -> None:
    chip = tmp_path / "probe.yaml"
    chip.write_text(CHIP.read_text())
    assert sve.probe_samples(str(chip)) == {}
    key = sve.drift_key(*sve.DRIFT_SHAPES[0])
    (tmp_path / "probe.samples.json").write_text(json.dumps({"seconds": {key: [0.03, 0.025], "other": [1.0]}}))
    assert sve.probe_samples(str(chip)) == {key: [0.03, 0.025]}


def test_drift_ref_without_probe_samples_is_one_line(tmp_path: Path) -> None:
    chip = tmp_path / "probe.yaml"
    chip.write_text(CHIP.read_text())
    r = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--drift-ref", "--hardware", str(chip)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "--drift-ref" in r.stderr and "probe" in r.stderr


def test_context_steps_times_only_the_shapes_asked_for(sve, tiny_llama_with_kernel: Path) -> None:
    """The drift reference's steps through the probe's own code, on a tiny Llama: exactly DRIFT_SHAPES, each with
    DRIFT_ROUNDS[0] samples, all positive."""
    from jalapeno.hardware import probe as pr
    from jalapeno.models.catalog import load_model

    got = pr.context_steps(pr.random_model(load_model(str(tiny_llama_with_kernel)), "cpu"), 0.0, sve.DRIFT_ROUNDS, sve.DRIFT_SHAPES)
    assert sorted(got) == sorted(sve.DRIFT_SHAPES)
    assert all(len(v) == sve.DRIFT_ROUNDS[0] and min(v) > 0 for v in got.values())


def test_contention_is_the_engine_threads_wait_over_run_in_the_window(sve) -> None:
    """Runnable-but-waiting time over run time of the engine and loop threads (the OpenMP workers and the rest are
    the engine's own parallel work, not other load); no split or no run time -> None."""
    p = {"served_split": {"run_s": {"engine": 8.0, "loop": 2.0, "other": 7.0},
                          "wait_s": {"engine": 1.5, "loop": 0.5, "other": 9.0}}}
    assert sve.contention(p) == pytest.approx(0.2)
    assert sve.contention({}) is None
    assert sve.contention({"served_split": {"run_s": {"engine": 0.0}, "wait_s": {"engine": 1.0}}}) is None
    assert sve.contention(p) > sve.CONTENDED_WAIT_SHARE


def test_host_steal_is_the_share_of_the_machines_cpu_over_the_points_steps(sve) -> None:
    """Steal seconds (all CPUs) over CPUs x the steps' span; None for a trace written before steal was recorded."""
    p = {"served_split": {"step_s": 9.0, "deliver_s": 1.0, "steal_s": 1.0}}
    assert sve.host_steal(p, cpus=2) == pytest.approx(0.05)
    assert sve.host_steal({"served_split": {"step_s": 9.0, "deliver_s": 1.0}}, cpus=2) is None
    assert sve.host_steal({}, cpus=2) is None
    assert sve.host_steal({"served_split": {"step_s": 0.0, "deliver_s": 0.0, "steal_s": 0.0}}, cpus=2) is None
