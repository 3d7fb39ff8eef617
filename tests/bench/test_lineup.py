"""Served and simulated steps lined up request by request with InferenceX's length spread (issue 16, thirteenth
session; ``jalapeno.bench.lineup``, ``benchmarks/sim_vs_engine.py --lineup``). The recorded run: the lead's quiet
c = 8 / 16, ISL 512, OSL 64, ``--random-range-ratio 0.8`` of 17:52 with step and request traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jalapeno.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "sim_vs_engine.py"
DATA = ROOT / "benchmarks" / "data"
POINTS = DATA / "sim_vs_engine_isl512_rr08_quiet_1753.jsonl"
TRACE = DATA / "sim_vs_engine_isl512_rr08_quiet_1753.trace.jsonl"
CHIP = DATA / "local_probe_quiet_1750.yaml"
CHIP_FE = DATA / "local_probe_quiet_1750_front_end.yaml"


def _points() -> list[dict]:
    return [json.loads(line) for line in POINTS.read_text().splitlines()]


def _lengths(p: dict) -> tuple[np.ndarray, np.ndarray]:
    """The bench's random dataset at its seed 0 (what `jalapeno bench` sent), independently of sim_vs_engine."""
    from jalapeno.bench.dataset import WorkloadSpec, workload_lengths

    return workload_lengths(WorkloadSpec(dataset="random", num_prompts=p["prompts"], input_len=p["isl"],
                                         output_len=p["osl"], range_ratio=p["range_ratio"], fixed_output_len=True))


def _cm(chip: Path):
    from jalapeno.hardware.catalog import load_spec_file
    from jalapeno.sim import cost_model_for

    return cost_model_for("smollm2-135m", load_spec_file(chip), precision="fp32", kv="fp32")


def _served(p: dict):
    from jalapeno.bench.lineup import replay_served
    from jalapeno.server.step_trace import load_trace_requests

    _, steps, records = load_trace_requests(TRACE)
    c = p["client"]
    return replay_served(steps, records, c["sent_monotonic"], *_lengths(p), c["t_start_monotonic"],
                         c["t_end_monotonic"], _cm(CHIP), max_num_seqs=16)


@pytest.mark.parametrize("k", [0, 1])
def test_the_served_steps_are_rebuilt_and_agree_with_the_bench(k) -> None:
    """The replay matched every served step's totals (it raises otherwise); independently, each request's last
    token comes from the rebuilt step that the client then saw it in: the bench's done time is within 50 ms after
    the end of the step where the replay gives the request its last token, and every prompt is prefilled once,
    in full."""
    p = _points()[k]
    lu = _served(p)
    t0 = p["client"]["t_start_monotonic"]
    done = np.asarray(p["client"]["done_monotonic"]) - t0
    last = {}
    prefilled = np.zeros(len(lu.requests), dtype=int)
    for i, s in enumerate(lu.steps):
        for r, ctx in s.decode:
            last[r] = i
        for r, n, start in s.prefill:
            assert start == prefilled[r]
            prefilled[r] += n
    assert prefilled.tolist() == [r.prompt for r in lu.requests]
    lag = np.array([done[r] - lu.steps[i].t_end for r, i in sorted(last.items())])
    assert len(lag) == len(lu.requests) and lag.min() >= 0 and lag.max() < 0.05
    # decode rows: each request decodes output - 1 times (its first token comes from its prefill)
    rows = np.zeros(len(lu.requests), dtype=int)
    for s in lu.steps:
        for r, _ in s.decode:
            rows[r] += 1
    assert rows.tolist() == [r.output - 1 for r in lu.requests]


def test_the_served_first_wave_and_a_lone_latecomer_by_hand() -> None:
    """c = 8, read off the trace by hand: the first step prefilled request 3 alone (437 tokens, the first
    tokenised), the next the other seven (3,114 tokens) beside its decode row; request 14, sent 0.1 s after 12 and
    13 had reached the queue, missed their 2-prompt step and waited it out (> 2 s before its own step)."""
    lu = _served(_points()[0])
    assert lu.steps[0].prefill == [(3, 437, 0)] and not lu.steps[0].decode
    assert sorted(k for k, _, _ in lu.steps[1].prefill) == [0, 1, 2, 4, 5, 6, 7]
    assert lu.steps[1].prefill_tokens == 3114 and len(lu.steps[1].decode) == 1
    r14 = lu.requests[14]
    pair = [i for i, s in enumerate(lu.steps) if sorted(k for k, _, _ in s.prefill) == [12, 13]]
    assert len(pair) == 1 and r14.first_step > pair[0]
    assert lu.steps[r14.first_step].t_start - r14.sent > 2.0


