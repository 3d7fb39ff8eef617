"""The converging fit: linearised simulations (`calibration.linearise`) and the Gauss-Newton loop over them
(`calibration.gauss_newton`). The reference is the simulator itself: gradients against re-simulation with the
parameter moved, recovery of parameters the points were generated with."""

from __future__ import annotations

import pytest

from jalapeno.calibration.fit import apply_params, dedupe, fit, param, prepare
from jalapeno.calibration.inputs import read_measurements
from jalapeno.calibration.linearise import linearise
from jalapeno.calibration.points import group_points, to_sim_spec
from jalapeno.calibration.predict import efficiency_of, simulate

from test_fit import _row, synthetic_rows, write_csv

TRUE4 = {"step_overhead_us": 300.0, "layer_overhead_us": 90.0, "seq_overhead_us": 30.0,
         "prefill_layer_overhead_us": 400.0}


def _spec(model="gpt-oss-20b", isl=1024, osl=64, conc=16):
    return to_sim_spec(group_points([_row(0, model, isl, osl, conc, "median_tpot", 1.0, "s")])[0])


DECODE = ("median_tpot", "output_tput_per_gpu")


@pytest.mark.parametrize("name,step,metrics", [
    ("seq_overhead_us", 20.0, DECODE), ("moe_layer_overhead_us", 30.0, DECODE), ("compute.bf16", -0.1, DECODE),
    # a prefill term moves the schedule more (how prefills interleave with decodes): TTFT and throughput are
    # linear in it, median TPOT only roughly (the Gauss-Newton loop re-simulates for that)
    ("prefill_layer_overhead_us", 200.0, ("median_ttft", "output_tput_per_gpu"))])
def test_linearised_metrics_follow_a_resimulation(name, step, metrics):
    spec = _spec()
    base = efficiency_of("h100")
    p = param(name, base)
    lin = linearise(spec, base, [name], [(p.lower, p.upper)], {}, 2)
    assert lin.error is None
    v0 = base.compute.get("bf16", base.compute_default) if "." in name else getattr(base, name)
    moved = simulate(spec, apply_params(base, {name: v0 + step}), prompts_per_concurrency=2)
    sur = lin.predict([step])
    for m in metrics:
        true_rel = moved[m] / lin.values[m] - 1
        assert abs(true_rel) > 0.005, (m, true_rel)  # the parameter matters for this metric
        assert sur[m] / lin.values[m] - 1 == pytest.approx(true_rel, abs=0.1 * abs(true_rel) + 0.002)


def test_gauss_newton_recovers_four_terms_and_converges(tmp_path):
    items = dedupe(prepare(read_measurements(write_csv(tmp_path / "syn.csv", synthetic_rows(TRUE4)))).items)
    rep = fit(items, [], "h100", list(TRUE4), workers=1, search_prompts=2, final_prompts=2)
    assert rep.converged and len(rep.iterations) <= 4
    for k, v in TRUE4.items():
        assert rep.start[k] != pytest.approx(v, rel=0.2)  # it starts far away
        assert rep.fitted[k] == pytest.approx(v, rel=0.02), k
    assert rep.iterations[-1]["median_abs_log"] < 0.002 < rep.iterations[0]["median_abs_log"]
    assert rep.tables["after fit"]["median_tpot"].median_abs < 0.5


def test_gauss_newton_recovers_the_pdl_share_beside_the_per_kernel_cost(tmp_path):
    """Points generated with a per-kernel cost and a PDL share, half under TensorRT-LLM (its GPT-OSS script launches
    with PDL) and half under vLLM (no PDL): the fit separates the two from a start far from both."""
    import dataclasses

    from test_fit import CONFIGS

    from jalapeno.calibration.fit import Job, run_job
    from jalapeno.calibration.points import METRICS

    true = {"kernel_overhead_us": 5.0, "pdl_kernel_fraction": 0.35}
    eff = apply_params(efficiency_of("h100"), true)
    rows, i = [], 0
    for fw in ("trt", "vllm"):
        for model, isl, osl, conc in [c for c in CONFIGS if c[0] == "gpt-oss-20b"]:
            probe = dataclasses.replace(to_sim_spec(group_points([_row(0, model, isl, osl, conc, "median_tpot", 1.0, "s")])[0]),
                                        framework=fw)
            pred = run_job(Job(probe, eff, 2))
            assert "error" not in pred, pred
            for metric in ("median_tpot", "output_tput_per_gpu"):
                i += 1
                rows.append({**_row(i, model, isl, osl, conc, metric, pred[metric], METRICS[metric][1]),
                             "framework": fw})
    items = dedupe(prepare(read_measurements(write_csv(tmp_path / "pdl.csv", rows))).items)
    assert {s.framework for _, s in items} == {"trt", "vllm"}
    start = apply_params(efficiency_of("h100"), {"kernel_overhead_us": 2.0, "pdl_kernel_fraction": 0.05})
    rep = fit(items, [], "h100", list(true), base=start, workers=1, search_prompts=2, final_prompts=2)
    for k, v in true.items():
        assert rep.fitted[k] == pytest.approx(v, rel=0.03), (k, rep.fitted)
