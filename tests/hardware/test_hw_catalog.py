"""The built-in catalogue: every required chip loads, resolves by its aliases, and cites every number."""

from __future__ import annotations

import typing

import pytest

from jalapeno.errors import UnknownNameError
from jalapeno.hardware import get_chip, iter_facts, list_chips, load_catalog, normalize_name
from jalapeno.hardware.schema import Status

# alias -> the key it must resolve to (from the project brief, not from the YAML files)
REQUIRED = {
    "h100": "h100", "h200": "h200", "b200": "b200", "b300": "b300", "gb200": "gb200", "gb300": "gb300",
    "vera-rubin": "vera-rubin", "rubin": "vera-rubin", "vr200": "vera-rubin",
    "groq-lpu": "groq-lpu", "groq-lp30": "groq-lp30", "groq-lpx": "groq-lp30", "lpx": "groq-lp30",
    "tpu-v5e": "tpu-v5e", "tpu-v6e": "tpu-v6e", "tpu-v7": "tpu-v7", "ironwood": "tpu-v7", "tpu7x": "tpu-v7",
    "tpu-8t": "tpu-8t", "tpu-8i": "tpu-8i",
    "mi300x": "mi300x", "mi325x": "mi325x", "mi355x": "mi355x",
    "trainium2": "trainium2", "trn2": "trainium2", "inferentia2": "inferentia2", "inf2": "inferentia2",
    "cerebras-wse3": "cerebras-wse3", "wse3": "cerebras-wse3", "cerebras": "cerebras-wse3",
    "mtia-v2": "mtia-v2", "jalapeno": "jalapeno", "jalapeño": "jalapeno", "openai-jalapeno": "jalapeno",
}
STATUSES = set(typing.get_args(Status))


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_every_required_chip_is_built_in(cat):
    assert set(REQUIRED.values()) <= set(cat)


@pytest.mark.parametrize("alias,key", sorted(REQUIRED.items()))
def test_alias_resolves(cat, alias, key):
    assert cat.resolve(alias).key == key
    assert get_chip(alias).key == key


@pytest.mark.parametrize("spelling,key", [
    ("H200", "h200"), (" GB300 ", "gb300"), ("TPU_V6E", "tpu-v6e"), ("tpu v6e", "tpu-v6e"), ("Jalapeño", "jalapeno"),
    ("JALAPEÑO", "jalapeno"), ("GB300 NVL72", "gb300"), ("H200 SXM", "h200"), ("Groq_LPX", "groq-lp30"),
])
def test_case_space_underscore_and_accent_insensitive(cat, spelling, key):
    assert cat.resolve(spelling).key == key


def test_unknown_name_lists_close_matches(cat):
    with pytest.raises(UnknownNameError) as ei:
        cat.resolve("h2000")
    msg = str(ei.value)
    assert "h2000" in msg and "h200" in msg and "\n" not in msg


def test_unknown_name_without_close_match_still_explains(cat):
    with pytest.raises(UnknownNameError, match="hardware list"):
        cat.resolve("zzzzzz-qqq")


def test_no_name_is_claimed_by_two_chips(cat):
    owner: dict[str, str] = {}
    for key, spec in cat.items():
        for n in {normalize_name(x) for x in [spec.key, spec.name, *spec.aliases]}:
            assert owner.setdefault(n, key) == key, f"'{n}' is claimed by both {owner[n]} and {key}"


def test_list_chips_sorted_by_key():
    keys = [c.key for c in list_chips()]
    assert keys == sorted(keys) and len(keys) >= 22


def test_file_name_matches_key(cat):
    for key, path in cat.origin.items():
        assert path.stem == key


def test_every_fact_is_sourced_with_a_valid_status(cat):
    n = 0
    for key, spec in cat.items():
        for path, fact in iter_facts(spec):
            n += 1
            where = f"{key}:{path}"
            assert fact.source.strip(), where
            assert fact.status in STATUSES, where
            if fact.status == "unknown":
                assert fact.value is None, where
            else:
                assert fact.value is not None, where
            if fact.status == "inferred":
                assert fact.source.startswith("inferred"), f"{where}: inferred values give their reasoning"
            if fact.status in {"vendor-peak", "measured", "third-party"}:
                assert fact.source.startswith("http"), f"{where}: cite the original URL"
            assert "/work/shared" not in fact.source and "hardware-facts.md" not in fact.source, where
    assert n > 22 * 10


