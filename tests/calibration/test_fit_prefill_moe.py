"""``benchmarks/fit_terms.py``: the measured prefill MoE op (``efficiency.prefill_moe``) is a chip fact: a transfer of
fitted values leaves it with its chip, and a trial may only drop an entry (``prefill_moe.<format>: 0``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from jalapeno.calibration.predict import transfer_params
from jalapeno.hardware.schema import Efficiency, PrefillMoeKernel

ROOT = Path(__file__).resolve().parents[2]


def _fit_terms():
    spec = importlib.util.spec_from_file_location("fit_terms", ROOT / "benchmarks" / "fit_terms.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_trial_drops_one_format_and_keeps_the_others_and_the_fitted_terms():
    ft = _fit_terms()
    base = Efficiency(prefill_layer_overhead_us=70.0,
                      prefill_moe={"fp8": PrefillMoeKernel(expert_us=3.5), "mxfp4": PrefillMoeKernel(layer_us=130.0)})
    got = ft.efficiency_with(base, {"prefill_moe.mxfp4": 0, "prefill_layer_overhead_us": 500.0})
    assert set(got.prefill_moe) == {"fp8"} and got.prefill_moe["fp8"].expert_us == 3.5
    assert got.prefill_layer_overhead_us == 500.0 and set(base.prefill_moe) == {"fp8", "mxfp4"}
    with pytest.raises(SystemExit):  # its values are measured, not a fit's: no other value is accepted
        ft.efficiency_with(base, {"prefill_moe.fp8": 2.0})


def test_a_transfer_never_carries_the_measured_moe_op():
    for chip in ("b200", "h200", "mi355x"):
        assert not any(k.startswith("prefill_moe") for k in transfer_params(chip))
