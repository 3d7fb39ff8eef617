"""``benchmarks/sim_vs_engine.py`` runs issue 16's grid unattended and resumably: each finished point is one line of
``OUT.points.jsonl``; a second run keeps what is there and runs the rest. No server here: the file handling, the
pending list, the summary over a partial run, and bad input (one line, exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jalapeno.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "sim_vs_engine.py"


def _point(c: int, isl: int, osl: int, prompts: int, ttft: tuple[float, float]) -> dict:
    metrics = {"TTFT": ttft, "TPOT": (50.0, 45.0), "E2E": (4000.0, 4400.0), "throughput": (12.0, 12.0)}
    return {**{k: {"measured": m, "simulated": s} for k, (m, s) in metrics.items()},
            "concurrency": c, "isl": isl, "osl": osl, "prompts": prompts, "hardware": "local", "device": "cpu"}


def test_a_partial_run_is_read_back_and_only_the_rest_is_pending(sve, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Two points written, the third torn mid-line (the run was killed): the two are kept, the torn one and the
    grid's others are pending; a point measured with other requests or another chip does not count as done; the
    summary covers the kept points (TTFT errors 10 % and 30 % by hand: median 20, worst 30)."""
    sink = sve.points_path(tmp_path / "grid.json")
    assert sink.name == "grid.points.jsonl" and sve.read_points(sink) == []
    sve.append_point(sink, _point(1, 128, 64, 4, (100.0, 110.0)))
    sve.append_point(sink, _point(4, 128, 64, 12, (200.0, 260.0)))
    with sink.open("a") as f:
        f.write(json.dumps(_point(8, 128, 64, 24, (1.0, 1.0)))[:40])
    done = sve.read_points(sink)
    assert [p["concurrency"] for p in done] == [1, 4] and "torn last line" in capsys.readouterr().out
    grid = sve.grid_points({"concurrency": [1, 4, 8], "isl": [128], "osl": [64, 256]})
    assert sve.pending(grid, done, 3, 4, "local", "cpu") == [(1, 128, 256), (4, 128, 256), (8, 128, 64),
                                                             (8, 128, 256)]
    assert (4, 128, 64) in sve.pending(grid, done, 1, 4, "local", "cpu")  # 4 requests, not the 12 measured
    assert (1, 128, 64) in sve.pending(grid, done, 3, 4, "h100", "cpu")
    summary = sve.summarise(done)
    assert summary["TTFT"] == {"median_pct": pytest.approx(20.0), "worst_pct": pytest.approx(30.0)}
    sve.append_point(sink, _point(8, 128, 64, 24, (1.0, 1.0)))  # the resumed run appends after the torn line
    assert [p["concurrency"] for p in sve.read_points(sink)] == [1, 4, 8]


def test_a_file_that_is_not_a_points_file_is_one_clear_error(sve, tmp_path: Path) -> None:
    bad = tmp_path / "x.points.jsonl"
    bad.write_text("not json\n" + json.dumps(_point(1, 128, 64, 4, (1.0, 1.0))) + "\n")
    with pytest.raises(ConfigError, match=r"x.points.jsonl:1: not a JSON line"):
        sve.read_points(bad)
    bad.write_text(json.dumps({"concurrency": 1}) + "\n")
    with pytest.raises(ConfigError, match=r":1: not a sim_vs_engine point \(no isl, osl"):
        sve.read_points(bad)
    with pytest.raises(ConfigError, match="--isl '128,x'"):
        sve.parse_list("isl", "128,x")
    assert sve.parse_list("concurrency", "1,8,16") == [1, 8, 16]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120)


def test_the_script_resumes_a_finished_grid_without_serving_and_bad_input_is_one_line(tmp_path: Path) -> None:
    """A grid whose every point is already in the file: nothing to estimate or run, the summary is the file's.
    A bad flag value or a broken points file: one line on stderr, exit 2, no traceback."""
    out = tmp_path / "r.json"
    with out.with_suffix(".points.jsonl").open("w") as f:
        f.write(json.dumps(_point(1, 128, 64, 4, (100.0, 110.0))) + "\n")
    done = _run("--concurrency", "1", "--isl", "128", "--osl", "64", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "0 points, estimated 0 min" in done.stdout and "(1 points)" in done.stdout
    assert json.loads(out.read_text())["summary"]["TTFT"]["median_pct"] == pytest.approx(10.0)
    for args in (("--isl", "12a", "--estimate-only"), ("--concurrency", "1", "--isl", "128", "--osl", "64",
                                                        "--out", str(tmp_path / "bad.json"))):
        (tmp_path / "bad.points.jsonl").write_text("{broken\n{}\n")
        got = _run(*args)
        assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr
        assert len(got.stderr.strip().splitlines()) == 1 and got.stderr.startswith("error: ")
