"""``benchmarks/targets13.py``: the table's arithmetic (n, median / p90 / signed, met / not met from the numbers),
checked against hand counts and numpy on a tiny slice; never its timings."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


class _P:  # a measured point: only its metrics matter here
    def __init__(self, metrics):
        self.metrics = metrics


@pytest.fixture(scope="module")
def t13():
    spec = importlib.util.spec_from_file_location("targets13", ROOT / "benchmarks" / "targets13.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["targets13"] = mod  # its dataclasses look their module up while it loads
    spec.loader.exec_module(mod)
    return mod


def test_error_rows_median_p90_signed_and_met_by_hand(t13):
    # |e| sorted 3 5 8 12 20: median 8; p90 at rank 0.9 x 4 = 3.6 -> 12 + 0.6 x 8 = 16.8; signed median +3
    errs = {"output_tput_per_gpu": [-5.0, 12.0, 3.0, -8.0, 20.0], "median_tpot": [-11.0, 11.0, 30.0],
            "median_ttft": []}
    rows = t13.error_rows("x", "set", errs, {"output_tput_per_gpu": 8.0, "median_tpot": 10.0, "median_ttft": 20.0})
    tput, tpot, ttft = rows
    assert (tput.n, tput.value, tput.signed, tput.met) == (5, 8.0, 3.0, True)  # 8 <= 8: met at the limit
    assert tput.p90 == pytest.approx(16.8)
    assert (tpot.n, tpot.value, tpot.signed, tpot.met) == (3, 11.0, 11.0, False)  # 11 > 10
    assert ttft.n == 0 and not ttft.met and math.isnan(ttft.value)  # no point: never met
    # a point that failed to simulate counts as an infinite |error|: 4 of them move the median of 9 to the 5th
    # smallest, 20 (still within 50); a 5th makes it (20 + inf) / 2, never met; n counts them, signed does not
    four = t13.error_rows("x", "set", errs, {"output_tput_per_gpu": 50.0}, failed={"output_tput_per_gpu": 4})[0]
    assert (four.n, four.value, four.signed, four.met, four.p90) == (9, 20.0, 3.0, True, math.inf)
    assert "4 point(s) failed" in four.note and "over the 5 simulated: 8.0" in four.note
    five = t13.error_rows("x", "set", errs, {"output_tput_per_gpu": 50.0}, failed={"output_tput_per_gpu": 5})[0]
    assert five.n == 10 and five.value == math.inf and not five.met and t13._fmt(five.value) == "inf"
    assert t13.failed_per_metric([_P({"median_tpot": 1.0}), _P({"median_ttft": 1.0})], [{"error": "x"}, None],
                                 ["median_tpot", "median_ttft", "output_tput_per_gpu"]) == \
        {"median_tpot": 1, "median_ttft": 1, "output_tput_per_gpu": 0}


def test_coverage_band_and_factor_rows(t13):
    assert t13.coverage_row("c", "s", 185, 185).met
    low = t13.coverage_row("c", "s", 175, 185)  # 94.59 %
    assert low.value == pytest.approx(100 * 175 / 185) and not low.met and low.n == 185
    assert not t13.coverage_row("c", "s", 0, 0).met
    assert t13.band_row("r", "s", "share", 76.0, (50.0, 90.0)).met
    assert t13.band_row("r", "s", "share", 90.0, (50.0, 90.0)).met
    assert not t13.band_row("r", "s", "share", 49.0, (50.0, 90.0)).met
    ok = t13.factor_row("n", "s", [1.0, 1.1, 1.55], True, "")
    assert ok.met and ok.value == pytest.approx(1.55) and ok.n == 3
    slow = t13.factor_row("n", "s", [1.0, 0.4], True, "")  # 2.5x too slow
    assert not slow.met and slow.value == pytest.approx(2.5)
    assert not t13.factor_row("n", "s", [1.0], False, "").met  # a chip without a figure left unlabelled


def test_a_tiny_aggregated_slice_against_its_own_points(t13):
    """Three cheapest H200 held-out rows at 1 request per slot: n, median |error| and met recomputed with numpy from
    the measured / predicted values the result carries."""
    res = t13.run_aggregated("h200-held-out", 1, None, lambda m: None, limit=3)
    assert len(res.detail["points"]) == 3 and all(p["date"][:7] >= "2026-03" for p in res.detail["points"])
    by_metric = {r.metric: r for r in res.rows}
    for m, name in t13.METRIC_NAMES.items():
        e = [100 * (p["predicted"][m] - p["measured"][m]) / p["measured"][m] for p in res.detail["points"]
             if m in p["measured"]]
        row = by_metric[name]
        assert row.n == len(e) > 0
        assert row.value == pytest.approx(float(np.median(np.abs(e))))
        assert row.signed == pytest.approx(float(np.median(e)))
        assert row.met == (row.value <= t13.SAME_CHIP[m])


def test_roofline_bytes_match_a_hand_count(t13):
    """Llama-3.1-8B bf16, batch 1, context 1024: every weight but the embedding table (an index, not a stream) plus
    the KV of 1024 tokens (32 layers x 8 KV heads x 128 x K, V x 2 bytes)."""
    r = t13.roofline_share()
    hand = 2 * (8_030_261_248 - 128_256 * 4096) + 32 * 8 * 128 * 2 * 2 * 1024
    assert r["hbm_bytes"] == pytest.approx(hand, rel=0.01)
    assert r["share_pct"] == pytest.approx(100 * r["hbm_bytes"] / 4.8e12 / r["step_s"], rel=0.01)


def test_main_markdown_and_bad_input(t13, capsys):
    assert t13.main(["--only", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown target 'nope'" in err
    assert t13.main(["--only", "roofline", "--markdown"]) == 0
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("| roofline")]
    assert len(lines) == 1 and ("| met |" in lines[0]) == (50 <= float(lines[0].split(" | ")[4]) <= 90)


def test_write_doc_replaces_only_the_text_between_the_markers(t13, tmp_path, capsys):
    doc = tmp_path / "f.md"
    doc.write_text(f"intro\n{t13.MARKS[0]}\nold table\n{t13.MARKS[1]}\n\n## next\n", encoding="utf-8")
    t13.write_doc(["| a |", "| b |"], doc)
    assert doc.read_text() == f"intro\n{t13.MARKS[0]}\n| a |\n| b |\n{t13.MARKS[1]}\n\n## next\n"
    (tmp_path / "g.md").write_text("no markers\n")
    with pytest.raises(SystemExit, match="no targets13 markers"):
        t13.write_doc(["x"], tmp_path / "g.md")
    assert t13.main(["--quick", "--write-doc"]) == 2  # a smoke run never lands in the doc
    assert "needs the full protocol" in capsys.readouterr().err


def test_a_value_at_the_limit_shows_the_digits_that_decide(t13):
    row = t13.error_rows("x", "s", {"median_tpot": [10.04, -10.04, 10.04]}, {"median_tpot": 10.0})[0]
    assert not row.met and t13._fmt(row.value) == "10.0" and "10.040 vs 10" in row.note


def test_from_json_replays_the_rows_and_refuses_a_bad_file(t13, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert t13.main(["--only", "roofline", "--json", str(out)]) == 0
    capsys.readouterr()
    assert t13.main(["--from-json", str(out), "--markdown"]) == 0
    replay = capsys.readouterr().out
    assert sum(1 for x in replay.splitlines() if x.startswith("| roofline")) == 1
    assert t13.main(["--from-json", str(out), "--write-doc"]) == 2  # one target only: never the doc
    (tmp_path / "bad.json").write_text("{}")
    assert t13.main(["--from-json", str(tmp_path / "bad.json")]) == 2
    assert capsys.readouterr().err.count("\n") == 2
