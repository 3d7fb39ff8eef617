"""The physical design model (pure): design knobs -> die area, power (peak and typical), unit cost, $/chip-hour,
and a :class:`~jalapeno.hardware.schema.ChipSpec` (``status: designed``) the simulator accepts.

Area (per chip, summed over its dies)::

    compute = fp8_tflops · A_c(arch) / density(node)     A_c fitted per architecture class (mm² per FP8 TFLOPS at N5)
    sram    = sram_mb · sram_mm2_per_mb(node)
    phys    = stacks · PHY(memory) + scale_up_gbps / 100 · link_mm2 + uncore (per die)
    dies    = 1, or ceil(area / reticle) chiplets (+5% die-to-die each) when ``chiplets``; over the reticle
              without chiplets is an error naming the knob.

Power at peak (the rated TDP) = leakage · area + fp8 FLOP/s · E_flop(arch) · e(node) + SRAM B/s(arch) ·
E_sram(arch) + memory B/s · E_mem + 2 · link B/s · E_link, where e(node) is the node's switching energy
relative to N5 (logic only: SRAM access energy barely scales) and E_flop is fitted per architecture class
(``arch``: ``gpu``, ``systolic`` or ``dataflow``). Typical (serving-mix) power weights the dynamic terms (coefficient
``typical_compute_share``). Unit cost = dies × wafer price / (dies per wafer × yield) + memory $/GB ·
capacity + interposer $/mm² · (die area + stack footprints) + test & assembly; yield is Murphy's model on the
non-repairable share of the die. Price per chip-hour = (cost × markup + system share) × capital recovery per
hour + (TDP + facility overhead) × PUE × $/kWh. Every coefficient: :mod:`jalapeno.design.coefficients`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from jalapeno.design import coefficients as K
from jalapeno.errors import ConfigError
from jalapeno.hardware.schema import (
    ChipSpec, Efficiency, Energy, Fact, MemoryLevel, NetworkLink, Power, Price, Topology,
)

Node = Literal["n3", "n4", "n5", "n7", "n14"]
Arch = Literal["gpu", "systolic", "dataflow"]
MemoryKind = Literal["hbm3", "hbm3e", "hbm4", "lpddr5x"]
WAFER_DIAMETER_MM = 300.0
PUE = 1.2  # as jalapeno.economics.DEFAULT_PUE


class DesignKnobs(BaseModel):
    """One design point. Ranges are checked by :func:`check_knobs` (one line naming the knob)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(default="designed", pattern=r"^[a-z0-9][a-z0-9._-]*$")
    #: architecture class: ``gpu`` (SIMT), ``systolic`` (programmable matrix-engine ASIC, TPU/MTIA-like) or
    #: ``dataflow`` (SRAM-dataflow, Groq/Cerebras-like); it picks the class's area per TFLOPS, energy per FLOP
    #: and SRAM bandwidth/energy (coefficients.ARCH)
    arch: Arch = "gpu"
    node: Node = "n3"
    #: dense FP8 TFLOPS (bf16 = half; fp4 = double when ``fp4``)
    fp8_tflops: float = 2500.0
    fp4: bool = True
    #: software-managed on-die SRAM (MB = 1e6 B); its bandwidth follows from the banks unless ``sram_tbps``
    sram_mb: float = 0.0
    sram_tbps: float | None = None
    memory: MemoryKind = "hbm3e"
    #: HBM stacks (or LPDDR packages); 0 = SRAM only
    stacks: int = 8
    gb_per_stack: float | None = None
    tbps_per_stack: float | None = None
    #: scale-up bandwidth per chip per direction, GB/s; topology and domain (chips)
    scale_up_gbps: float = 800.0
    topology: Topology = "switch"
    domain: int = 64
    #: chips per node/tray (the ``system_size`` reports use) and per rack
    chips_per_node: int = 8
    chips_per_rack: int = 64
    chiplets: bool = False

    @model_validator(mode="after")
    def _ranges(self) -> "DesignKnobs":
        check_knobs(self)
        return self


