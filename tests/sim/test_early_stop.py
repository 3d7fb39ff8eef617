"""The opt-in statistical early stop: it stops only when its confidence intervals are tight, reports that it did,
stays off by default, and on a small study grid gives the same rankings and Pareto fronts as exact runs."""

import pytest

from jalapeno.errors import ConfigError
from jalapeno.report.grid import expand
from jalapeno.report.pareto import fronts_by_group
from jalapeno.report.pool import execute, run_point
from jalapeno.report.spec import SweepSpec
from jalapeno.sim.early_stop import EarlyStop
from jalapeno.sim.scenario import Scenario, run_scenario

BASE = dict(model="llama-3.1-8b", hardware="b200", isl=256, osl=128, concurrency=256)


def test_default_is_exact_and_reports_nothing():
    m = run_scenario(Scenario(**BASE, num_prompts=600))
    assert "early_stop" not in m and m["completed"] == 600


def test_stops_early_and_reports_its_intervals():
    exact = run_scenario(Scenario(**BASE))
    m = run_scenario(Scenario(**BASE, early_stop=0.2))
    es = m["early_stop"]
    assert es["stopped_early"] and es["requests"] < es["requests_planned"] == 2560
    assert m["completed"] == 2560  # the steady state extrapolated to every planned request
    for name in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms"):
        lo, hi = es[f"{name}_ci95_lo"], es[f"{name}_ci95_hi"]
        assert 0 < lo <= hi and (hi - lo) / 2 <= 0.2 * (hi + lo) / 2  # the stated tolerance held at the stop
    for key in ("median_tpot_ms", "median_ttft_ms", "output_throughput"):
        assert m[key] == pytest.approx(exact[key], rel=0.05)


def test_a_tolerance_never_met_runs_every_request():
    exact = run_scenario(Scenario(**BASE, num_prompts=1500))
    m = run_scenario(Scenario(**BASE, num_prompts=1500, early_stop=1e-9))
    assert not m["early_stop"]["stopped_early"]
    assert {k: v for k, v in m.items() if k != "early_stop"} == exact  # exactly the exact run


def test_bad_tolerance_is_a_user_error():
    with pytest.raises(ConfigError):
        EarlyStop(1.5)


def test_study_grid_rankings_and_fronts_equal_exact():
    grid = dict(models=["llama-3.1-8b"], hardware=["h200", "b200"], parallelism=[{"tp": 1}, {"tp": 2}],
                workloads=[{"isl": 256, "osl": 128}], concurrencies=[128, 256, 512])

    def rows(**extra):
        return [execute(run_point, p) for p in expand(SweepSpec(**grid, **extra))]

    exact, fast = rows(), rows(early_stop=0.2)
    assert all(r["status"] == "ok" for r in exact + fast)
    assert sum(bool(r["early_stop_stopped_early"]) for r in fast) >= 4  # the fast mode really stopped early

    def key(r):
        return (r["hardware"], r["tp"], r["concurrency"])

    for col in ("output_throughput_per_chip", "median_interactivity"):
        assert [key(r) for r in sorted(exact, key=lambda r: -r[col])] == \
               [key(r) for r in sorted(fast, key=lambda r: -r[col])], col
    for y in ("output_throughput_per_chip", "usd_per_mtok"):
        if y not in exact[0]:
            continue
        fe = fronts_by_group(exact, y, group_by=("model",))
        ff = fronts_by_group(fast, y, group_by=("model",))
        assert {k: [key(r) for r in v] for k, v in fe.items()} == {k: [key(r) for r in v] for k, v in ff.items()}