def test_each_served_step_carries_the_traces_steal_and_the_split_prices_both_sides_by_hand() -> None:
    """The replay carries each trace step's steal time onto its rebuilt step (the trace here predates the field:
    given values by hand); the split sorts steps by steal over duration x CPUs against the threshold and sums each
    side, checked against a cost model that prices every step at 0.1 s."""
    import dataclasses

    from jalapeno.bench.lineup import LinedStep, Lineup, replay_served, steal_split
    from jalapeno.server.step_trace import load_trace_requests

    p = _points()[0]
    _, steps, records = load_trace_requests(TRACE)
    steps = [dataclasses.replace(s, steal_s=0.001 * (i % 7)) for i, s in enumerate(steps)]
    c = p["client"]
    lu = replay_served(steps, records, c["sent_monotonic"], *_lengths(p), c["t_start_monotonic"],
                       c["t_end_monotonic"], _cm(CHIP), max_num_seqs=16)
    window = [s for s in steps if s.t_start >= c["t_start_monotonic"]][:len(lu.steps)]
    assert [s.steal_s for s in lu.steps] == [s.steal_s for s in window]
    assert any(s.steal_s > 0 for s in lu.steps)

    class Flat:
        def step(self, shape):
            return type("R", (), {"time_s": 0.1})()

    hand = Lineup([], [LinedStep(0.0, 0.1), LinedStep(0.1, 0.22, steal_s=0.01), LinedStep(0.22, 0.42, steal_s=0.001)])
    got = steal_split(hand, Flat(), min_share=0.01, cpus=2)  # shares 0, 0.042, 0.0025
    assert got["steal"]["steps"] == 1 and got["steal"]["measured_s"] == pytest.approx(0.12)
    assert got["steal"]["median_ratio"] == pytest.approx(1.2)
    assert got["quiet"]["steps"] == 2 and got["quiet"]["measured_s"] == pytest.approx(0.3)
    assert got["quiet"]["priced_s"] == pytest.approx(0.2) and got["quiet"]["median_ratio"] == pytest.approx(1.5)
    assert steal_split(hand, Flat(), min_share=0.05, cpus=2)["steal"]["steps"] == 0


@pytest.mark.parametrize("k", [0, 1])
def test_with_the_measured_front_end_the_simulated_ingest_takes_the_served_shapes(k) -> None:
    """The same requests simulated, the first wave released as the served engine admitted it (its order into the
    queue, 3, 4, 5, 6, 7, 0, 1, 2 at c = 8: the tokeniser threads' finishing order; the first alone in the first
    step). Served, every request after the first wave waited out exactly one step between its send and its own first
    step (the one that started at its predecessor's completion, before it reached the engine thread). Simulated with
    the front end measured from the trace (10.16 ms): the same for every one of them, and every prefill group of the
    run is the served one (which requests prefilled together, beside how many decode rows). With none (the chip
    before): not one waits — each joins the step that starts at its predecessor's completion — and the groups part."""
    from jalapeno.bench.lineup import admitted_first_wave, prefill_groups, simulate_lined_up, steps_waited
    from jalapeno.server.step_trace import load_trace_requests

    p = _points()[k]
    c, cl = p["concurrency"], p["client"]
    lu = _served(p)
    assert steps_waited(lu)[c:] == [1] * (p["prompts"] - c)
    served = prefill_groups(lu)
    _, steps, records = load_trace_requests(TRACE)
    sent = np.asarray(cl["sent_monotonic"])
    first = admitted_first_wave(steps, records, sent, _lengths(p)[0], cl["t_end_monotonic"], c)
    assert first[0] == ([3, 4, 5, 6, 7, 0, 1, 2] if c == 8 else [*range(6, 16), *range(6)])
    assert first[1].tolist() == [0.0] + [first[1][1]] * (c - 1) and first[1][1] > 0
    fe = simulate_lined_up(_cm(CHIP_FE), sent - sent[0], *_lengths(p), c, first_wave=first)
    assert steps_waited(fe)[c:] == [1] * (p["prompts"] - c)
    assert prefill_groups(fe) == served
    none = simulate_lined_up(_cm(CHIP), sent - sent[0], *_lengths(p), c, first_wave=first)
    assert steps_waited(none)[c:] == [0] * (p["prompts"] - c)
    assert prefill_groups(none) != served