def check_knobs(k: DesignKnobs) -> None:
    """Physical-range checks; raises ConfigError naming the knob."""
    checks = [
        ("fp8_tflops", k.fp8_tflops, k.fp8_tflops > 0, "> 0"),
        ("sram_mb", k.sram_mb, k.sram_mb >= 0, ">= 0"),
        ("stacks", k.stacks, 0 <= k.stacks <= 16, "between 0 and 16"),
        ("scale_up_gbps", k.scale_up_gbps, k.scale_up_gbps >= 0, ">= 0"),
        ("domain", k.domain, k.domain >= 1, ">= 1"),
        ("chips_per_node", k.chips_per_node, k.chips_per_node >= 1, ">= 1"),
        ("chips_per_rack", k.chips_per_rack, k.chips_per_rack >= k.chips_per_node, ">= chips_per_node"),
    ]
    for opt in ("sram_tbps", "gb_per_stack", "tbps_per_stack"):
        v = getattr(k, opt)
        if v is not None:
            checks.append((opt, v, v > 0, "> 0"))
    for name, v, ok, want in checks:
        if not ok:
            raise ConfigError(f"design knob {name} = {v} is outside its physical range (must be {want})")
    if k.stacks == 0 and k.sram_mb == 0:
        raise ConfigError("design knobs: sram_mb = 0 and stacks = 0 leave the chip with no memory; give one of them")


@dataclass(frozen=True)
class PhysicalDesign:
    """What the physical model derives from :class:`DesignKnobs` (units in the names)."""

    area_mm2: float
    dies: int
    die_area_mm2: float
    area_compute_mm2: float
    area_sram_mm2: float
    area_io_mm2: float
    sram_tbps: float
    mem_gb: float
    mem_tbps: float
    static_w: float
    peak_w: float
    typical_w: float
    pj_per_fp8_flop: float
    sram_pj_per_byte: float
    yield_: float
    die_cost_usd: float
    unit_cost_usd: float
    usd_per_hour: float

    def as_dict(self) -> dict:
        return asdict(self)


def _node(table: dict[str, Fact], node: str) -> float:
    return float(table[node].value or 0.0)


def memory_totals(k: DesignKnobs) -> tuple[float, float]:
    """(capacity GB, bandwidth TB/s) of the off-die memory."""
    m = K.MEMORY[k.memory]
    gb = k.gb_per_stack if k.gb_per_stack is not None else float(m["gb"])
    tbps = k.tbps_per_stack if k.tbps_per_stack is not None else float(m["tbps"])
    return k.stacks * gb, k.stacks * tbps


def sram_bandwidth_tbps(k: DesignKnobs) -> float:
    """On-die SRAM bandwidth: the knob when given, else MB × the class's TB/s per MB (banks vs a cache)."""
    return k.sram_tbps if k.sram_tbps is not None else k.sram_mb * K.a(k.arch, "sram_tbps_per_mb")


def area_parts(k: DesignKnobs) -> tuple[float, float, float]:
    """(compute, SRAM, I/O + uncore) area in mm² of one chip before any chiplet split."""
    compute = k.fp8_tflops * K.a(k.arch, "compute_mm2_per_fp8_tflops_n5") / _node(K.LOGIC_DENSITY_REL_N5, k.node)
    sram = k.sram_mb * _node(K.SRAM_MM2_PER_MB, k.node)
    io = k.stacks * float(K.PHY_MM2[k.memory].value or 0) + k.scale_up_gbps / 100 * K.c("link_mm2_per_100gbps") \
        + K.c("uncore_mm2")
    return compute, sram, io


def split_dies(area: float, chiplets: bool) -> tuple[int, float]:
    """(dies, total area incl. die-to-die overhead). Over the reticle without chiplets -> ConfigError."""
    reticle = K.c("reticle_mm2")
    if area <= reticle:
        return 1, area
    if not chiplets:
        raise ConfigError(f"design area {area:,.0f} mm² is over the {reticle:.0f} mm² reticle limit and chiplets "
                          "is false: lower fp8_tflops / sram_mb / stacks, or set chiplets: true")
    n = math.ceil(area * (1 + K.c("d2d_fraction")) / reticle)
    return n, area * (1 + K.c("d2d_fraction"))


