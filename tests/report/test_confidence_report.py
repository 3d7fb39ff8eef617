"""The confidence label in sweep results, the HTML report and `recommend`, and the ranking rule: an
uncalibrated chip that scores best is never ranked first silently."""

import json

import pyarrow.parquet as pq
import pytest

from jalapeno.cli import main
from jalapeno.hardware import get_chip
from jalapeno.report.html import write_report
from jalapeno.report.recommend import confidence_warnings, rank, recommend
from jalapeno.report.spec import parse_sweep
from jalapeno.report.sweep import run_spec
from jalapeno.testing import report_fakes


def test_sweep_parquet_and_report_carry_the_confidence(tmp_path):
    spec = parse_sweep("""\
name: confidence-test
models: [llama-3.1-8b]
hardware: [h100, h200, tpu-v6e]
max_chips: 2
workloads: [{isl: 1024, osl: 64}]
concurrencies: [1, 8]
""")[0]
    run_spec(spec, tmp_path, point_fn=report_fakes.fake_point, workers=1, progress=False)
    t = pq.read_table(tmp_path / "results.parquet").to_pylist()
    by_hw = {}
    for r in t:
        by_hw.setdefault(r["hardware"], set()).add((r["confidence"], r["confidence_status"]))
    assert by_hw["h200"] == {(get_chip("h200").calibration.label(), "calibrated")}
    assert by_hw["h100"] == {("transferred from h200", "transferred")}  # skipped (does not fit) rows too
    assert by_hw["tpu-v6e"] == {("uncalibrated", "uncalibrated")}
    assert any(r["status"] == "skipped" for r in t if r["hardware"] == "h100")
    page = write_report(tmp_path).read_text()
    assert '<th class="">confidence</th>' in page and "transferred from h200" in page
    assert "tpu-v6e is <b>uncalibrated</b>" in page


def _row(hw, e2el, status):
    return {"hardware": hw, "tp": 1, "concurrency": 1, "status": "ok", "p90_ttft_ms": 10, "p90_tpot_ms": 5,
            "median_e2el_ms": e2el, "confidence": status, "confidence_status": status}


def test_an_uncalibrated_winner_is_ranked_after_the_trusted_chips_with_a_warning():
    rows = [_row("fast", 100, "uncalibrated"), _row("ok", 300, "transferred"), _row("best-known", 200, "calibrated")]
    ranked, _ = rank(rows, 1000, 20, "latency")  # default trust: transferred
    assert [c.hardware for c in ranked] == ["best-known", "ok", "fast"]
    assert not ranked[2].trusted and ranked[2].reason.startswith("ranked after the chips that meet --trust transferred")
    (w,) = confidence_warnings(ranked, "transferred", "latency")
    assert w.startswith("fast tp1 scores best (100 ms median E2E vs 200 ms median E2E) but is uncalibrated")
    # --trust calibrated: the transferred chip drops below the calibrated one, but outranks nobody it beats
    ranked, _ = rank(rows, 1000, 20, "latency", trust="calibrated")
    assert [c.hardware for c in ranked] == ["best-known", "fast", "ok"]
    # --trust any: by score alone, and the uncalibrated winner is said to be one
    ranked, _ = rank(rows, 1000, 20, "latency", trust="any")
    assert [c.hardware for c in ranked] == ["fast", "best-known", "ok"]
    assert any("runs on an uncalibrated chip" in w for w in confidence_warnings(ranked, "any", "latency"))
    # only uncalibrated chips meet the SLOs: ranked by score, and the warning says nothing checked them
    ranked, _ = rank([_row("a", 300, "uncalibrated"), _row("b", 100, "uncalibrated")], 1000, 20, "latency")
    assert [c.hardware for c in ranked] == ["b", "a"]
    assert "no candidate that meets the SLOs" in confidence_warnings(ranked, "transferred", "latency")[0]


def test_recommend_with_an_uncalibrated_chip_that_scores_best(calls):
    # fake model: tpu-v6e (uncalibrated) is 4x faster than h200 (calibrated) and gb200 (transferred) 2x
    kw = dict(isl=1024, osl=64, ttft_slo_ms=1000, tpot_slo_ms=20, hardware=["h200", "gb200", "tpu-v6e"], max_chips=1,
              objective="latency", concurrencies=(1,), point_fn=report_fakes.fake_point, workers=1)
    rec = recommend("llama-3.1-8b", **kw)
    assert [c.hardware for c in rec.ranked] == ["gb200", "h200", "tpu-v6e"]
    assert rec.warnings and "tpu-v6e tp1 scores best" in rec.warnings[0]
    d = rec.as_dict()
    assert d["trust"] == "transferred" and d["warnings"] == rec.warnings
    assert [(c["hardware"], c["confidence_status"], c["trusted"]) for c in d["ranked"]] == [
        ("gb200", "transferred", True), ("h200", "calibrated", True), ("tpu-v6e", "uncalibrated", False)]
    assert [c.hardware for c in recommend("llama-3.1-8b", trust="any", **kw).ranked][0] == "tpu-v6e"
    with pytest.raises(Exception, match="--trust"):
        recommend("llama-3.1-8b", trust="some", **kw)


def test_recommend_cli_json_has_the_labels_and_the_warning(capsys):
    # real simulations (tiny): an H200 (calibrated) against a TPU v6e (uncalibrated) on end-to-end latency
    with pytest.raises(SystemExit) as e:
        main(["recommend", "--model", "llama-3.1-8b", "--isl", "128", "--osl", "16", "--ttft-slo-ms", "2000",
              "--tpot-slo-ms", "50", "--hardware", "h200,tpu-v6e", "--max-chips", "1", "--objective", "latency",
              "--workers", "1", "--json"])
        raise SystemExit(0)
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    d = json.loads(out.out)
    conf = {c["hardware"]: (c["confidence"], c["trusted"]) for c in d["ranked"] + d["losers"]}
    assert conf["h200"] == (get_chip("h200").calibration.label(), True)
    assert conf["tpu-v6e"] == ("uncalibrated", False)
    assert d["ranked"][0]["hardware"] == "h200"
    tpu = next(c for c in d["ranked"] if c["hardware"] == "tpu-v6e")
    if tpu["median_e2el_ms"] < d["ranked"][0]["median_e2el_ms"]:  # it scores better: it must be said
        assert any("tpu-v6e tp1 scores best" in w for w in d["warnings"])
