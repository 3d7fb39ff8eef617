"""benchmarks/step_residuals.py (issue 16, seventeenth session): served steps grouped by shape across committed
closed-loop runs, each normalised by a reference taken at its own point."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "step_residuals.py"
RUN = ROOT / "benchmarks" / "data" / "grid_check_2231_isl2048"  # 5 points, ISL 2048 x OSL 64, c 1-32

sys.path.insert(0, str(ROOT / "benchmarks"))
import step_residuals as sr  # noqa: E402


def test_steps_are_grouped_by_the_path_they_take() -> None:
    assert sr.step_group([], [(0, 100)], 128) == ("decode", "b 1, ctx 0-255")
    assert sr.step_group([], [(0, 255), (1, 256)], 128) == ("decode", "b 2-3, ctx 0-255")  # mean 255.5
    assert sr.step_group([], [(i, 2000) for i in range(31)], 2048) == ("decode", "b 24-32, ctx >=1536")
    assert sr.step_group([(0, 120, 0), (1, 100, 0)], [], 128) == ("fresh", "2 prompts ISL 128")
    assert sr.step_group([(0, 500, 0)], [(1, 600)] * 9, 512) == ("mixed", "1 prompt ISL 512 + 8-15 rows")
    assert sr.step_group([(0, 1024, 1024)], [], 2048) == ("mixed", "1 prompt ISL 2048 (a later chunk)")
    assert sr.step_group([(k, 100, 0) for k in range(5)], [(9, 300)] * 2, 128)[1] == "4+ prompts ISL 128 + 2-3 rows"


def _row(run, point, kind, shape, m, p, drift=1.0, dec=1.0):
    return {"run": run, "point": point, "kind": kind, "shape": shape, "measured_s": m, "priced_s": p,
            "drift": drift, "dec": dec}


def test_group_table_normalises_each_point_then_takes_the_median_over_points() -> None:
    rows = [_row("A", [1, 128, 64], "mixed", "s", 2.0, 1.0, dec=1.6),  # point 1: (2+1)/(1+1) / 1.6 = 0.9375
            _row("A", [1, 128, 64], "mixed", "s", 1.0, 1.0, dec=1.6),
            _row("A", [4, 128, 64], "mixed", "s", 3.0, 2.0, dec=1.0),  # point 2: 1.5
            _row("A", [8, 128, 64], "mixed", "s", 1.2, 1.0, dec=1.0),  # point 3: 1.2
            _row("B", [1, 128, 64], "mixed", "s", 1.0, 1.0, dec=None),  # no reference: left out
            _row("A", [1, 128, 64], "decode", "d", 5.0, 1.0, dec=1.0)]  # another kind: not asked for
    t = sr.group_table(rows, "dec", ("mixed",))
    assert set(t) == {("mixed", "s")} and set(t[("mixed", "s")]) == {"A"}
    c = t[("mixed", "s")]["A"]
    assert c["median"] == pytest.approx(1.2) and c["lo"] == pytest.approx(0.9375) and c["hi"] == pytest.approx(1.5)
    assert (c["points"], c["steps"]) == (3, 4)


def test_verdict() -> None:
    cell = lambda v, n=10: {"median": v, "steps": n}  # noqa: E731
    assert sr.verdict({"a": cell(1.2), "b": cell(1.3)}, 0.05, 3).startswith("CONSISTENT +2")
    assert sr.verdict({"a": cell(0.8), "b": cell(0.9)}, 0.05, 3).startswith("CONSISTENT -1")
    assert sr.verdict({"a": cell(1.2), "b": cell(0.9)}, 0.05, 3) == "noise"
    assert sr.verdict({"a": cell(1.2), "b": cell(1.02)}, 0.05, 3) == "same sign, small"
    assert sr.verdict({"a": cell(1.2), "b": cell(1.3, 2)}, 0.05, 3) == "one run"  # too few steps in b


def _lineup_decode(path: Path) -> list[tuple[int, float, float]]:
    """Per point of a committed `sim_vs_engine.py --lineup` output: its decode-only steps, measured and priced s."""
    out: list[list[float]] = []
    for line in path.read_text().splitlines():
        if line.startswith("c="):
            out.append([0, 0.0, 0.0])
        m = re.match(r"\s+decode b=\S+.*?: (\d+) steps, measured ([\d.]+) s, priced ([\d.]+) s", line)
        if m:
            out[-1][0] += int(m.group(1))
            out[-1][1] += float(m.group(2))
            out[-1][2] += float(m.group(3))
    return [(int(n), a, b) for n, a, b in out]


def test_a_committed_run_replays_as_its_lineup_priced_it() -> None:
    """Independently of this script: the run's committed line-up (`sim_vs_engine.py --lineup`, written when the run
    was made) lists each point's decode steps, measured and priced; the rows here sum to the same, point by point,
    and every point's decode reference is that sum's ratio."""
    rows = sr.run_steps(RUN)
    want = _lineup_decode(RUN / "lineup.txt")
    points = list(dict.fromkeys(tuple(r["point"]) for r in rows))
    assert len(points) == len(want) == 5
    for pt, (n, m, p) in zip(points, want):
        dec = [r for r in rows if tuple(r["point"]) == pt and r["kind"] == "decode"]
        assert len(dec) == n
        assert sum(r["measured_s"] for r in dec) == pytest.approx(m, abs=0.006 * len(dec) ** 0.5 + 0.01)
        assert sum(r["priced_s"] for r in dec) == pytest.approx(p, abs=0.006 * len(dec) ** 0.5 + 0.01)
        ref = {r["dec"] for r in rows if tuple(r["point"]) == pt}
        assert len(ref) == 1 and ref.pop() == pytest.approx(sum(r["measured_s"] for r in dec) /
                                                             sum(r["priced_s"] for r in dec))
        assert all(r["drift"] and 0.5 < r["drift"] < 2.0 for r in rows if tuple(r["point"]) == pt)


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    got = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert got.returncode == 2 and got.stderr.strip().count("\n") == 0 and "no such directory" in got.stderr
    got = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert got.returncode == 2 and "local.yaml" in got.stderr and "Traceback" not in got.stderr
