"""Real sweeps through the simulator (run_point), the CLI and the report, end to end."""

import json

import duckdb
import pytest

from jalapeno.cli import main
from jalapeno.hardware import get_chip
from jalapeno.models import load_model
from jalapeno.report.recommend import recommend

def _cli(args):
    try:
        main(args)
    except SystemExit as exc:
        assert exc.code in (0, None), exc.code


SPEC = """\
name: e2e
models: [llama-3.1-8b]
hardware: [h200, jalapeno]
parallelism: [{tp: 1}, {tp: 2}, {tp: 3}]
disaggregated: [{prefill: {workers: 1, tp: 1}, decode: {workers: 1, tp: 2}}]
workloads: [{isl: 256, osl: 32}]
concurrencies: [1, 4]
num_prompts: 8
slo: {ttft_ms: 1000, tpot_ms: 50}
"""


def test_real_sweep_cli_duckdb_and_report(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "run"
    _cli(["sweep", str(spec), "--out", str(out), "--workers", "1", "-q", "--price", "jalapeno=2.0"])
    assert "16 points: 0 already done, 16 run (12 ok, 4 skipped, 0 errors)" in capsys.readouterr().out
    path = str(out / "results.parquet")
    rows = duckdb.sql(f"SELECT * FROM '{path}' WHERE status = 'ok' AND mode = 'aggregated' ORDER BY hardware, tp, concurrency").fetchall()
    cols = [d[0] for d in duckdb.sql(f"SELECT * FROM '{path}'").description]
    rows = [dict(zip(cols, r)) for r in rows]
    assert len(rows) == 8
    skipped = duckdb.sql(f"SELECT DISTINCT tp, error_kind, error FROM '{path}' WHERE status = 'skipped'").fetchall()
    assert skipped == [(3, "layout", "not divisible: 32 attention heads over tp=3")]
    arch = load_model("llama-3.1-8b")
    for r in rows:
        assert r["completed"] == 8 and r["num_chips"] == r["tp"]
        # physical bound, independent of the cost model: every decode step reads all bf16 weights once, split over
        # tp chips, at no more than the chip's peak HBM bandwidth
        hbm = get_chip(r["hardware"]).main_memory.bandwidth_tbps.value * 1e12
        bound_ms = arch.total_params() * 2 / r["tp"] / hbm * 1e3
        assert r["median_tpot_ms"] >= bound_ms * 0.95, (r["hardware"], r["tp"], r["median_tpot_ms"], bound_ms)
        assert r["output_throughput_per_chip"] == pytest.approx(r["output_throughput"] / r["tp"])
        price = 2.0 if r["hardware"] == "jalapeno" else get_chip("h200").price.usd_per_hour.value
        expect = r["tp"] * price / (r["output_throughput"] * 3600 / 1e6) / r["slo_attainment"]
        assert r["usd_per_mtok"] == pytest.approx(expect)
    dis = duckdb.sql(f"SELECT hardware, prefill_hardware, num_chips, hourly_cost_usd, output_throughput, "
                     f"output_throughput_per_chip FROM '{path}' WHERE mode = 'disaggregated'").fetchall()
    assert len(dis) == 4
    for hw, pre, chips, hourly, tps, tpc in dis:
        price = 2.0 if hw == "jalapeno" else get_chip("h200").price.usd_per_hour.value
        assert (pre, chips) == (hw, 3) and hourly == pytest.approx(3 * price)
        assert tpc == pytest.approx(tps / 2)  # InferenceX: per decode chip
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["prices"] == {"jalapeno": 2.0}
    # resume: nothing left to run
    _cli(["sweep", str(spec), "--out", str(out), "--workers", "1", "-q"])
    assert "16 already done, 0 run" in capsys.readouterr().out
    _cli(["report", str(out), "--out", str(tmp_path / "r.html")])
    page = (tmp_path / "r.html").read_text()
    assert page.count("data:image/png;base64,") == 1 and "llama-3.1-8b" in page and "not divisible" in page


def test_real_recommend_ranks_and_explains():
    rec = recommend(
        "llama-3.1-8b", isl=256, osl=32, ttft_slo_ms=2000, tpot_slo_ms=50, hardware=["h200", "jalapeno"],
        max_chips=2, concurrencies=(1, 4), objective="cost", workers=1,
    )
    assert rec.ranked and {c.hardware for c in rec.ranked} == {"h200", "jalapeno"}
    # default --trust transferred: calibrated h200 first, uncalibrated jalapeno after it, each tier by cost
    assert [c.confidence_status for c in rec.ranked] == sorted(
        (c.confidence_status for c in rec.ranked), key=lambda s: s == "uncalibrated")
    for tier in (True, False):
        costs = [c.usd_per_mtok for c in rec.ranked if c.trusted is tier]
        assert costs == sorted(costs)
    by_score = recommend(
        "llama-3.1-8b", isl=256, osl=32, ttft_slo_ms=2000, tpot_slo_ms=50, hardware=["h200", "jalapeno"],
        max_chips=2, concurrencies=(1, 4), objective="cost", workers=1, trust="any",
    )
    costs = [c.usd_per_mtok for c in by_score.ranked]
    assert costs == sorted(costs)
    assert all(c.reason.startswith("cost more") for c in by_score.ranked[1:])
    big = recommend("llama-3.1-70b", isl=256, osl=32, ttft_slo_ms=2000, tpot_slo_ms=50, hardware=["h100"],
                    max_chips=1, concurrencies=(1,), workers=1)
    assert big.best is None
    # Llama-3.1-70B has 70.6 B parameters: 141 GB in bf16, more than one 80 GB H100
    reason = big.losers[0].reason
    assert reason.startswith("did not fit:") and "141" in reason, reason
