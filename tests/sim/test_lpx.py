"""Groq 3 LPX behind Vera Rubin: DeepSeek-R1 (671B) does not fit one LPX rack's 128 GB of SRAM; it runs on a
decode pool of several racks joined by scale-out links, with pipeline stages across racks, Rubin prefilling."""

import pytest

from jalapeno.errors import CapacityError
from jalapeno.hardware import get_chip
from jalapeno.sim.factory import cost_model_for
from jalapeno.testing import simulate_json

LPX = dict(tp=128, ep=128, pp=20, precision="fp8", kv="fp8")  # 2,560 LP30 = 10 racks of 256


def test_one_rack_cannot_hold_deepseek_r1():
    with pytest.raises(CapacityError, match="does not fit"):
        cost_model_for("deepseek-r1", "groq-lp30", tp=128, ep=128, pp=2, precision="fp8")


def test_pipeline_handoffs_cross_racks_on_scale_out():
    """Hand count: 128-chip stages, 2 per 256-chip rack: of the 19 hand-offs 9 cross racks (scale-out, 2 us),
    10 stay on the rack's C2C mesh (one 0.5 us hop)."""
    chip = get_chip("groq-lp30")
    cm = cost_model_for("deepseek-r1", chip, **LPX)
    (ho,) = [o for o in cm._net if o.name == "pp_handoff"]
    lat = float(chip.scale_up.latency_us) * 1e-6 * 10 + float(chip.scale_out.latency_us) * 1e-6 * 9
    assert ho.net_time[0] == pytest.approx(lat)
    assert cm.weight_bytes_per_chip <= 0.5e9
    no_out = chip.model_copy(update={"scale_out": None})
    with pytest.raises(Exception, match="scale-up domain of 256"):
        cost_model_for("deepseek-r1", no_out, **LPX)


def test_deepseek_r1_runs_on_a_multi_rack_lpx_decode_pool(capsys):
    m = simulate_json(
        capsys, "--model", "deepseek-r1", "--precision", "fp8", "--kv-dtype", "fp8",
        "--prefill-hardware", "vera-rubin", "--prefill-tp", "8", "--prefill-ep", "8", "--prefill-precision", "fp4",
        "--decode-hardware", "groq-lp30", "--decode-tp", "128", "--decode-ep", "128", "--decode-pp", "20",
        "--max-num-batched-tokens", "1024", "--isl", "1024", "--osl", "128", "--concurrency", "16",
        "--num-prompts", "32")
    assert m["completed"] == 32 and m["num_chips"] == 8 + 2560
    rubin, lp30 = (float(get_chip(k).price.usd_per_hour.value) for k in ("vera-rubin", "groq-lp30"))
    assert m["hourly_cost_usd"] == pytest.approx(8 * rubin + 2560 * lp30)  # every stage's chips are paid for
    assert m["usd_per_mtok"] == pytest.approx(m["hourly_cost_usd"] / (m["output_throughput"] * 3600 / 1e6))