def test_cost_model_has_usable_numbers_everywhere(cat):
    """Every chip has a compute rate, a main memory bandwidth and a network bandwidth the cost model can use."""
    for key, spec in cat.items():
        assert any(f.value for f in spec.compute_tflops.values()), key
        resident = [lv for lv in spec.memory if lv.resident]
        assert resident and all(lv.bandwidth_tbps.value and lv.capacity_gb.value for lv in resident), key
        assert spec.scale_up.bandwidth_gbps.value and spec.scale_up.latency_us.value, key
        assert spec.power.tdp_w.value, key
        assert spec.power.idle_w is not None and 0.15 <= spec.power.idle_w.value / spec.power.tdp_w.value <= 0.25, key
        assert spec.power.facility_overhead_w is not None, key


def test_network_bandwidths_are_per_direction(cat):
    # NVLink5 is sold as 1.8 TB/s bidirectional: 900 GB/s each way; NVLink4 900 -> 450; Ironwood ICI 1.2 TB/s -> 600
    assert cat["b200"].scale_up.bandwidth_gbps.value == 1800 / 2
    assert cat["h100"].scale_up.bandwidth_gbps.value == 900 / 2
    assert cat["tpu-v7"].scale_up.bandwidth_gbps.value == 1200 / 2
    assert cat["groq-lp30"].scale_up.bandwidth_gbps.value == 2500 / 2


def test_memory_hierarchy_conventions(cat):
    for key in ("h100", "h200", "b200", "b300", "gb200", "gb300", "vera-rubin"):
        spec = cat[key]
        assert spec.level("l2").kind == "sram" and spec.level("l2").resident is False, key
        assert spec.level("hbm").kind == "hbm" and spec.main_memory is spec.level("hbm"), key
        assert spec.sram is None, key  # a hardware cache is not a placement target
    for key in ("groq-lpu", "groq-lp30", "cerebras-wse3"):
        spec = cat[key]
        assert [lv.kind for lv in spec.memory] == ["sram"] and spec.memory[0].resident, key
        assert spec.main_memory is None and spec.sram is spec.memory[0], key
    for key in ("tpu-8t", "tpu-8i"):
        assert cat[key].level("sram").resident is False
    assert cat["trainium2"].sram.capacity_gb.value == pytest.approx(0.224)
    mtia = cat["mtia-v2"]
    assert mtia.sram.capacity_gb.value == pytest.approx(0.256)
    assert mtia.main_memory.kind == "dram" and mtia.main_memory.capacity_gb.value == 128
    assert mtia.main_memory.bandwidth_tbps.status in {"third-party", "inferred"}


def test_topologies_and_domains(cat):
    assert cat["gb200"].scale_up.domain_size == 72 and cat["gb300"].scale_up.domain_size == 72
    assert cat["h200"].scale_up.domain_size == 8
    assert cat["tpu-8i"].scale_up.topology == "boardfly" and cat["tpu-8i"].scale_up.max_hops == 7
    assert any("16" in n and "torus" in n.lower() for n in cat["tpu-8i"].notes)
    assert cat["tpu-v7"].scale_up.topology == "torus3d"
    assert cat["groq-lp30"].system_size == 256 and cat["groq-lp30"].scale_up.domain_size == 256


def test_key_numbers_match_published_values(cat):
    """Values from the vendor/secondary sources as quoted in the project's brief (independent of the YAMLs)."""
    h200 = cat["h200"]
    assert h200.peak_flops("bf16") == 989e12
    # capacity: the nvidia-smi total in decimal GB (143,771 MiB), the vendor's "141 GB" kept in the note
    assert h200.main_memory.bandwidth_tbps.value == 4.8 and h200.main_memory.capacity_gb.value == 150.75
    assert "141 GB" in h200.main_memory.capacity_gb.note
    assert h200.power.tdp_w.value == 700
    assert cat["gb300"].compute_tflops["fp4"].value == 15000
    lp30 = cat["groq-lp30"].sram
    assert lp30.capacity_gb.value == 0.5 and lp30.bandwidth_tbps.value == 150
    assert cat["b200"].compute_tflops["fp8"].value == 4500
    assert cat["mi300x"].main_memory.capacity_gb.value == 206.14  # rocm-smi 206141652992 B; vendor 192 GB (GiB)
    assert "192 GB" in cat["mi300x"].main_memory.capacity_gb.note


