"""`jalapeno roofline` on a private Typer app, with model/chip lookups pointed at the test fixtures."""

from __future__ import annotations

import json

import pytest
import typer
from perf_refdata import DEEPSEEK_R1, H200, LLAMA_8B
from typer.testing import CliRunner

import jalapeno.hardware as hw
import jalapeno.models as models
from jalapeno.perf import CostModel, Parallelism, Precision, StepShape
from jalapeno.perf.commands import register


@pytest.fixture()
def app(monkeypatch):
    known = {"llama-3.1-8b": LLAMA_8B, "deepseek-r1": DEEPSEEK_R1}
    monkeypatch.setattr(models, "load_model", lambda name: known[name], raising=False)
    monkeypatch.setattr(hw, "get_chip", lambda name, dirs=None: H200, raising=False)
    a = typer.Typer()
    register(a)

    @a.callback()
    def _root() -> None:  # keep "roofline" as a sub-command
        pass

    return a


def test_roofline_json_matches_the_cost_model(app):
    res = CliRunner().invoke(app, ["roofline", "--model", "llama-3.1-8b", "--hardware", "h200", "--batch", "4",
                                   "--context", "1000", "--weight-dtype", "bf16", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    cm = CostModel(LLAMA_8B, H200, Parallelism(), Precision("bf16"))
    ref = cm.breakdown(StepShape.from_lists(decode_ctx=[1000] * 4))
    assert out["step_time_s"] == pytest.approx(ref.time_s)
    assert out["flops"] == pytest.approx(ref.flops)
    assert out["arithmetic_intensity"] == pytest.approx(ref.arithmetic_intensity)
    assert out["tokens_per_s"] == pytest.approx(4 / ref.time_s)
    names = [o["name"] for o in out["ops"]]
    assert {"qkv_proj", "attention", "mlp", "lm_head"} <= set(names)
    assert all(o["bound"] in ("compute", "memory", "network", "overhead") for o in out["ops"])
    for key in ("energy_j", "avg_power_w", "joules_per_token", "bytes"):
        assert out[key] > 0


def test_roofline_table_prefill_and_plot(app, tmp_path):
    png = tmp_path / "roof.png"
    res = CliRunner().invoke(app, ["roofline", "--model", "deepseek-r1", "--hardware", "h200", "--tp", "8", "--ep", "8",
                                   "--dp-attention", "--phase", "prefill", "--batch", "2", "--context", "2048",
                                   "--plot", str(png)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "moe_experts" in res.output and "step_time_s" in res.output
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "args,msg", [(["--phase", "train"], "phase"), (["--tp", "3"], "num_heads"), (["--batch", "0"], "batch")]
)
def test_roofline_bad_input_is_a_user_error(app, args, msg):
    from jalapeno.errors import JalapenoError

    res = CliRunner().invoke(app, ["roofline", "--model", "llama-3.1-8b", "--hardware", "h200", *args])
    assert res.exit_code != 0
    assert isinstance(res.exception, JalapenoError) and msg in str(res.exception)


@pytest.mark.parametrize("phase, extra", [("decode", ["--batch", "1"]), ("prefill", ["--batch", "4", "--tp", "8"])])
def test_roofline_table_fits_80_columns_without_exponents(app, phase, extra):
    import re

    model = "llama-3.1-8b" if phase == "decode" else "deepseek-r1"
    res = CliRunner().invoke(app, ["roofline", "--model", model, "--hardware", "h200", "--phase", phase,
                                   "--context", "1024", *extra], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80
    assert not re.search(r"\d[eE][+-]?\d", res.output)  # no 1.2e-05 in a human table
    assert "step_time_s" in res.output and "attention" in res.output


def test_num_has_no_exponent():
    from jalapeno.perf.commands import _num, _si, _time

    assert _num(0.0068283) == "0.00683" and _num(1234567.0) == "1,234,567" and _num(999.96) == "1,000"
    assert _num(3.2e-9) == "<0.000001" and _si(1.5e12, "B") == "1.50 TB" and _time(4.2e-9) == "0.00420 µs"