def murphy_yield(area_mm2: float, d0_per_cm2: float) -> float:
    """Murphy's yield model ((1 - e^-AD) / AD)² (A in cm²)."""
    ad = area_mm2 / 100.0 * d0_per_cm2
    return 1.0 if ad <= 0 else ((1 - math.exp(-ad)) / ad) ** 2


def dies_per_wafer(area_mm2: float) -> float:
    """Gross dies per 300 mm wafer: π r² / A − π d / √(2A) (edge loss), at least 1 (wafer-scale)."""
    d = WAFER_DIAMETER_MM
    return max(1.0, math.pi * (d / 2) ** 2 / area_mm2 - math.pi * d / math.sqrt(2 * area_mm2))


def power_terms(k: DesignKnobs, area: float, sram_tbps: float, mem_tbps: float) -> dict[str, float]:
    """Peak power components in W (static, compute, sram, memory, links)."""
    e = _node(K.ENERGY_REL_N5, k.node)
    return {
        "static": K.c("leak_w_per_mm2") * area,
        "compute": k.fp8_tflops * 1e12 * K.a(k.arch, "pj_per_fp8_flop_n5") * e * 1e-12,
        "sram": sram_tbps * 1e12 * K.a(k.arch, "sram_pj_per_byte") * 1e-12,
        "memory": mem_tbps * 1e12 * float(K.MEMORY[k.memory]["pj_per_byte"].value or 0) * 1e-12,
        "links": 2 * k.scale_up_gbps * 1e9 * K.c("link_pj_per_byte") * 1e-12,
    }


def evaluate(k: DesignKnobs) -> PhysicalDesign:
    """Area, power, cost and price of one design (pure)."""
    compute, sram, io = area_parts(k)
    dies, area = split_dies(compute + sram + io, k.chiplets)
    die_area = area / dies
    sram_tbps = sram_bandwidth_tbps(k)
    mem_gb, mem_tbps = memory_totals(k)
    p = power_terms(k, area, sram_tbps, mem_tbps)
    peak = sum(p.values())
    share = K.c("typical_compute_share")
    typical = p["static"] + share * p["compute"] + 0.8 * p["memory"] + 0.5 * p["sram"] + 0.3 * p["links"]
    y = murphy_yield(die_area * (1 - K.c("redundancy")), _node(K.DEFECTS_PER_CM2, k.node))
    die_cost = _node(K.WAFER_USD, k.node) / (dies_per_wafer(die_area) * y)
    interposer = (area + k.stacks * K.c("hbm_footprint_mm2")) * K.c("interposer_usd_per_mm2") if k.stacks and k.memory != "lpddr5x" else 0.0
    unit = dies * die_cost + mem_gb * float(K.MEMORY[k.memory]["usd_per_gb"].value or 0) + interposer + K.c("test_assembly_usd")
    facility = peak  # the catalogue's inferred rule: facility overhead = 1.0 x TDP
    hourly = (unit * K.c("markup") + K.c("system_usd_per_chip")) * K.c("capital_recovery_per_hour") \
        + (peak + facility) * PUE / 1000 * K.c("usd_per_kwh")
    e = _node(K.ENERGY_REL_N5, k.node)
    return PhysicalDesign(
        area_mm2=area, dies=dies, die_area_mm2=die_area, area_compute_mm2=compute, area_sram_mm2=sram, area_io_mm2=io,
        sram_tbps=sram_tbps, mem_gb=mem_gb, mem_tbps=mem_tbps, static_w=p["static"], peak_w=peak, typical_w=typical,
        pj_per_fp8_flop=K.a(k.arch, "pj_per_fp8_flop_n5") * e, sram_pj_per_byte=K.a(k.arch, "sram_pj_per_byte"),
        yield_=y, die_cost_usd=die_cost, unit_cost_usd=unit, usd_per_hour=hourly,
    )


