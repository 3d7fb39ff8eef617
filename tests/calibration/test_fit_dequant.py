"""A fit recovers ``efficiency.weight_dequant_ps_per_byte`` (issue #13 step 8) from points the simulator generated
with it: GPT-OSS-20B (MXFP4 experts, dequantized on H100) beside Qwen3-30B-A3B (bf16: no such cost), so the term
and the per-step cost are separable."""

from __future__ import annotations

import pytest

from jalapeno.calibration.fit import apply_params, dedupe, fit, prepare
from jalapeno.calibration.inputs import read_measurements
from jalapeno.calibration.predict import efficiency_of

from test_fit import synthetic_rows, write_csv

#: 0.6 ps per byte = 1.7 TB/s of MXFP4 bytes: below H100's HBM rate, so the expert GEMMs are dequantization-bound
TRUE = {"weight_dequant_ps_per_byte": 0.6, "step_overhead_us": 300.0}


def test_gauss_newton_recovers_the_dequantization_term(tmp_path):
    items = dedupe(prepare(read_measurements(write_csv(tmp_path / "syn.csv", synthetic_rows(TRUE)))).items)
    # the term is a max() with the memory time: it has a gradient only where it binds, so start where it does
    # (1.2 ps per byte) and far from the truth
    start = apply_params(efficiency_of("h100"), {"weight_dequant_ps_per_byte": 1.2, "step_overhead_us": 50.0})
    rep = fit(items, [], "h100", list(TRUE), base=start, workers=1, search_prompts=2, final_prompts=2)
    for k, v in TRUE.items():
        assert rep.start[k] != pytest.approx(v, rel=0.3)
        assert rep.fitted[k] == pytest.approx(v, rel=0.03), k
    assert rep.tables["after fit"]["median_tpot"].median_abs < 0.5
