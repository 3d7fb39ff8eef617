"""``benchmarks/sim_vs_engine.py --price-trace``: a recorded concurrency-1 step trace's decode steps against their
price on a chip, by context (issue 16, tenth session): contexts counted by hand, the price is the cost model's own
step, bad input one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "sim_vs_engine.py"
TRACE = ROOT / "tests" / "server" / "data" / "served_c1_isl512_osl64_loaded.jsonl"


def _step(prefill: int, decode: int, seqs: int, t0: float, dt: float):
    from jalapeno.server.step_trace import StepRecord

    return StepRecord(t0, t0 + dt, t0 + dt, False, seqs, prefill, decode)


def test_contexts_of_a_single_stream_are_counted_from_each_prefill(sve) -> None:
    """Prefill 4 tokens then 3 decode steps attend 5, 6, 7 keys; a second request's prefill of 2 restarts at 3;
    a two-sequence step (another request arrived) and what follows it until the next one-sequence prefill are
    left out."""
    steps = [_step(4, 1, 1, 0, 1), _step(0, 1, 1, 1, .1), _step(0, 1, 1, 2, .2), _step(0, 1, 1, 3, .3),
             _step(2, 1, 1, 4, 1), _step(0, 1, 1, 5, .4), _step(3, 1, 2, 6, 1), _step(0, 2, 2, 7, .5),
             _step(0, 1, 1, 8, .6)]
    got = sve.single_stream_contexts(steps)
    assert [c for c, _ in got] == [5, 6, 7, 3]
    assert [round(w, 6) for _, w in got] == [0.1, 0.2, 0.3, 0.4]


def test_a_recorded_trace_is_priced_step_by_step_on_the_chip(sve) -> None:
    """The recorded c = 1 ISL 512 trace (4 requests, 63 decode steps each at 513-575 keys): one 64-key band, its
    median measured step is the trace's own, its price the median of the cost model's step at each context."""
    from jalapeno.perf.shape import StepShape
    from jalapeno.server.step_trace import load_trace
    from jalapeno.sim import cost_model_for

    rows = sve.price_single_stream(TRACE, "h100")
    steps = load_trace(TRACE)[1]
    decode = [s.t_end - s.t_start for s in steps if s.prefill_tokens == 0]
    assert [r["keys"] for r in rows] == [[513, 575]] and rows[0]["steps"] == len(decode)
    assert rows[0]["measured_ms"] == pytest.approx(1e3 * float(np.median(decode)))
    cm = cost_model_for("smollm2-135m", "h100", precision="fp32", kv="fp32")
    priced = [cm.step(StepShape.from_lists(decode_ctx=[c])).time_s for c in range(513, 576)]
    assert rows[0]["priced_ms"] == pytest.approx(1e3 * float(np.median(priced)))


@pytest.mark.parametrize("bad", ["missing.jsonl", "prefill_only"])
def test_a_bad_trace_is_one_line(tmp_path: Path, bad: str) -> None:
    path = tmp_path / bad
    if bad == "prefill_only":
        path.write_text('{"kind":"header","pid":1,"cpus":2,"clock":"monotonic","groups":["engine","loop","other"]}\n'
                        '{"kind":"step","t_start":0,"t_end":1,"t_done":1,"idle_before":true,"seqs":2,'
                        '"prefill_tokens":8,"decode_tokens":2,"run_s":[0,0,0],"wait_s":[0,0,0]}\n')
    out = subprocess.run([sys.executable, str(SCRIPT), "--price-trace", str(path), "--hardware", "h100"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "--price-trace" in out.stderr


NINTH_QUIET_C1 = {"concurrency": 1, "isl": 512, "osl": 64, "prompts": 4, "hardware": "local", "device": "cpu",
                  "TTFT": {"measured": 1333.4, "simulated": None}, "TPOT": {"measured": 44.2, "simulated": None},
                  "E2E": {"measured": 4189.1, "simulated": None}, "throughput": {"measured": 15.3, "simulated": None}}


def test_resimulate_reproduces_what_the_bench_simulated_on_the_same_chip(sve, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The ninth session's quiet c = 1 point simulated again on its own chip (the lead's 08:04 probe, kept in
    benchmarks/data) gives what `jalapeno bench --compare-sim` recorded for it at 08:11 (docs/fidelity.md: TTFT
    1076.8, TPOT 33.3, E2E 3176.9 ms, 20.1 tok/s), the measured side untouched; a file that is not a result is one
    line, exit 2."""
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "local.yaml").write_text(
        (ROOT / "benchmarks" / "data" / "local_probe_quiet_0804.yaml").read_text())
    monkeypatch.setenv("JALAPENO_CACHE", str(tmp_path))
    (got,) = sve.resimulate([NINTH_QUIET_C1], "local")
    sim = {m: got[m]["simulated"] for m in sve.METRICS}
    assert sim == pytest.approx({"TTFT": 1076.8, "TPOT": 33.3, "E2E": 3176.9, "throughput": 20.1}, abs=0.06)
    assert got["TPOT"]["measured"] == 44.2 and got["concurrency"] == 1
    bad = tmp_path / "bad.json"
    bad.write_text('{"device": "cpu"}')
    out = subprocess.run([sys.executable, str(SCRIPT), "--resimulate", str(bad), "--hardware", "h100"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "--resimulate" in out.stderr
