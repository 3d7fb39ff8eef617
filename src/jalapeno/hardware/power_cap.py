"""Power capping as a pure transform ``ChipSpec -> ChipSpec``: lower the core clock until the modelled peak
power fits the cap (DVFS), so the cost model needs no change.

Model (docs/design.md, "Power capping"): the chip's peak power is ``P(1) = TDP`` = static + dynamic, static =
``power.idle_w`` (or 0.2 x TDP, the catalogue rule). CMOS switching power is ``C·V²·f``; in the DVFS range the
supply voltage scales roughly linearly with frequency (CMOS delay ~ 1/V), so the dynamic power goes as ``f³``
above a voltage floor and as ``f`` below it (V pinned at Vmin) — D. J. Greaves, *System on Chip Design*,
University of Cambridge lecture notes, "DVFS": "ramping voltage up linearly with clock frequency results in
dynamic power consumption with a cubic dependence on f"
(https://www.cl.cam.ac.uk/teaching/1617/SysOnChip/materials.d/sp2-power/zhp32600611b.html). With the clock at a
fraction ``s`` of nominal and ``v(s) = max(s, s_floor)``::

    P(s) = static + (TDP - static) · s · v(s)²

The largest ``s`` with ``P(s) <= cap`` sets: compute peaks × s; on-die SRAM bandwidth × s (it is clocked with the
core); energy per FLOP and per SRAM byte × v(s)² (switching energy ∝ V²); HBM/DRAM and network bandwidths and
energies unchanged (their own clocks and PHYs); ``power.tdp_w = cap``. A cap at or above TDP returns the chip
unchanged; a cap at or below the static power cannot be met by clocks and is an error.
"""

from __future__ import annotations

from jalapeno.errors import ConfigError
from jalapeno.hardware.schema import ChipSpec, Fact

#: static (leakage) power as a fraction of TDP when the chip has no ``idle_w`` (the catalogue's rule)
DEFAULT_STATIC_FRACTION = 0.2
#: clock fraction below which the supply voltage stops scaling (Vmin): ~0.6 Vnom on 5 nm-class parts
#: (e.g. 0.85 V nominal on MTIA v2 vs ~0.5-0.55 V minimum); below it dynamic power falls only linearly
DEFAULT_VOLTAGE_FLOOR = 0.6

_SOURCE = "jalapeno.hardware.power_cap (DVFS: P_dyn ∝ f·V², V ∝ f above a floor; docs/design.md)"


def static_power_w(chip: ChipSpec) -> float:
    """The chip's static (leakage + always-on) power: ``idle_w``, else 0.2 × TDP."""
    idle = chip.power.idle_w
    if idle is not None and idle.value is not None:
        return float(idle.value)
    return DEFAULT_STATIC_FRACTION * float(chip.power.tdp_w.value or 0.0)


def power_at_clock(tdp_w: float, static_w: float, s: float, floor: float = DEFAULT_VOLTAGE_FLOOR) -> float:
    """Modelled peak power (W) at clock fraction ``s`` of nominal (pure)."""
    v = max(s, floor)
    return static_w + (tdp_w - static_w) * s * v * v


def clock_fraction(tdp_w: float, static_w: float, cap_w: float, floor: float = DEFAULT_VOLTAGE_FLOOR) -> float:
    """The largest clock fraction ``s`` in (0, 1] whose modelled peak power fits ``cap_w`` (closed form)."""
    if cap_w >= tdp_w:
        return 1.0
    dyn = tdp_w - static_w
    r = (cap_w - static_w) / dyn  # = s · v(s)², increasing in s
    if r >= floor**3:
        return r ** (1.0 / 3.0)
    return r / (floor * floor)


def _scaled(f: Fact, k: float, what: str) -> Fact:
    if f.value is None:
        return f
    return Fact(value=round(float(f.value) * k, 6), status="inferred", source=_SOURCE,
                note=f"{what}: {f.value:g} x {k:.4f} ({f.status}: {f.source[:160]})")


def apply_power_cap(chip: ChipSpec, cap_w: float, *, voltage_floor: float = DEFAULT_VOLTAGE_FLOOR) -> ChipSpec:
    """``chip`` with its clocks lowered until the modelled peak power fits ``cap_w`` watts (see module doc).

    Raises :class:`ConfigError` for a cap at or below the chip's static power, or a chip without a TDP."""
    tdp = float(chip.power.tdp_w.value or 0.0)
    if tdp <= 0:
        raise ConfigError(f"--power-cap-w: {chip.key} has no TDP (power.tdp_w) to cap from; add one to its YAML")
    static = static_power_w(chip)
    if not cap_w > static:
        raise ConfigError(f"--power-cap-w {cap_w:g} W is at or below {chip.key}'s static power {static:g} W "
                          f"(idle_w; TDP {tdp:g} W): no clock can meet it; give a cap above {static:g} W")
    if cap_w >= tdp:
        return chip
    s = clock_fraction(tdp, static, cap_w, voltage_floor)
    v2 = max(s, voltage_floor) ** 2
    what = f"capped at {cap_w:g} W (clock x{s:.3f})"
    compute = {d: _scaled(f, s, what) for d, f in chip.compute_tflops.items()}
    memory = [lv.model_copy(update={"bandwidth_tbps": _scaled(lv.bandwidth_tbps, s, what)}) if lv.kind == "sram" else lv
              for lv in chip.memory]
    sram_names = {lv.name for lv in chip.memory if lv.kind == "sram"}
    energy = chip.energy.model_copy(update={
        "pj_per_flop": {d: e * v2 for d, e in chip.energy.pj_per_flop.items()},
        "pj_per_byte": {n: (e * v2 if n in sram_names else e) for n, e in chip.energy.pj_per_byte.items()},
        "source": f"{chip.energy.source}; {what}: pJ/FLOP and SRAM pJ/B x V² = {v2:.4f}",
    })
    cap_fact = Fact(value=float(cap_w), status="inferred", source=_SOURCE,
                    note=f"power cap; rated TDP {tdp:g} W ({chip.power.tdp_w.status}: {chip.power.tdp_w.source[:160]})")
    loaded = chip.power.loaded_w
    if loaded is not None and loaded.value is not None and loaded.value > cap_w:
        loaded = cap_fact
    power = chip.power.model_copy(update={"tdp_w": cap_fact, "loaded_w": loaded,
                                          "idle_w": Fact(value=static, status="inferred", source=_SOURCE,
                                                         note="static power, unchanged by the clock")})
    return chip.model_copy(update={
        "compute_tflops": compute, "memory": memory, "energy": energy, "power": power,
        "notes": [*chip.notes, f"POWER-CAPPED at {cap_w:g} W (rated {tdp:g} W): clock x{s:.3f}, V² x{v2:.3f} "
                               f"(jalapeno.hardware.power_cap)"],
    })
