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
    # 512 output tokens: at 128, H200's prefill-carrying steps (per-kernel cost, issue #13 step 7) keep the median
    # TTFT of the rounds drifting by ~20 %, so the stop rightly refuses there
    point = {**BASE, "hardware": "h200", "tp": 2, "osl": 512}
    exact = run_scenario(Scenario(**point))
    tol = 0.2
    m = run_scenario(Scenario(**point, early_stop=tol))
    es = m["early_stop"]
    assert es["stopped_early"] and es["requests"] < es["requests_planned"] == 2560
    assert m["completed"] == 2560  # the steady state extrapolated to every planned request
    for name in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms"):
        lo, hi = es[f"{name}_ci95_lo"], es[f"{name}_ci95_hi"]
        assert 0 < lo <= hi and (hi - lo) / 2 <= tol * (hi + lo) / 2  # the stated tolerance held at the stop
        assert 0 <= es[f"{name}_drift"] <= tol / 2  # and the rounds had stopped drifting
    for key in ("median_tpot_ms", "median_ttft_ms", "output_throughput"):
        assert m[key] == pytest.approx(exact[key], rel=tol)


def test_a_run_still_leaving_its_start_up_waves_does_not_stop():
    """Llama-3.1-8B on B200 at concurrency 128: per-round median TPOTs climb from ~7 to ~10 ms over the first
    five rounds. Batch means alone judged rounds 1-7 converged within 20 % and extrapolated a median TPOT 13 %
    under the exact run's; the drift between the first and second half of the rounds keeps it running."""
    exact = run_scenario(Scenario(**{**BASE, "tp": 2, "concurrency": 128}))
    m = run_scenario(Scenario(**{**BASE, "tp": 2, "concurrency": 128}, early_stop=0.2))
    assert not m["early_stop"]["stopped_early"]
    assert {k: v for k, v in m.items() if k != "early_stop"} == exact


def test_a_tolerance_never_met_runs_every_request():
    exact = run_scenario(Scenario(**BASE, num_prompts=1500))
    m = run_scenario(Scenario(**BASE, num_prompts=1500, early_stop=1e-9))
    assert not m["early_stop"]["stopped_early"]
    assert {k: v for k, v in m.items() if k != "early_stop"} == exact  # exactly the exact run


def test_bad_tolerance_is_a_user_error():
    with pytest.raises(ConfigError):
        EarlyStop(1.5)


def test_study_grid_orders_differ_from_exact_only_on_near_ties():
    grid = dict(models=["llama-3.1-8b"], hardware=["h200", "b200"], parallelism=[{"tp": 1}, {"tp": 2}],
                workloads=[{"isl": 256, "osl": 128}], concurrencies=[128, 256, 512])

    def rows(**extra):
        return [execute(run_point, p) for p in expand(SweepSpec(**grid, **extra))]

    exact, fast = rows(), rows(early_stop=0.2)
    assert all(r["status"] == "ok" for r in exact + fast)
    # the fast mode really stopped early: B200 TP1 at 512 (B200 TP1 at 128 stopped too until B200's per-kernel cost
    # went 4.72 -> 5.09 us in issue #13 step 8b, H200 TP2 at 128 until Hopper's step-8 refit: which points settle
    # within the tolerance follows the catalogue's values, the ordering checks below do not depend on it)
    assert sum(bool(r["early_stop_stopped_early"]) for r in fast) >= 1

    def key(r):
        return (r["hardware"], r["tp"], r["concurrency"])

    tol = 0.2
    for col in ("output_throughput_per_chip", "median_interactivity"):
        for e, f in zip(exact, fast):
            assert f[col] == pytest.approx(e[col], rel=tol), (key(e), col)
        # the fast mode orders two points differently only when their exact values are within its tolerance
        # (a near-tie: docs/performance.md "Statistical early stop")
        for a, b in ((a, b) for a in range(len(exact)) for b in range(len(exact)) if a < b):
            ea, eb, fa, fb = exact[a][col], exact[b][col], fast[a][col], fast[b][col]
            if (ea - eb) * (fa - fb) < 0:
                assert abs(ea - eb) <= tol * max(ea, eb), (key(exact[a]), key(exact[b]), col)
    for y in ("output_throughput_per_chip", "usd_per_mtok"):
        if y not in exact[0]:
            continue
        fe = fronts_by_group(exact, y, group_by=("model",))
        ff = fronts_by_group(fast, y, group_by=("model",))
        assert {k: [key(r) for r in v] for k, v in fe.items()} == {k: [key(r) for r in v] for k, v in ff.items()}
