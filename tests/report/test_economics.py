"""Economics against hand-computed numbers."""

import math

import pytest

from jalapeno.errors import ConfigError
from jalapeno.economics import (
    ChipGroup,
    compliance_factor,
    economics,
    parse_prices,
    point_groups,
    provisioned_power_w,
    tokens_per_mw,
    usd_per_mtok,
)

H200x8 = ChipGroup("h200", 8, tdp_w=700.0, facility_overhead_w=1030.0, usd_per_hour=1.41)


def test_usd_per_mtok_hand_computed():
    # 8 chips x $1.41 = $11.28/h; 10,000 tok/s = 36 Mtok/h -> $0.31333/Mtok; 80 % meet SLOs -> x 1.25
    assert usd_per_mtok(11.28, 10_000.0) == pytest.approx(11.28 / 36.0)
    assert usd_per_mtok(11.28, 10_000.0, 0.8) == pytest.approx(0.3916666, rel=1e-6)


def test_missing_slos_raise_cost_and_zero_attainment_is_unbounded():
    assert compliance_factor(None) == 1.0
    assert compliance_factor(0.5) == 2.0
    assert compliance_factor(0.0) is None
    assert usd_per_mtok(10.0, 1000.0, 0.0) is None


def test_tokens_per_mw_hand_computed():
    # 8 x (700 + 1030) W x PUE 1.2 = 16,608 W provisioned; 10,000 tok/s / 0.016608 MW = 602,119.5 tok/s/MW
    assert provisioned_power_w([H200x8], pue=1.2) == pytest.approx(16_608.0)
    assert tokens_per_mw(10_000.0, [H200x8], pue=1.2) == pytest.approx(602_119.46, rel=1e-6)
    assert tokens_per_mw(10_000.0, [H200x8], pue=1.0) == pytest.approx(10_000 / 13_840 * 1e6)


def test_economics_of_a_metrics_dict_and_missing_price():
    m = {"output_throughput": 10_000.0, "slo_attainment": 0.8, "output_tokens_per_joule": 2.5}
    e = economics(m, [H200x8], pue=1.2)
    assert e.hourly_cost_usd == pytest.approx(11.28)
    assert e.usd_per_mtok == pytest.approx(0.3916666, rel=1e-6)
    assert e.compliance_factor == pytest.approx(1.25)
    assert e.output_tokens_per_joule == 2.5
    unpriced = ChipGroup("tpu-v7", 4, 700.0, 700.0, None)
    e2 = economics(m, [unpriced])
    assert e2.usd_per_mtok is None and "no price for tpu-v7" in e2.as_columns()["economics_note"]
    assert e2.output_tokens_per_mw == pytest.approx(10_000 / (4 * 1400 * 1.2) * 1e6)


def test_disaggregated_point_prices_both_pools_from_the_catalogue():
    p = {"mode": "disaggregated", "hardware": "b200", "tp": 4, "prefill_hardware": "h200", "prefill_workers": 2,
         "prefill_tp": 2, "decode_workers": 1}
    groups = point_groups(p, {"h200": 3.5})
    assert [(g.key, g.count) for g in groups] == [("h200", 4), ("b200", 4)]
    assert groups[0].usd_per_hour == 3.5 and groups[0].price_source == "--price override"
    from jalapeno.hardware import get_chip

    assert groups[1].usd_per_hour == get_chip("b200").price.usd_per_hour.value
    e = economics({"output_throughput": 1000.0}, groups)
    assert e.hourly_cost_usd == pytest.approx(4 * 3.5 + 4 * groups[1].usd_per_hour)
    assert math.isclose(e.usd_per_mtok, e.hourly_cost_usd / 3.6)


def test_parse_prices():
    assert parse_prices(["h200=3.5", "b200=5,gb200=6"]) == {"h200": 3.5, "b200": 5.0, "gb200": 6.0}
    for bad in (["h200"], ["h200=abc"], ["=3"], ["h200=-1"]):
        with pytest.raises(ConfigError):
            parse_prices(bad)