# ---------------------------------------------------------------------------------------------------------
# ChipSpec
# ---------------------------------------------------------------------------------------------------------
_SRC = "jalapeno design: physical design model (jalapeno.design.physical; coefficients and sources in docs/design.md)"


def _d(v: float, note: str = "") -> Fact:
    return Fact(value=round(float(v), 6), status="designed", source=_SRC, note=note)


def to_chipspec(k: DesignKnobs, phys: PhysicalDesign | None = None) -> ChipSpec:
    """The design as a chip the simulator accepts (every number a ``designed`` Fact)."""
    ph = phys or evaluate(k)
    compute = {"fp8": _d(k.fp8_tflops), "bf16": _d(k.fp8_tflops / 2)}
    if k.fp4:
        compute["fp4"] = _d(2 * k.fp8_tflops)
    memory: list[MemoryLevel] = []
    if k.sram_mb > 0:
        memory.append(MemoryLevel(name="sram", kind="sram", capacity_gb=_d(k.sram_mb / 1000), resident=True,
                                  bandwidth_tbps=_d(ph.sram_tbps, f"{k.arch}: sram_tbps knob, else sram_tbps_per_mb x MB"), pin_weights=True))
    if k.stacks > 0:
        kind = "dram" if k.memory == "lpddr5x" else "hbm"
        memory.append(MemoryLevel(name=kind if kind == "hbm" else "dram", kind=kind, capacity_gb=_d(ph.mem_gb),
                                  bandwidth_tbps=_d(ph.mem_tbps), resident=True))
    pj = {"fp8": ph.pj_per_fp8_flop, "bf16": 2 * ph.pj_per_fp8_flop}
    if k.fp4:
        pj["fp4"] = ph.pj_per_fp8_flop / 2
    per_byte = {lv.name: (ph.sram_pj_per_byte if lv.kind == "sram" else float(K.MEMORY[k.memory]["pj_per_byte"].value or 0))
                for lv in memory}
    return ChipSpec(
        key=k.key, name=f"designed {k.key}", vendor="jalapeno design", status="designed",
        description=(f"{k.arch} {k.node} {k.fp8_tflops:g} FP8 TFLOPS, {k.sram_mb:g} MB SRAM, {k.stacks} x {k.memory}, "
                     f"{ph.area_mm2:,.0f} mm² on {ph.dies} die(s), {ph.peak_w:,.0f} W peak, ${ph.unit_cost_usd:,.0f}"),
        compute_tflops=compute,  # type: ignore[arg-type]
        memory=memory,
        scale_up=NetworkLink(bandwidth_gbps=_d(k.scale_up_gbps), latency_us=_d(1.0, "one switch hop, as the catalogue"),
                             topology=k.topology, domain_size=k.domain),
        scale_out=NetworkLink(bandwidth_gbps=_d(100), latency_us=_d(5.0), topology="switch", domain_size=0),
        power=Power(tdp_w=_d(ph.peak_w), loaded_w=_d(ph.typical_w), idle_w=_d(ph.static_w),
                    facility_overhead_w=_d(ph.peak_w, "1.0 x TDP, the catalogue's inferred rule")),
        price=Price(usd_per_hour=_d(ph.usd_per_hour, f"unit cost ${ph.unit_cost_usd:,.0f} x markup + system, 4 y at 10%, power")),
        efficiency=Efficiency(compute={"fp8": 0.8, "fp4": 0.8, "bf16": 0.8}, memory={"hbm": 0.9, "sram": 0.85, "dram": 0.85},
                              scale_up=0.85, step_overhead_us=80, layer_overhead_us=50, request_overhead_ms=40,
                              source="a native serving runtime, as the catalogue's Jalapeño profile (hardware/chips/jalapeno.yaml)"),
        energy=Energy(pj_per_flop=pj, pj_per_byte=per_byte, pj_per_network_byte=K.c("link_pj_per_byte"), source=_SRC),
        system_size=k.chips_per_node,
        notes=[f"knobs: {k.model_dump_json()}", f"physical: {ph.as_dict()}"],
    )
