"""The eager-prefill host floor in the fit (issue #13 step 12b): its linearised gradient against re-simulation,
the device terms' gradient on host-bound prefill steps (0: the floor hides them), and ``fit_terms.py``'s
``prefill_host.<stack>`` parameter (one stack's entry; not carried by a cross-vendor transfer)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jalapeno.calibration.fit import apply_params
from jalapeno.calibration.linearise import linearise
from jalapeno.calibration.predict import efficiency_of, simulate, transfer_params

from test_gauss_newton import _spec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fit_terms  # noqa: E402

BOUNDS = {"prefill_host_kernel_us": (0.0, 5000.0), "prefill_layer_overhead_us": (0.0, 2000.0)}


def test_linearised_ttft_follows_the_host_floor_and_ignores_the_hidden_device_terms():
    spec = _spec(isl=1024, osl=64, conc=2)
    base = apply_params(efficiency_of("h100"), {"prefill_host_kernel_us": 200.0})  # x GPT-OSS-20B's kernels
    names = list(BOUNDS)
    lin = linearise(spec, base, names, [BOUNDS[n] for n in names], {}, 2)
    assert lin.error is None
    # the host term: every prefill step is host-bound, so TTFT moves with it one to one per prefill
    up = simulate(spec, apply_params(base, {"prefill_host_kernel_us": 220.0}), prompts_per_concurrency=2)
    true_rel = up["median_ttft"] / lin.values["median_ttft"] - 1
    assert true_rel > 0.02
    assert lin.predict([20.0, 0.0])["median_ttft"] / lin.values["median_ttft"] - 1 == pytest.approx(
        true_rel, abs=0.1 * true_rel)
    # a device term under the floor: re-simulation does not move, nor does the surrogate
    dev = simulate(spec, apply_params(base, {"prefill_layer_overhead_us": 50.0}), prompts_per_concurrency=2)
    assert dev["median_ttft"] == pytest.approx(lin.values["median_ttft"], rel=1e-9)
    assert lin.predict([0.0, 50.0])["median_ttft"] == pytest.approx(lin.values["median_ttft"], rel=1e-9)


def test_the_script_parameter_sets_one_stacks_entry_and_a_transfer_leaves_it():
    b200 = efficiency_of("b200")
    eff = fit_terms.efficiency_with(b200, {"prefill_host.sglang": 70.0, "fw.sglang": 8.7})
    assert eff.framework_prefill_host_kernel_us == {**b200.framework_prefill_host_kernel_us, "sglang": 70.0}
    assert eff.prefill_host_kernel_us == b200.prefill_host_kernel_us  # resolved per point, by its stack
    assert fit_terms._lib_name("prefill_host.sglang") == "prefill_host_kernel_us"
    # a per-stack kernel-path term (as ``framework_fp8_moe_layer_us``): it stays with its chip family
    assert not [k for k in transfer_params("b200") if k.startswith(("prefill_host", "fp8moe"))]
