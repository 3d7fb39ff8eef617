"""What a cross-vendor transfer moves (issue #13, step 3): a chip's fitted overhead terms and front ends, never
its chip facts (``kernel_launch_us``) or roofline fractions."""

from __future__ import annotations

import pytest

from jalapeno.calibration.predict import TRANSFER_FIELDS, efficiency_of, transfer_params
from jalapeno.hardware.schema import Efficiency, Fact
from jalapeno.perf import CostModel, Parallelism, Precision, StepShape


def test_only_fitted_fields_and_front_ends_move():
    b200 = efficiency_of("b200")
    got = transfer_params("b200")
    # B200's request_overhead_ms (40 ms) is the default for stacks without a profile, not fitted: it stays behind
    assert "request_overhead_ms" not in b200.fitted and "request_overhead_ms" not in got
    assert got["kernel_overhead_us"] == b200.kernel_overhead_us and "kernel_overhead_us" in b200.fitted
    # the per-layer pair always moves (a per-kernel fit zeroes them; the target's would count twice)
    assert got["layer_overhead_us"] == 0.0 and got["moe_layer_overhead_us"] == 0.0
    assert {k[3:]: v for k, v in got.items() if k.startswith("fw.")} == b200.framework_overhead_ms
    assert set(k for k in got if not k.startswith("fw.")) <= set(TRANSFER_FIELDS)
    # no roofline fraction or chip fact
    assert not {"compute", "memory", "kernel_launch_us", "scale_up"} & set(got)
    mi = transfer_params("mi355x")  # MI355X fitted its ATOM front end (request_overhead_ms)
    mi_eff = efficiency_of("mi355x")
    assert mi["request_overhead_ms"] == mi_eff.request_overhead_ms and "request_overhead_ms" in mi_eff.fitted
    assert mi["fw.sglang"] == mi_eff.framework_overhead_ms["sglang"] and "framework_overhead_ms@sglang" in mi_eff.fitted
    # the PDL share moves with the per-kernel cost: B200's fitted one, and MI355X's 0 (no PDL-launched rows), so
    # B200's own share never stays behind under MI355X's per-kernel cost
    assert got["pdl_kernel_fraction"] == b200.pdl_kernel_fraction > 0 and "pdl_kernel_fraction" in b200.fitted
    assert mi["pdl_kernel_fraction"] == 0.0


def test_transferred_values_keep_the_target_chips_launch_gap():
    from jalapeno.hardware.catalog import get_chip
    from jalapeno.models.catalog import load_model

    src = {k: v for k, v in transfer_params("mi355x").items() if not k.startswith("fw.")}
    target = get_chip("b200")
    eff = target.efficiency.model_copy(update=src)
    gap = target.model_copy(update={"kernel_launch_us": Fact(value=0.5, status="inferred", source="test")})
    m = load_model("gpt-oss-120b")
    shape = StepShape.from_lists(decode_ctx=[1000] * 4)
    a = CostModel(m, target, Parallelism(), Precision("native"), efficiency=eff)
    b = CostModel(m, gap, Parallelism(), Precision("native"), efficiency=eff)
    assert isinstance(eff, Efficiency) and eff.kernel_overhead_us == src["kernel_overhead_us"]
    assert b.step(shape).time_s - a.step(shape).time_s == pytest.approx(a.kernels * 0.5e-6, rel=1e-9)


def test_a_transfer_keeps_the_target_chips_pdl_saving():
    """MI355X's values on B200 (a clean leave-one-vendor-out transfer) move a PDL share of 0 but leave B200's own
    PDL saving, a sourced chip fact: a PDL-launched GPT-OSS step (TP2: 507 kernels) is cheaper than the same step
    launched without PDL by exactly kernels x the fact, and by nothing on a chip that states none."""
    from jalapeno.hardware.catalog import get_chip
    from jalapeno.models.catalog import load_model

    src = {k: v for k, v in transfer_params("mi355x").items() if not k.startswith("fw.")}
    assert src["pdl_kernel_fraction"] == 0.0 and "pdl_kernel_saving_us" not in src
    target = get_chip("b200")
    assert target.pdl_kernel_saving_us.status != "fitted" and target.pdl_saving_us > 0
    eff = target.efficiency.model_copy(update=src)
    m = load_model("gpt-oss-120b")
    shape = StepShape.from_lists(decode_ctx=[1000] * 4)
    plain = CostModel(m, target, Parallelism(tp=2), Precision("native"), efficiency=eff)
    pdl = CostModel(m, target, Parallelism(tp=2), Precision("native"), efficiency=eff.model_copy(update={"launch_pdl": True}))
    assert plain.kernels == 507
    assert plain.step(shape).time_s - pdl.step(shape).time_s == pytest.approx(507 * target.pdl_saving_us * 1e-6, rel=1e-9)
    none = target.model_copy(update={"pdl_kernel_saving_us": None})
    a = CostModel(m, none, Parallelism(tp=2), Precision("native"), efficiency=eff)
    b = CostModel(m, none, Parallelism(tp=2), Precision("native"), efficiency=eff.model_copy(update={"launch_pdl": True}))
    assert a.step(shape).time_s == b.step(shape).time_s
