"""The Jalapeño study's statistics and its chip variants (jalapeno.study, benchmarks/jalapeno_study.py,
docs/jalapeno-study.md)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
YAML = ROOT / "src" / "jalapeno" / "hardware" / "chips" / "jalapeno.yaml"


@pytest.fixture(scope="module")
def js():
    """The study's library (``jalapeno.study``) under one namespace."""
    from jalapeno.study import design, points, stats

    return SimpleNamespace(**{k: v for m in (design, points, stats) for k, v in vars(m).items()
                              if not k.startswith("__")})


def test_the_script_is_a_thin_caller_of_the_package():
    spec = importlib.util.spec_from_file_location("jalapeno_study", ROOT / "benchmarks" / "jalapeno_study.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    from jalapeno.study.points import simulate
    from jalapeno.study.stats import front

    assert mod.front is front and mod.run_tasks.__module__ == simulate.__module__
    assert callable(mod.main)


def _pt(inter, tput, c=4, e2e=1.0, tpj=1.0, chips=1):
    return dict(inter=inter, tput=tput, concurrency=c, e2e_s=e2e, tpj=tpj, chips=chips)


def test_front_keeps_only_undominated_points(js):
    pts = [_pt(10, 100), _pt(20, 80), _pt(15, 70), _pt(40, 30), _pt(5, 90)]
    # (15, 70) is dominated by (20, 80); (5, 90) by (10, 100)
    assert js.front(pts) == [(10, 100), (20, 80), (40, 30)]


def test_tput_at_interpolates_log_log_and_refuses_unreached_targets(js):
    fr = [(10.0, 100.0), (40.0, 25.0)]
    # on a log-log straight line y = 1000 / x: at x = 20, y = 50
    assert js.tput_at(fr, 20.0) == pytest.approx(50.0)
    assert js.tput_at(fr, 5.0) == 100.0  # below the least interactive point: the best throughput
    assert math.isnan(js.tput_at(fr, 41.0))


def test_ratios_follow_the_documented_definitions(js):
    base = [_pt(100, 1000, c=4, e2e=6.0, tpj=2.0), _pt(50, 3000, c=64, e2e=12.0, tpj=5.0)]
    jal = [_pt(200, 2000, c=4, e2e=2.0, tpj=4.0), _pt(100, 6000, c=64, e2e=3.0, tpj=9.0, chips=16)]
    r = js.ratios(jal, base, (4, 64))
    assert r["tokens_per_w"] == pytest.approx(9.0 / 5.0)  # best tokens/J vs best tokens/J
    assert r["e2e_by_c"] == {4: pytest.approx(3.0), 64: pytest.approx(4.0)}
    # target 0.8 x 100 = 80 tok/s/user: baseline front between (50, 3000) and (100, 1000); Jalapeño's best
    # point reaching 80 is (100, 6000), preceded on its front by (200, 2000) -> its front is flat at 6000 up to 100
    b80 = math.exp(math.log(3000) + (math.log(80) - math.log(50)) / (math.log(100) - math.log(50))
                   * (math.log(1000) - math.log(3000)))
    assert r["interactive_by_f"][0.8] == pytest.approx(6000 / b80)
    small = js.ratios(jal, base, (4, 64), max_chips=8)  # the 16-chip point is left out
    assert small["tokens_per_w"] == pytest.approx(4.0 / 5.0)
    assert math.isnan(small["e2e_by_c"][64])


def test_chip_variant_reproduces_the_catalogue_energy_rule(js):
    """jalapeno_chip(params of the YAML) must give back the YAML's own energy block (the catalogue rule:
    pJ/FLOP = 0.8 (TDP - 0.2 TDP) / peak, pJ/B HBM = 0.45 TDP / BW, SRAM byte = 1/10)."""
    raw = yaml.safe_load(YAML.read_text())
    from jalapeno.hardware import get_chip

    chip = js.jalapeno_chip(js.params_from_chip(get_chip("jalapeno")))
    for d, v in raw["energy"]["pj_per_flop"].items():
        assert chip.energy.pj_per_flop[d] == pytest.approx(v, rel=1e-3)
    for lv, v in raw["energy"]["pj_per_byte"].items():
        assert chip.energy.pj_per_byte[lv] == pytest.approx(v, rel=1e-3)
    fp8 = float(raw["compute_tflops"]["fp8"]["value"])
    assert raw["energy"]["pj_per_flop"]["fp8"] == pytest.approx(0.8 * 0.8 * 700 / (fp8 * 1e12) * 1e12, rel=1e-3)


def test_fitted_yaml_values_are_sourced_inferred_facts():
    raw = yaml.safe_load(YAML.read_text())
    sram = next(m for m in raw["memory"] if m["name"] == "sram")
    hbm = next(m for m in raw["memory"] if m["name"] == "hbm")
    for fact in (sram["capacity_gb"], sram["bandwidth_tbps"], hbm["bandwidth_tbps"], raw["compute_tflops"]["fp8"]):
        assert fact["status"] == "inferred"
        assert "jalapeno-study" in fact["source"]
    assert raw["compute_tflops"]["fp4"]["value"] == 2 * raw["compute_tflops"]["fp8"]["value"]
    assert raw["power"]["loaded_w"]["value"] <= 550


def test_one_point_simulates_and_stays_under_the_measured_power(js):
    from jalapeno.hardware import get_chip

    chip = get_chip("jalapeno")
    p = js.simulate(js.Task("gpt-oss-120b", chip, "jalapeno", js.Layout(64), 1024, 128, 4, 4))  # chip pins
    assert p is not None and p["chips"] == 64 and p["tput"] > 0
    # GPT-OSS-120B (~61 GB as released, MXFP4 experts) over 64 chips: ~1 GB per chip, all of it in SRAM
    assert 0.85 < p["sram_gb"] <= float(chip.sram.capacity_gb)
    assert p["watts"] <= js.LOADED_W_MAX
    assert js.simulate(js.Task("deepseek-r1", chip, "jalapeno", js.Layout(1), 1024, 128, 4, 4)) is None  # no fit


def test_sram_pinning_defaults_to_the_chips_pin_weights_and_can_be_overridden():
    """CostModel(sram_pinning=None) follows the resident SRAM level's pin_weights (true for Jalapeño); an
    explicit False gives the all-or-nothing rule back; GPUs (no resident SRAM) never pin."""
    from jalapeno.hardware import get_chip
    from jalapeno.models import load_model
    from jalapeno.perf import CostModel, Parallelism, Precision

    arch, lay = load_model("deepseek-r1"), Parallelism(tp=16, ep=16)
    jal = get_chip("jalapeno")
    assert jal.sram is not None and jal.sram.pin_weights
    default = CostModel(arch, jal, lay, Precision(weights="fp4", kv="fp8"))
    off = CostModel(arch, jal, lay, Precision(weights="fp4", kv="fp8"), sram_pinning=False)
    assert default.sram_pinning and not off.sram_pinning
    sram_cap = float(jal.sram.capacity_gb) * 1e9
    # DeepSeek-R1 (~340 GB at MXFP4 experts) cannot live in 16 chips' SRAM: pinning puts some, never all, there
    assert not default.weights_in_sram and 0 < default.sram_weight_bytes_per_chip <= sram_cap
    assert off.sram_weight_bytes_per_chip == 0
    gpu = CostModel(load_model("gpt-oss-120b"), get_chip("gb300"), Parallelism(tp=8), Precision(kv="fp8"))
    assert not gpu.sram_pinning and gpu.sram_weight_bytes_per_chip == 0
