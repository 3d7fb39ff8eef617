"""Grid expansion: a :class:`SweepSpec` becomes a list of flat, hashable points.

A point is a plain ``dict`` (it crosses process and Ray boundaries and becomes one parquet row) with the keys
of :data:`POINT_KEYS`. Layouts that cannot work (heads or experts not divisible) are kept as points with a
``skip_reason`` so the results say why they were not run; layouts that do not fit in memory are found when
the point runs (the cost model's memory plan raises :class:`CapacityError`) and recorded the same way.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Any, Callable

from jalapeno.report.spec import DisaggLayout, Layout, SweepSpec

#: bump when the meaning of a point's inputs changes (invalidates resume)
POINT_SCHEMA = 1

#: every input column of a point, in order, with its default
POINT_DEFAULTS: dict[str, Any] = {
    "model": "",
    "hardware": "",  # the (decode) chip
    "mode": "aggregated",  # or "disaggregated"
    "tp": 1,
    "ep": 1,
    "pp": 1,
    "dp": 1,
    "dp_attention": False,
    "prefill_hardware": None,
    "prefill_workers": None,
    "prefill_tp": None,
    "decode_workers": None,
    "weights": "native",
    "kv": "bf16",
    "isl": 1024,
    "osl": 1024,
    "concurrency": 1,
    "num_prompts": None,
    "spec_method": "none",
    "spec_tokens": 0,
    "spec_acceptance": None,
    "spec_draft_model": None,
    "slo_ttft_ms": None,
    "slo_tpot_ms": None,
    "seed": 0,
    "framework": None,  # serving-framework profile (jalapeno.perf.frameworks); None = the chip's generic one
    "power_cap_w": None,  # per-chip power cap in W (jalapeno.hardware.power_cap); None = rated power
    "max_num_batched_tokens": None,  # the engine's token budget per step; None = the simulator's default
    "prefill_weights": None,  # disaggregated: a pool's own weight precision; None = ``weights``
    "decode_weights": None,
    "early_stop": None,  # opt-in statistical early stop's tolerance (jalapeno.sim.early_stop); None = exact
}
POINT_KEYS: tuple[str, ...] = tuple(POINT_DEFAULTS)


def make_point(**kw: Any) -> dict:
    """A complete point dict: defaults for what is not given; unknown keys are a programming error."""
    unknown = set(kw) - set(POINT_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown point keys: {sorted(unknown)}")
    return {**POINT_DEFAULTS, **kw}


def point_id(point: dict) -> str:
    """Stable 16-hex-digit hash of a point's inputs (resume key). Independent of dict order and of keys that
    are not inputs (metrics, errors)."""
    inputs = {k: point.get(k, POINT_DEFAULTS[k]) for k in POINT_KEYS}
    for late in ("framework", "power_cap_w", "max_num_batched_tokens", "prefill_weights", "decode_weights",
                 "early_stop"):  # added later: unset keeps the ids of earlier results (resume)
        if inputs[late] is None:
            del inputs[late]
    blob = json.dumps({"schema": POINT_SCHEMA, **inputs}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def describe_layout(point: dict) -> str:
    """Short label such as ``tp8 ep8 dpa`` or ``P1×tp8(h200) D2×tp4``."""
    if point.get("mode") == "disaggregated":
        ph = point.get("prefill_hardware")
        pre = f"P{point['prefill_workers']}×tp{point['prefill_tp']}" + (f"({ph})" if ph and ph != point["hardware"] else "")
        dec = f"D{point['decode_workers']}×tp{point['tp']}" + (f" ep{point['ep']}" if point["ep"] > 1 else "")
        dec += (f" pp{point['pp']}" if int(point.get("pp") or 1) > 1 else "") + (" dpa" if point.get("dp_attention") else "")
        pre += f" {point['prefill_weights']}" if point.get("prefill_weights") else ""
        dec += f" {point['decode_weights']}" if point.get("decode_weights") else ""
        return f"{pre} {dec}"
    s = f"tp{point['tp']}"
    for k in ("ep", "pp", "dp"):
        if point.get(k, 1) > 1:
            s += f" {k}{point[k]}"
    if point.get("dp_attention"):
        s += " dpa"
    return s


# ---------------------------------------------------------------------------------------------------------
# Layout validity
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ArchDims:
    """What layout checks need from a model (kept small so tests can hand-make one)."""

    num_heads: int
    num_kv_heads: int
    num_experts: int  # 0 = dense
    num_layers: int

    @classmethod
    def of(cls, arch: Any) -> "ArchDims":
        return cls(arch.num_heads, arch.num_kv_heads, arch.num_experts, arch.num_layers)


def layout_problem(dims: ArchDims, tp: int, ep: int = 1, pp: int = 1, dp_attention: bool = False) -> str | None:
    """Why a layout cannot shard this model (None when it can)."""
    if tp % ep:
        return f"not divisible: ep={ep} must divide tp={tp}"
    if not dp_attention and dims.num_heads % tp:
        return f"not divisible: {dims.num_heads} attention heads over tp={tp}"
    if ep > 1 and dims.num_experts == 0:
        return f"not divisible: ep={ep} on a dense model (no experts)"
    if ep > dims.num_experts > 0:
        return f"not divisible: ep={ep} exceeds the {dims.num_experts} experts"
    if dp_attention and tp == 1:
        return "dp_attention needs tp > 1"
    if pp > dims.num_layers:
        return f"not divisible: pp={pp} exceeds {dims.num_layers} layers"
    return None


def auto_layouts(dims: ArchDims, max_chips: int) -> list[Layout]:
    """Every TP / EP / DP-attention layout on a power-of-two number of chips up to ``max_chips`` that shards the
    model: dense models ``tp=n``; MoE models ``tp=n`` with ``ep`` = 1 or e, and ``tp=n ep=e`` with DP attention,
    where e is the largest power of two <= n that divides the expert count (e = n up to the expert count); when
    that e is below min(n, experts), also ``tp=n ep=min(n, experts)`` with DP attention: the experts padded to
    ``ceil(E/ep)·ep`` slots with redundant copies (``Parallelism.expert_slots``), as wide-EP deployments run.
    (Pipeline parallelism is left to explicit layouts: it does not lower latency on one node.)"""
    out: list[Layout] = []
    n = 1
    while n <= max_chips:
        cands = [Layout(tp=n)]
        e = 1
        while dims.num_experts and e * 2 <= n and dims.num_experts % (e * 2) == 0:
            e *= 2
        if e > 1:
            cands += [Layout(tp=n, ep=e), Layout(tp=n, ep=e, dp_attention=True)]
        wide = min(n, dims.num_experts)
        if dims.num_experts and wide > max(e, 1) and n % wide == 0:
            cands.append(Layout(tp=n, ep=wide, dp_attention=True))
        out += [c for c in cands if layout_problem(dims, c.tp, c.ep, c.pp, c.dp_attention) is None]
        n *= 2
    return out


# ---------------------------------------------------------------------------------------------------------
# Expansion
# ---------------------------------------------------------------------------------------------------------
def _dims_from_catalogue(model: str) -> ArchDims:
    from jalapeno.models import load_model

    return ArchDims.of(load_model(model))


def _layout_points(spec: SweepSpec, model: str, chip: str, dims: ArchDims) -> list[tuple[dict, str | None]]:
    """(layout keys, skip reason) for one model on one chip, aggregated and disaggregated."""
    out: list[tuple[dict, str | None]] = []
    max_chips = spec.max_chips_for(chip)
    items = ["auto"] if spec.parallelism == "auto" else list(spec.parallelism)
    layouts: list[Layout] = []
    for item in items:
        if item == "auto":
            auto = auto_layouts(dims, max_chips)
            if not auto:
                out.append(({"tp": 1}, f"no valid layout of {model} on up to {max_chips} chips"))
            layouts += [a for a in auto if a not in layouts]
        elif item.hardware is None or _same_chip(item.hardware, chip):
            lay = item.model_copy(update={"hardware": None})
            if lay not in layouts:
                layouts.append(lay)
    for lay in layouts:
        reason = layout_problem(dims, lay.tp, lay.ep, lay.pp, lay.dp_attention)
        out.append(({"tp": lay.tp, "ep": lay.ep, "pp": lay.pp, "dp": lay.dp, "dp_attention": lay.dp_attention}, reason))
    for d in spec.disaggregated:
        out += _disagg_points(d, chip, dims)
    return out


def _same_chip(a: str, b: str) -> bool:
    from jalapeno.hardware import normalize_name

    if normalize_name(a) == normalize_name(b):
        return True
    try:
        from jalapeno.hardware import get_chip

        return get_chip(a).key == get_chip(b).key
    except Exception:
        return False


def _disagg_points(d: DisaggLayout, chip: str, dims: ArchDims) -> list[tuple[dict, str | None]]:
    if d.decode.hardware and not _same_chip(d.decode.hardware, chip):
        return []  # a layout pinned to another decode chip belongs to that chip's rows
    keys = {
        "mode": "disaggregated",
        "prefill_hardware": d.prefill.hardware or chip,
        "prefill_workers": d.prefill.workers,
        "prefill_tp": d.prefill.tp,
        "decode_workers": d.decode.workers,
        "tp": d.decode.tp,
        "ep": d.decode.ep,
        "pp": d.decode.pp,  # the decode pool's layout lives in the aggregated columns (tp, ep, pp, dp_attention)
        "dp_attention": d.decode.dp_attention,
        "prefill_weights": d.prefill.precision,
        "decode_weights": d.decode.precision,
    }
    reason = layout_problem(dims, d.prefill.tp) or layout_problem(dims, d.decode.tp, d.decode.ep, d.decode.pp,
                                                                   d.decode.dp_attention)
    return [(keys, reason)]


def weights_fit_problem(model: str, chip: str, weights: str, num_chips: int) -> str | None:
    """Cheap necessary condition, checked before simulating: the weights alone must fit in the resident memory
    of the chips (the simulator's memory plan, which also reserves KV and activations, has the last word)."""
    try:
        from jalapeno.hardware import get_chip
        from jalapeno.models import load_model

        arch, spec = load_model(model), get_chip(chip)
        need = arch.weight_bytes({"fp4": "mxfp4"}.get(weights, weights))
    except Exception:  # unknown dtype etc.: leave it to the simulator
        return None
    have = sum(float(lv.capacity_gb.value or 0.0) for lv in spec.memory if lv.resident) * 1e9 * num_chips
    if need > have:
        return f"does not fit: {weights} weights need {need / 1e9:.0f} GB, {num_chips} x {spec.key} hold {have / 1e9:.0f} GB"
    return None


def expand(spec: SweepSpec, dims_fn: Callable[[str], ArchDims] | None = None) -> list[dict]:
    """All points of the grid (cartesian product), in a deterministic order. Points whose layout cannot shard
    the model, or whose weights alone exceed the chips' memory, carry ``skip_reason``; the others have
    ``skip_reason = None``. With an injected ``dims_fn`` (tests) the memory pre-check is off."""
    fit_check = dims_fn is None
    dims_fn = dims_fn or _dims_from_catalogue
    chips = list(spec.hardware)
    for d in spec.disaggregated:  # a decode chip named only in a disaggregated layout still gets its rows
        if d.decode.hardware and d.decode.hardware not in chips:
            chips.append(d.decode.hardware)
    slo = spec.slo
    points: list[dict] = []
    for model in spec.models:
        dims = dims_fn(model)
        for chip in chips:
            layouts = _layout_points(spec, model, chip, dims)
            if chip not in spec.hardware:
                layouts = [x for x in layouts if x[0].get("mode") == "disaggregated"]
            for (lay, reason), prec, wl, spec_dec, conc in itertools.product(
                layouts, spec.precision_list(), spec.workloads, spec.speculative, spec.concurrencies
            ):
                p = make_point(
                    model=model,
                    hardware=chip,
                    **lay,
                    weights=prec.weights,
                    kv=prec.kv,
                    isl=wl.isl,
                    osl=wl.osl,
                    concurrency=conc,
                    num_prompts=spec.num_prompts,
                    spec_method=spec_dec.method,
                    spec_tokens=spec_dec.num_tokens,
                    spec_acceptance=spec_dec.acceptance_rate,
                    spec_draft_model=spec_dec.draft_model,
                    slo_ttft_ms=slo.ttft_ms if slo else None,
                    slo_tpot_ms=slo.tpot_ms if slo else None,
                    seed=spec.seed,
                    framework=spec.framework,
                    power_cap_w=spec.power_cap_w,
                    max_num_batched_tokens=spec.max_num_batched_tokens,
                    early_stop=spec.early_stop,
                )
                if reason is None and fit_check:
                    if p["mode"] == "disaggregated":
                        reason = weights_fit_problem(model, p["prefill_hardware"], p["prefill_weights"] or prec.weights,
                                                     p["prefill_tp"])
                        reason = reason or weights_fit_problem(model, chip, p["decode_weights"] or prec.weights,
                                                               p["tp"] * p["pp"])
                    else:
                        reason = weights_fit_problem(model, chip, prec.weights, p["tp"] * p["pp"])
                p["skip_reason"] = reason
                points.append(p)
    return points
