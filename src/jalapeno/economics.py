"""Token economics, as pure functions of a point's metrics and its chips' power and price.

* **tokens per joule** — ``output_tokens_per_joule`` of the metrics (simulated or measured chip energy).
* **tokens per MW** — output tokens/s per MW of *provisioned* power:
  ``output_tokens_per_s / (Σ chips × (TDP + facility overhead) × PUE) × 1e6``.
  The facility overhead per chip (host CPU, NICs, switches, cooling share) comes from the catalogue
  (``power.facility_overhead_w``; for the NVIDIA parts it is InferenceX's all-in kW/GPU minus TDP); when a chip
  has none, :data:`DEFAULT_OVERHEAD_FRACTION` × TDP is used and the row says so.
* **$/Mtok** (the seeds' TCO) — ``hourly cost of the chips / (output tokens per hour / 1e6) × compliance``
  where ``compliance = 1 / share of requests meeting the TTFT/TPOT SLOs`` (so missing SLOs raises the cost;
  1 when no SLO is set). Prices are per chip-hour from the catalogue (``price.usd_per_hour``), overridable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

#: Power usage effectiveness applied to provisioned power (a modern liquid-cooled AI hall is ~1.1-1.3).
DEFAULT_PUE = 1.2
#: Facility overhead per chip as a fraction of TDP, for chips whose catalogue entry has none (the catalogue's
#: own inferred entries use 0.6-1.0 × TDP; InferenceX all-in/TDP - 1 spans 0.5-1.5, median ~1.2).
DEFAULT_OVERHEAD_FRACTION = 1.0


@dataclass(frozen=True)
class ChipGroup:
    """``count`` chips of one kind, with what economics needs about them."""

    key: str
    count: int
    tdp_w: float
    facility_overhead_w: float
    usd_per_hour: float | None  # per chip-hour; None = unknown
    price_source: str = ""
    overhead_source: str = ""


@dataclass(frozen=True)
class Economics:
    """Economics of one point. ``None`` values come with a reason in ``notes``."""

    hourly_cost_usd: float | None
    provisioned_power_w: float
    output_tokens_per_mw: float | None
    usd_per_mtok: float | None
    compliance_factor: float | None
    output_tokens_per_joule: float | None
    notes: tuple[str, ...] = ()

    def as_columns(self) -> dict:
        return {
            "hourly_cost_usd": self.hourly_cost_usd,
            "provisioned_power_w": self.provisioned_power_w,
            "output_tokens_per_mw": self.output_tokens_per_mw,
            "usd_per_mtok": self.usd_per_mtok,
            "compliance_factor": self.compliance_factor,
            "output_tokens_per_joule": self.output_tokens_per_joule,
            "economics_note": "; ".join(self.notes) or None,
        }


def provisioned_power_w(groups: Iterable[ChipGroup], pue: float = DEFAULT_PUE) -> float:
    """Σ count × (TDP + facility overhead) × PUE, in watts."""
    return sum(g.count * (g.tdp_w + g.facility_overhead_w) for g in groups) * pue


def tokens_per_mw(output_tokens_per_s: float, groups: Iterable[ChipGroup], pue: float = DEFAULT_PUE) -> float | None:
    """Output tokens/s per MW of provisioned power (None when the power is zero or unknown)."""
    p = provisioned_power_w(groups, pue)
    return output_tokens_per_s / p * 1e6 if p > 0 else None


def hourly_cost_usd(groups: Iterable[ChipGroup]) -> float | None:
    """Σ count × price per chip-hour; None if any chip has no price."""
    total = 0.0
    for g in groups:
        if g.usd_per_hour is None:
            return None
        total += g.count * g.usd_per_hour
    return total


def compliance_factor(slo_attainment: float | None) -> float | None:
    """1 / share of requests meeting the SLOs; 1 without SLOs; None (infinite) when no request met them."""
    if slo_attainment is None:
        return 1.0
    if slo_attainment <= 0:
        return None
    return 1.0 / slo_attainment


def usd_per_mtok(hourly_usd: float, output_tokens_per_s: float, slo_attainment: float | None = None) -> float | None:
    """$ per million output tokens: hourly cost / (tokens per hour / 1e6) × compliance factor."""
    cf = compliance_factor(slo_attainment)
    if cf is None or output_tokens_per_s <= 0:
        return None
    return hourly_usd / (output_tokens_per_s * 3600.0 / 1e6) * cf


def economics(metrics: Mapping, groups: list[ChipGroup], pue: float = DEFAULT_PUE) -> Economics:
    """All economics columns of one point from its metrics dict (``output_throughput``, ``slo_attainment``,
    ``output_tokens_per_joule``) and its chips."""
    notes: list[str] = []
    tps = _num(metrics.get("output_throughput"))
    att = _num(metrics.get("slo_attainment"))
    cost = hourly_cost_usd(groups)
    if cost is None:
        missing = sorted({g.key for g in groups if g.usd_per_hour is None})
        notes.append(f"no price for {', '.join(missing)} (pass --price {missing[0]}=USD_PER_CHIP_HOUR)")
    for g in groups:
        if g.overhead_source == "default":
            notes.append(f"{g.key}: facility overhead not in catalogue, assumed {DEFAULT_OVERHEAD_FRACTION:g} x TDP")
    cf = compliance_factor(att)
    usd = None
    if cost is not None:
        if tps is None or tps <= 0:
            notes.append("no output throughput: $/Mtok undefined")
        elif cf is None:
            notes.append("no request met the SLOs: $/Mtok unbounded")
        else:
            usd = usd_per_mtok(cost, tps, att)
    return Economics(
        hourly_cost_usd=cost,
        provisioned_power_w=provisioned_power_w(groups, pue),
        output_tokens_per_mw=tokens_per_mw(tps, groups, pue) if tps is not None else None,
        usd_per_mtok=usd,
        compliance_factor=cf,
        output_tokens_per_joule=_num(metrics.get("output_tokens_per_joule")),
        notes=tuple(notes),
    )


def _num(x: object) -> float | None:
    if x is None:
        return None
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


# ---------------------------------------------------------------------------------------------------------
# Catalogue lookups (not pure: they read the hardware catalogue)
# ---------------------------------------------------------------------------------------------------------
def chip_group(key: str, count: int, prices: Mapping[str, float] | None = None,
               power_cap_w: float | None = None, hardware_dir: list[str] | None = None) -> ChipGroup:
    """A :class:`ChipGroup` from the catalogue (plus ``hardware_dir`` chip directories), with a price override
    from ``prices`` (chip key -> $/chip-hour); ``power_cap_w`` (a capped chip) provisions the cap instead of the
    rated TDP."""
    from jalapeno.hardware import get_chip

    chip = get_chip(key, hardware_dir) if hardware_dir else get_chip(key)
    tdp = float(chip.power.tdp_w.value or 0.0)
    if power_cap_w is not None and power_cap_w == power_cap_w and 0 < power_cap_w < tdp:
        tdp = float(power_cap_w)
    oh = chip.power.facility_overhead_w
    if oh is not None and oh.value is not None:
        overhead, oh_src = float(oh.value), oh.source
    else:
        overhead, oh_src = DEFAULT_OVERHEAD_FRACTION * tdp, "default"
    price, src = None, "none"
    override = _price_override(prices or {}, chip.key, key)
    if override is not None:
        price, src = override, "--price override"
    elif chip.price is not None and chip.price.usd_per_hour.value is not None:
        price, src = float(chip.price.usd_per_hour.value), chip.price.usd_per_hour.source
    return ChipGroup(chip.key, count, tdp, overhead, price, src, oh_src)


def _price_override(prices: Mapping[str, float], *names: str) -> float | None:
    from jalapeno.hardware import normalize_name

    norm = {normalize_name(k): v for k, v in prices.items()}
    for n in names:
        if normalize_name(n) in norm:
            return float(norm[normalize_name(n)])
    return None


def point_groups(point: Mapping, prices: Mapping[str, float] | None = None) -> list[ChipGroup]:
    """The chips a point uses: one group (aggregated) or prefill + decode groups (disaggregated)."""
    cap = point.get("power_cap_w")
    if point.get("mode") == "disaggregated":
        return [
            chip_group(str(point["prefill_hardware"]), int(point["prefill_workers"]) * int(point["prefill_tp"]), prices, cap),
            chip_group(str(point["hardware"]), _decode_chips(point), prices, cap),
        ]
    return [chip_group(str(point["hardware"]), point_chips(dict(point)), prices, cap)]


def _decode_chips(point: Mapping) -> int:
    """Chips of a disaggregated point's decode pool: workers × tp × pp (pipeline stages, e.g. LPX racks)."""
    return int(point["decode_workers"]) * int(point["tp"]) * int(point.get("pp") or 1)


def parse_prices(items: Iterable[str]) -> dict[str, float]:
    """``["h200=3.5", "b200=5"]`` -> {"h200": 3.5, "b200": 5.0}; bad items raise ConfigError."""
    from jalapeno.errors import ConfigError

    out: dict[str, float] = {}
    for item in items:
        for part in item.replace(",", " ").split():
            name, sep, val = part.partition("=")
            try:
                price = float(val)
            except ValueError:
                price = -1.0
            if not sep or not name or price < 0:
                raise ConfigError(f"--price {part!r}: use CHIP=USD_PER_CHIP_HOUR, e.g. --price h200=3.5")
            out[name.strip()] = price
    return out


def point_chips(point: dict) -> int:
    """Chips a point occupies: tp·pp·dp aggregated (tp·pp with DP attention, where dp splits attention inside
    the tp group, as ``simulate`` counts); prefill_workers·prefill_tp + decode_workers·tp·pp disaggregated."""
    if point.get("mode") == "disaggregated":
        return int(point["prefill_workers"]) * int(point["prefill_tp"]) + _decode_chips(point)
    dp = 1 if point.get("dp_attention") else int(point.get("dp") or 1)
    return int(point["tp"]) * int(point.get("pp") or 1) * dp
