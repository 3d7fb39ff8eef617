"""Power capping (jalapeno.hardware.power_cap): the DVFS transform against hand-computed values, and its effect
through the simulator, the CLI and sweep points."""

import json

import pytest

from jalapeno.cli import main
from jalapeno.errors import ConfigError
from jalapeno.hardware import get_chip
from jalapeno.hardware.power_cap import apply_power_cap, clock_fraction, power_at_clock


def test_clock_fraction_cubic_above_the_voltage_floor():
    # Jalapeño: 700 W rated, 140 W static; cap 550 W -> s^3 = (550-140)/(700-140) (hand count)
    s = clock_fraction(700, 140, 550)
    assert s == pytest.approx(((550 - 140) / 560) ** (1 / 3), rel=1e-12)
    assert s == pytest.approx(0.9012, abs=1e-4)
    assert power_at_clock(700, 140, s) == pytest.approx(550, rel=1e-12)
    # below the floor (s < 0.6) power falls linearly: P = static + dyn * s * 0.6^2
    s_low = clock_fraction(700, 140, 200)
    assert s_low == pytest.approx((60 / 560) / 0.36, rel=1e-12) and s_low < 0.6
    assert power_at_clock(700, 140, s_low) == pytest.approx(200, rel=1e-12)
    assert clock_fraction(700, 140, 800) == 1.0


def test_apply_power_cap_jalapeno_550w():
    chip = get_chip("jalapeno")
    capped = apply_power_cap(chip, 550)
    s = ((550 - 140) / 560) ** (1 / 3)
    assert float(capped.power.tdp_w) == 550
    assert float(capped.compute_tflops["fp8"]) == pytest.approx(float(chip.compute_tflops["fp8"]) * s, rel=1e-5)
    assert float(capped.level("sram").bandwidth_tbps) == pytest.approx(float(chip.level("sram").bandwidth_tbps) * s, rel=1e-5)
    hbm = float(chip.level("hbm").bandwidth_tbps)
    assert float(capped.level("hbm").bandwidth_tbps) == hbm  # HBM has its own clock
    assert capped.energy.pj_per_flop["fp8"] == pytest.approx(chip.energy.pj_per_flop["fp8"] * s * s, rel=1e-9)
    assert capped.energy.pj_per_byte["hbm"] == chip.energy.pj_per_byte["hbm"]
    assert capped.energy.pj_per_byte["sram"] == pytest.approx(chip.energy.pj_per_byte["sram"] * s * s, rel=1e-9)
    assert chip.power.tdp_w.value == 700  # pure: the input is unchanged
    assert apply_power_cap(chip, 700) is chip


def test_cap_under_static_power_is_one_clear_error():
    with pytest.raises(ConfigError, match=r"at or below h100's static power 140 W"):
        apply_power_cap(get_chip("h100"), 120)


def test_capped_gpu_runs_slower_and_draws_less_power():
    from jalapeno.sim.scenario import Scenario, run_scenario

    base = dict(model="llama-3.1-8b", hardware="h100", concurrency=64, num_prompts=64, isl=512, osl=128)
    full = run_scenario(Scenario(**base))
    capped = run_scenario(Scenario(**base, power_cap_w=350))
    # compute-heavy batch: lower clocks -> lower throughput; energy per token cannot rise above the TDP-capped one
    assert capped["output_throughput"] < full["output_throughput"]
    assert capped["avg_power_w"] <= 350 + 1e-6 < full["avg_power_w"]


def _main(capsys, *args):
    with pytest.raises(SystemExit) as e:  # main() exits only on errors; the raise below marks success
        main(["simulate", *args])
        raise SystemExit(0)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_simulate_cli_flag_and_error_exit(capsys):
    code, out, err = _main(capsys, "-m", "llama-3.1-8b", "-H", "jalapeno", "--tp", "8", "--concurrency", "4",
                           "--num-prompts", "8", "--osl", "64", "--power-cap-w", "550", "--json")
    assert code == 0, err
    assert json.loads(out)["output_throughput"] > 0
    code, out, err = _main(capsys, "-m", "llama-3.1-8b", "-H", "jalapeno", "--concurrency", "4", "--power-cap-w", "100")
    assert code == 2
    assert "static power 140 W" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_sweep_point_carries_the_cap_into_scenario_and_economics():
    from jalapeno.economics import point_groups
    from jalapeno.report.grid import expand, point_id
    from jalapeno.report.pool import point_scenario
    from jalapeno.report.spec import parse_sweep

    spec, _ = parse_sweep("models: [llama-3.1-8b]\nhardware: [h100]\nmax_chips: 1\n"
                          "workloads: [{isl: 128, osl: 32}]\nconcurrencies: [4]\npower_cap_w: 400\n")
    (p,) = expand(spec)
    assert p["power_cap_w"] == 400
    assert point_scenario(p).power_cap_w == 400
    assert point_groups(p)[0].tdp_w == 400
    uncapped = {**p, "power_cap_w": None}
    assert point_id(uncapped) != point_id(p)
    assert point_groups(uncapped)[0].tdp_w == 700
