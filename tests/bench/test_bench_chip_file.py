"""``jalapeno bench --compare-sim --hardware PATH.yaml``: a recorded chip (e.g. the probe with its measured front end,
``sim_vs_engine.py --write-chip``) is accepted as the simulated chip, loaded before the run; a bad file is one line
(issue 16, thirteenth session)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHIP = ROOT / "benchmarks" / "data" / "local_probe_quiet_1750_front_end.yaml"


def _bench(hardware: str) -> subprocess.CompletedProcess:
    # port 9 (discard) on loopback: nothing listens, so a run that got past the chip stops at listing the models
    return subprocess.run([sys.executable, "-m", "jalapeno.cli", "bench", "--base-url", "http://127.0.0.1:9",
                           "--compare-sim", "--hardware", hardware, "--num-prompts", "1"],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("hardware", "needle"), [
    (str(CHIP), "could not list models"),  # the chip loaded; the missing server is the next error
    ("nope.yaml", "--hardware nope.yaml: no such chip file"),
])
def test_a_chip_file_is_loaded_before_the_run(hardware, needle) -> None:
    r = _bench(hardware)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_an_invalid_chip_file_is_one_line(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("efficiency: [\n")
    r = _bench(str(bad))
    assert r.returncode == 2 and "YAML syntax error" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_front_end_chip_simulates_what_resimulate_does() -> None:
    """The bench's own comparison on the chip file equals `sim_vs_engine.py --resimulate --sim-release sent` on it
    (one code path: the bench's lengths and send times, the chip's front end)."""
    import json

    import numpy as np

    from jalapeno.bench.client import BenchRequest
    from jalapeno.bench.commands import sim_chip
    from jalapeno.bench.compare import simulate_workload
    from jalapeno.bench.loadgen import LoadSpec

    p = json.loads((ROOT / "benchmarks" / "data" / "sim_vs_engine_isl512_rr08_quiet_1753.jsonl").read_text()
                   .splitlines()[0])
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import sim_vs_engine as sve

    prompts, outputs = sve.point_lengths(p)
    reqs = [BenchRequest([1] * int(i), int(i), int(o)) for i, o in zip(prompts, outputs)]
    sent = np.asarray(p["client"]["sent_monotonic"]) - p["client"]["sent_monotonic"][0]
    got = simulate_workload(reqs, np.zeros(len(reqs)), LoadSpec(concurrency=8), hardware=sim_chip(str(CHIP)),
                            model="smollm2-135m", precision="fp32", sent_s=sent)
    again = sve.resimulate([p], str(CHIP), release="sent")[0]
    assert got["median_ttft_ms"] == pytest.approx(again["TTFT"]["simulated"], rel=1e-9)
    # -0.12 until the fourteenth session: fresh prompts in mixed steps priced on the flash path, as the engine now runs them; the recorded run is the engine before that
    assert got["median_ttft_ms"] / p["TTFT"]["measured"] - 1 == pytest.approx(-0.184, abs=0.01)