def test_efficiency_defaults_follow_measurements(cat):
    # MAMF measurements: H100 794.5 / 989 bf16, 1402.6 / 1979 fp8; B200 1745 / 2250; GB200 1822 / 2500
    assert cat["h100"].efficiency.compute["bf16"] == pytest.approx(794.5 / 989, abs=0.005)
    assert cat["h100"].efficiency.compute["fp8"] == pytest.approx(1402.6 / 1979, abs=0.005)
    assert cat["b200"].efficiency.compute["bf16"] == pytest.approx(1745 / 2250, abs=0.005)
    assert cat["gb200"].efficiency.compute["bf16"] == pytest.approx(1822 / 2500, abs=0.005)
    assert cat["h200"].efficiency.memory["hbm"] == pytest.approx(4.3 / 4.8, abs=0.02)
    for key, spec in cat.items():
        assert spec.efficiency.source and spec.efficiency.source != "defaults", key
        # a fixed cost under every step: per step, per kernel (kernels counted from the architecture) or per layer
        # (every model has layers; Hopper's step-8 fit puts its per-step cost at 0 beside 20 us per layer)
        e = spec.efficiency
        assert e.step_overhead_us > 0 or e.kernel_overhead_us > 0 or e.layer_overhead_us > 0, key
    amd = [cat[k].efficiency.compute["bf16"] for k in ("mi300x", "mi325x", "mi355x")]
    assert all(0.5 <= x <= 0.7 for x in amd)


def test_energy_coefficients_reproduce_power_envelope(cat):
    """Full-rate GEMM draws about TDP; a bandwidth-bound stream of main memory draws a plausible share of TDP."""
    for key, spec in cat.items():
        tdp, idle = spec.power.tdp_w.value, spec.power.idle_w.value
        e = spec.energy
        assert e.source and e.source != "defaults", key
        for dtype in spec.compute_tflops:
            watts = idle + e.pj_per_flop[dtype] * 1e-12 * spec.peak_flops(dtype)
            assert 0.8 * tdp <= watts <= 1.05 * tdp, (key, dtype, watts)
        main = spec.main_memory or spec.sram
        bw = main.bandwidth_tbps.value * 1e12
        watts = idle + e.pj_per_byte[main.name] * 1e-12 * bw
        assert 0.4 * tdp <= watts <= 0.9 * tdp, (key, watts)
        # an on-chip SRAM byte is cheaper than a main-memory byte
        for lv in spec.memory:
            if lv is not main and lv.kind == "sram":
                assert e.pj_per_byte[lv.name] < e.pj_per_byte[main.name], key


def test_prices_use_inferencex_hyperscaler_column(cat):
    # SemiAnalysis TCO 'hyperscaler' USD per GPU-hour as used by InferenceX
    expected = {"h100": 1.30, "h200": 1.41, "b200": 1.95, "b300": 2.34, "gb200": 2.21, "gb300": 2.65,
                "mi300x": 1.12, "mi325x": 1.28, "mi355x": 1.48}
    for key, usd in expected.items():
        assert cat[key].price.usd_per_hour.value == usd, key
    # facility overhead = InferenceX all-in kW per GPU minus TDP
    assert cat["h200"].power.facility_overhead_w.value == pytest.approx(1730 - 700)
    assert cat["gb200"].power.facility_overhead_w.value == pytest.approx(2100 - 1200)


def test_jalapeno_profile_is_marked_inferred(cat):
    j = cat.resolve("Jalapeño")
    assert j.status == "inferred"
    assert j.power.tdp_w.value == 700 and j.power.tdp_w.status == "seed"
    assert j.power.loaded_w is not None and j.power.loaded_w.value == 550 and j.power.loaded_w.status == "seed"
    assert {"fp8", "fp4"} <= set(j.compute_tflops)
    assert j.sram is not None and j.sram.resident and j.sram.bandwidth_tbps.value > 20  # seed: mesh > 20 TB/s
    assert j.sram.capacity_gb.value >= 1  # seed: "gigabytes" of SRAM
    assert j.main_memory is not None and j.main_memory.kind == "hbm"
    assert j.scale_up.topology == "switch"
    # every chosen number is inferred (or a seed quote), with its reasoning
    for path, f in iter_facts(j):
        assert f.status in {"inferred", "seed"}, path
    assert any("FIT PARAMETERS" in n for n in j.notes)
