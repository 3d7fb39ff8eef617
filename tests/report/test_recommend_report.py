"""recommend ranks and explains losers; the HTML report holds the table and embedded PNGs."""

import base64
import re

import pytest

from jalapeno.testing import report_fakes
from jalapeno.errors import ConfigError, UnknownNameError
from jalapeno.fmt import num
from jalapeno.report.html import write_report
from jalapeno.report.recommend import PRESETS, rank, recommend
from jalapeno.report.spec import parse_sweep
from jalapeno.report.sweep import run_spec


def test_recommend_ranks_by_cost_and_explains_each_loser(calls):
    # fake model: TPOT = (5 + conc/tp) ms / speed (b200 speed 2); h100 tp1 does not fit
    rec = recommend(
        "llama-3.1-8b", isl=1024, osl=64, ttft_slo_ms=1000, tpot_slo_ms=5.5, hardware=["h100", "h200", "b200"],
        max_chips=2, objective="cost", concurrencies=(1, 4, 16), point_fn=report_fakes.fake_point, workers=1,
    )
    ranked = {(c.hardware, c.layout): c for c in rec.ranked}
    losers = {(c.hardware, c.layout): c for c in rec.losers}
    # h200: tp1 at conc 1 gives 6 ms > 5.5 (miss); tp2 conc 1 gives 5.5 ms (meets). b200 meets everywhere.
    assert rec.best.hardware == "b200"
    assert "did not fit" in losers[("h100", "tp1")].reason and "80 GB" in losers[("h100", "tp1")].reason
    assert losers[("h200", "tp1")].reason.startswith("missed TPOT by 0.5 ms (p90 6.0 ms > 5.5 ms)")
    assert ("h200", "tp2") in ranked and ranked[("h200", "tp2")].concurrency == 1
    # every ranked candidate after the first says how much more it costs than the winner
    for c in rec.ranked[1:]:
        assert c.reason.startswith("cost more: $") and f"vs ${num(rec.best.usd_per_mtok)}/Mtok" in c.reason
    costs = [c.usd_per_mtok for c in rec.ranked]
    assert costs == sorted(costs)
    # a layout that did not fit at the lowest concurrency is not retried at higher ones
    assert not any(p["hardware"] == "h100" and p["tp"] == 1 and p["concurrency"] > 1 for p in calls)
    d = rec.as_dict()
    assert d["ranked"][0]["hardware"] == "b200" and d["losers"]


def test_rank_latency_objective_and_presets():
    rows = [
        {"hardware": "a", "tp": 1, "concurrency": 1, "status": "ok", "p90_ttft_ms": 100, "p90_tpot_ms": 10, "median_e2el_ms": 900},
        {"hardware": "b", "tp": 1, "concurrency": 1, "status": "ok", "p90_ttft_ms": 50, "p90_tpot_ms": 8, "median_e2el_ms": 600},
        {"hardware": "c", "tp": 1, "concurrency": 1, "status": "ok", "p90_ttft_ms": 1500, "p90_tpot_ms": 8, "median_e2el_ms": 2000},
    ]
    ranked, losers = rank(rows, ttft_ms=1000, tpot_ms=20, objective="latency")
    assert [c.hardware for c in ranked] == ["b", "a"]
    assert ranked[1].reason == "slower: 900 ms median E2E vs 600 ms median E2E (b tp1)"
    assert losers[0].reason.startswith("missed TTFT by 500 ms")
    assert PRESETS["interactive-agent"].isl == 8192 and PRESETS["batch-throughput"].objective == "cost"
    assert PRESETS["long-context-128k"].isl == 131072


def test_recommend_bad_input():
    with pytest.raises(ConfigError, match="--tpot-slo-ms"):
        recommend("llama-3.1-8b", isl=1, osl=1, ttft_slo_ms=1, point_fn=report_fakes.fake_point)
    with pytest.raises(UnknownNameError, match="preset"):
        recommend("llama-3.1-8b", preset="nope", point_fn=report_fakes.fake_point)
    with pytest.raises(UnknownNameError, match="objective"):
        recommend("llama-3.1-8b", preset="batch-throughput", objective="fast", point_fn=report_fakes.fake_point)


def test_report_html_has_table_plots_cards_and_assumptions(tmp_path):
    spec = parse_sweep("""\
name: report-test
models: [llama-3.1-8b]
hardware: [h100, b200]
max_chips: 2
workloads: [{isl: 1024, osl: 64}]
concurrencies: [1, 8, 32]
""")[0]
    run_spec(spec, tmp_path, point_fn=report_fakes.fake_point, workers=1, progress=False, prices={"b200": 4.0}, pue=1.3)
    out = write_report(tmp_path)
    page = out.read_text()
    assert page.startswith("<!doctype html>") and "</html>" in page
    assert "<h2>Summary</h2>" in page and "<td class=\"\">b200</td>" in page
    pngs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(pngs) == 1 and base64.b64decode(pngs[0])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "PUE <b>1.3</b>" in page and "price overridden: $4/chip-hour" in page
    assert "H100 SXM" in page or "H100" in page  # chip card from the catalogue
    assert "not fit" in page or "80 GB" in page  # skipped point with its reason
    # self-contained: no scripts, no stylesheets to fetch, every embedded resource is a data: URI
    assert "<script" not in page and "<link" not in page
    assert all(src.startswith("data:") for src in re.findall(r'src="([^"]*)"', page))


def test_recommend_passes_the_framework_profile_to_every_point(calls):
    recommend("llama-3.1-8b", isl=512, osl=64, ttft_slo_ms=1000, tpot_slo_ms=50, hardware=["h200"], max_chips=1,
              concurrencies=(1, 4), point_fn=report_fakes.fake_point, workers=1, framework="TRT")
    assert calls and all(p["framework"] == "trt-llm" for p in calls)
    with pytest.raises(ConfigError, match="unknown serving framework 'tgi'"):
        recommend("llama-3.1-8b", isl=512, osl=64, ttft_slo_ms=1000, tpot_slo_ms=50, hardware=["h200"],
                  point_fn=report_fakes.fake_point, workers=1, framework="tgi")