def test_resimulated_with_the_points_lengths_the_bench_comparison_is_reproduced() -> None:
    """`--resimulate --sim-release sent` on the recorded chip gives back the bench's own `--compare-sim` numbers of the
    live run (the lengths regenerated from the dataset's seed), and with the measured front end the TTFT error of
    both points falls from -20 / -35 % to -12 / 0 %. Since the fourteenth session the simulator prices the fresh
    prompts of mixed steps on the flash path, as the engine now runs them (the recorded run is the engine before
    that): the simulated side moved from the recorded TTFT 1,929 / 3,010 and TPOT 180.0 / 310.3 ms to the values
    below, and with the front end the TTFT error from -12 / 0 % to -18 / -7 %."""
    r = subprocess.run([sys.executable, str(SCRIPT), "--resimulate", str(POINTS), "--hardware", str(CHIP),
                        "--sim-release", "sent"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for p, line, (ttft, tpot) in zip(_points(), [x for x in r.stdout.splitlines() if x.startswith("c=")],
                                     [(1790.8, 172.8), (2789.4, 297.8)]):
        assert f"TTFT {p['TTFT']['measured']:.1f}/{ttft:.1f}" in line
        assert f"TPOT {p['TPOT']['measured']:.1f}/{tpot:.1f}" in line
    r = subprocess.run([sys.executable, str(SCRIPT), "--resimulate", str(POINTS), "--hardware", str(CHIP_FE),
                        "--sim-release", "sent"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ttft = [float(x.split("TTFT ")[1].split()[0].split("/")[1]) for x in r.stdout.splitlines() if x.startswith("c=")]
    errs = [t / p["TTFT"]["measured"] - 1 for t, p in zip(ttft, _points())]
    assert errs[0] == pytest.approx(-0.184, abs=0.01) and errs[1] == pytest.approx(-0.068, abs=0.01)


def test_the_lineup_command_prints_the_split_and_writes_every_request(tmp_path) -> None:
    out = tmp_path / "lineup.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--resimulate", str(POINTS), "--hardware", str(CHIP_FE),
                        "--lineup", str(TRACE), "--lineup-out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "c=16 isl=512 osl=64 TTFT measured 4665 ms" in r.stdout
    assert "14 of 14 served / 14 simulated agree" in r.stdout and "20 of 20 served / 20 simulated agree" in r.stdout
    assert "decode b=7 dot tiles: 7 steps" in r.stdout  # the chip's switch is 8: batch 7 on dot tiles
    got = json.loads(out.read_text())
    r14 = got[0]["served"]["requests"][14]
    assert r14["prompt"] == 509 and r14["prefill_steps"] == [r14["first_step"]]
    assert r14["queued"] - r14["arrived"] > 2.0  # handed over during the 2-prompt step, queued at its end
    step = got[0]["served"]["steps"][r14["first_step"]]
    assert [14, 509, 0] in step["prefill"] and step["t_start"] >= r14["queued"]


def test_a_trace_of_another_run_is_one_line(tmp_path) -> None:
    """The lead's equal-length 16:35 trace is not this run: no request records in the window → one line, exit 2."""
    other = DATA / "sim_vs_engine_isl512_quiet_1635.trace.jsonl"
    r = subprocess.run([sys.executable, str(SCRIPT), "--resimulate", str(POINTS), "--hardware", str(CHIP_FE),
                        "--lineup", str(other)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "--resimulate", str(POINTS), "--lineup", "nope.jsonl"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--lineup nope.jsonl: no such file" in r.stderr


def test_replay_refuses_other_lengths() -> None:
    from jalapeno.bench.lineup import replay_served
    from jalapeno.server.step_trace import load_trace_requests

    p = _points()[0]
    _, steps, records = load_trace_requests(TRACE)
    c = p["client"]
    prompts, outputs = _lengths(p)
    with pytest.raises(ConfigError, match="prompt tokens"):
        replay_served(steps, records, c["sent_monotonic"], prompts + 1, outputs, c["t_start_monotonic"],
                      c["t_end_monotonic"], _cm(CHIP), max_num_seqs=16)
    with pytest.raises(ConfigError, match="served step"):  # other output lengths: the decode rows differ somewhere
        replay_served(steps, records, c["sent_monotonic"], prompts, outputs + 3, c["t_start_monotonic"],
                      c["t_end_monotonic"], _cm(CHIP), max_num_seqs=16)


@pytest.mark.parametrize(("args", "needle"), [
    # another run's trace (equal lengths, 16:35) as the release trace: its records are not this run's
    (["--resimulate", str(POINTS), "--hardware", str(CHIP), "--release-trace",
      str(DATA / "sim_vs_engine_isl512_quiet_1635.trace.jsonl")], "0 request records in the step trace's window"),
    # points of an old result without their request counts
    (["--resimulate", str(DATA / "sim_vs_engine_quick.json"), "--hardware", str(DATA / "local_probe_quick.yaml")],
     "point 1 has no prompts"),
])
def test_bad_resimulations_are_one_line(args, needle) -> None:
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
