"""Scoring designs by serving simulation, the grid and the optimiser, and the Pareto front.

A design is scored by: the physical model (:func:`jalapeno.design.physical.evaluate`) -> the limits -> its
``ChipSpec`` written as YAML under ``OUT/designs/<id>/`` -> for every workload of the spec, the layouts that
hold the weights (the fewest chips, and twice that; TP up to the heads, then PP) × the workload's
concurrencies, each simulated by the serving simulator (one place: :func:`_simulate`) -> per workload the
point meeting the SLOs (p90 TTFT and TPOT, as ``recommend``) at the lowest $/Mtok -> a weighted geometric mean
over workloads of $/Mtok, tokens/s/user and tokens/J. Each design's result is one ``score.json`` in its own
directory: a re-run skips designs already scored (resumable), and designs run on a local process pool.
"""

from __future__ import annotations

import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from jalapeno.design import coefficients as K
from jalapeno.design.physical import DesignKnobs, PhysicalDesign, evaluate, to_chipspec
from jalapeno.design.spec import INT_KNOBS, DesignSpec, DesignWorkload, knob_id
from jalapeno.errors import CapacityError, ConfigError, JalapenoError

#: statuses of a scored design
OK, LIMIT, MISS, BAD = "ok", "limit", "misses-slo", "invalid"


def _simulate(sc):
    """The one call into the serving simulator (:func:`jalapeno.sim.scenario.run_scenario`)."""
    from jalapeno.sim.scenario import flat, run_scenario

    return flat(run_scenario(sc))


def _scenario(**kw):
    from jalapeno.sim.scenario import Scenario

    return Scenario(**kw)


# ---------------------------------------------------------------------------------------------------------
def limit_problem(k: DesignKnobs, ph: PhysicalDesign, spec: DesignSpec) -> str | None:
    """Which limit the design breaks (None when it is within all)."""
    lim = spec.limits
    if lim.max_area_mm2 is not None and ph.area_mm2 > lim.max_area_mm2:
        return f"max_area_mm2: {ph.area_mm2:,.0f} > {lim.max_area_mm2:,.0f} mm²"
    if lim.max_chip_w is not None and ph.peak_w > lim.max_chip_w:
        return f"max_chip_w: {ph.peak_w:,.0f} > {lim.max_chip_w:,.0f} W"
    if lim.max_rack_w is not None and ph.peak_w * k.chips_per_rack > lim.max_rack_w:
        return f"max_rack_w: {k.chips_per_rack} x {ph.peak_w:,.0f} W > {lim.max_rack_w:,.0f} W"
    if lim.max_unit_cost_usd is not None and ph.unit_cost_usd > lim.max_unit_cost_usd:
        return f"max_unit_cost_usd: ${ph.unit_cost_usd:,.0f} > ${lim.max_unit_cost_usd:,.0f}"
    return None


def layouts(arch, chip, weights: str, max_chips: int, extra: Iterable[int] = ()) -> list[tuple[int, int]]:
    """(tp, pp) layouts: the fewest power-of-two chips whose resident memory holds the weights with 15% left
    for KV and activations, twice that, and the ``extra`` counts above it; TP up to the largest power of two
    dividing the heads, then PP."""
    need = arch.weight_bytes({"fp4": "mxfp4"}.get(weights, weights))
    have = sum(float(lv.capacity_gb.value or 0) for lv in chip.memory if lv.resident) * 1e9 * 0.85
    n = 1
    while n * have < need and n <= max_chips:
        n *= 2
    tp_max = 1
    while arch.num_heads % (tp_max * 2) == 0:
        tp_max *= 2
    out = []
    for chips in sorted({n, 2 * n, *(c for c in extra if c > 2 * n)}):
        tp = min(chips, tp_max)
        pp = chips // tp
        if chips <= max_chips and pp <= arch.num_layers and tp * pp == chips:
            out.append((tp, pp))
    return out


def _best_point(rows: list[dict], wl: DesignWorkload) -> dict | None:
    from jalapeno.report.recommend import slo_misses

    good = [r for r in rows if r.get("usd_per_mtok") is not None and not slo_misses(r, wl.slo.ttft_ms, wl.slo.tpot_ms)]
    return min(good, key=lambda r: r["usd_per_mtok"]) if good else None


def score_workload(key: str, chip_dir: str, chip, wl: DesignWorkload, spec: DesignSpec) -> dict:
    """Best SLO-meeting point of one workload on one design: $/Mtok, tokens/s/user, tokens/J, layout."""
    from jalapeno.models import load_model
    from jalapeno.economics import ChipGroup, economics

    arch = load_model(wl.model)
    price, tdp = float(chip.price.usd_per_hour.value), float(chip.power.tdp_w.value)
    rows, errors = [], []
    for tp, pp in layouts(arch, chip, spec.precision.weights, spec.limits.max_chips, wl.chips):
        for conc in wl.concurrencies:
            sc = _scenario(model=wl.model, hardware=key, tp=tp, pp=pp, precision=spec.precision.weights,
                           kv_dtype=spec.precision.kv, isl=wl.isl, osl=wl.osl, concurrency=conc,
                           num_prompts=max(spec.num_prompts, conc) if spec.num_prompts else max(8, 2 * conc),
                           goodput=[f"ttft:{wl.slo.ttft_ms}", f"tpot:{wl.slo.tpot_ms}"], hardware_dir=[chip_dir])
            try:
                m = _simulate(sc)
            except (CapacityError, ConfigError) as exc:
                errors.append(str(exc))
                break  # a layout that does not fit does not fit at higher concurrency either
            eco = economics(m, [ChipGroup(key, tp * pp, tdp, tdp, price)]).as_columns()
            rows.append({**m, **eco, "tp": tp, "pp": pp, "concurrency": conc, "num_chips": tp * pp})
    best = _best_point(rows, wl)
    if best is None:
        why = errors[0] if not rows and errors else "no layout/concurrency met the SLOs" if rows else "no layout holds the weights"
        return {"status": MISS, "reason": f"{wl.name}: {why}", "points": len(rows)}
    return {"status": OK, "usd_per_mtok": best["usd_per_mtok"], "interactivity": best["median_interactivity"],
            "tokens_per_joule": best["output_tokens_per_joule"], "layout": f"tp{best['tp']}" + (f" pp{best['pp']}" if best["pp"] > 1 else ""),
            "chips": best["num_chips"], "concurrency": best["concurrency"], "p90_tpot_ms": best["p90_tpot_ms"],
            "points": len(rows)}


def _geo(vals: list[tuple[float, float]]) -> float:
    w = sum(a for a, _ in vals)
    return math.exp(sum(a * math.log(max(v, 1e-12)) for a, v in vals) / w)


def score_design(knobs: dict[str, Any], spec_json: str, out_dir: str) -> dict:
    """Score one design (or read its earlier score); always returns a row, never raises for a bad design."""
    spec = DesignSpec.model_validate_json(spec_json)
    did = f"{knob_id(knobs)}-{spec.digest()}-{K.digest()}"  # knobs, what scores them, the physical model
    ddir = Path(out_dir) / "designs" / did
    done = ddir / "score.json"
    if done.is_file():
        return json.loads(done.read_text())
    t0 = time.perf_counter()
    row: dict[str, Any] = {"id": did, "key": knobs.get("key") or f"d-{knob_id(knobs)}", "knobs": knobs}
    try:
        k = DesignKnobs(**{**knobs, "key": row["key"]})
        ph = evaluate(k)
        row["physical"] = ph.as_dict()
        problem = limit_problem(k, ph, spec)
        if problem:
            row.update(status=LIMIT, reason=problem)
        else:
            row.update(_score_workloads(k, ph, spec, ddir))
    except JalapenoError as exc:
        row.update(status=BAD, reason=str(exc))
    row["wall_s"] = time.perf_counter() - t0
    ddir.mkdir(parents=True, exist_ok=True)
    tmp = ddir / "score.json.tmp"
    tmp.write_text(json.dumps(row, default=float))
    tmp.replace(done)
    return row


def _score_workloads(k: DesignKnobs, ph: PhysicalDesign, spec: DesignSpec, ddir: Path) -> dict:
    chip = to_chipspec(k, ph)
    ddir.mkdir(parents=True, exist_ok=True)
    write_chip_yaml(chip, ddir / f"{k.key}.yaml")
    per = {}
    for wl in spec.workloads:
        r = score_workload(k.key, str(ddir), chip, wl, spec)
        per[wl.name] = r
        if r["status"] != OK:
            return {"status": MISS, "reason": r["reason"], "workloads": per}
    agg = {m: _geo([(wl.weight, per[wl.name][m]) for wl in spec.workloads])
           for m in ("usd_per_mtok", "interactivity", "tokens_per_joule")}
    return {"status": OK, "reason": None, "workloads": per, **agg}


def write_chip_yaml(chip, path: Path) -> None:
    """A chip YAML that ``--hardware-dir`` loads (validated on read like every catalogue file)."""
    data = chip.model_dump(mode="json", exclude_none=True)
    path.write_text("# written by `jalapeno design` (status: designed; docs/design.md)\n"
                    + yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")


# ---------------------------------------------------------------------------------------------------------
def _apply(fn: Callable[[dict], dict], knobs: dict) -> dict:
    return fn(knobs)


def score_many(designs: Iterable[dict], spec: DesignSpec, out_dir: str | Path, workers: int = 1,
               progress: Callable[[dict], None] | None = None, ray: str | None = None) -> list[dict]:
    """Score designs on a local process pool (``workers`` 1 = in this process) or as Ray tasks (``ray`` =
    "auto" or a cluster address, as ``sweep --ray``); rows in input order."""
    designs = list(designs)
    sj, od = spec.model_dump_json(), str(out_dir)
    if ray:
        import functools

        from jalapeno.report.pool import _run_ray

        got: dict[str, dict] = {}

        def sink(row: dict) -> None:
            got[json.dumps(row["knobs"], sort_keys=True, default=str)] = row
            if progress:
                progress(row)

        _run_ray(designs, ray, functools.partial(score_design, spec_json=sj, out_dir=od), sink, task=_apply)
        return [got[json.dumps(d, sort_keys=True, default=str)] for d in designs]
    if workers <= 1 or len(designs) <= 1:
        rows = []
        for d in designs:
            rows.append(score_design(d, sj, od))
            if progress:
                progress(rows[-1])
        return rows
    with ProcessPoolExecutor(max_workers=min(workers, len(designs))) as ex:
        futs = [ex.submit(score_design, d, sj, od) for d in designs]
        rows = []
        for f in futs:
            rows.append(f.result())
            if progress:
                progress(rows[-1])
    return rows


def objective(row: dict, interactivity_weight: float = 0.0) -> float:
    """What the optimiser minimises: log $/Mtok − w · log tokens/s/user; infeasible designs get a penalty."""
    if row.get("status") != OK:
        return 50.0
    return math.log(row["usd_per_mtok"]) - interactivity_weight * math.log(row["interactivity"])


def de_search(spec: DesignSpec, out_dir: str | Path, workers: int = 1, interactivity_weight: float = 0.0,
              ray: str | None = None) -> list[dict]:
    """scipy ``differential_evolution`` over ``spec.ranges`` (integer knobs rounded), every evaluation a scored
    (and stored) design. Returns every row it scored."""
    from scipy.optimize import differential_evolution

    if not spec.ranges:
        raise ConfigError("--search de needs ranges: {knob: [low, high], ...} in the design spec (docs/design.md)")
    names = list(spec.ranges)
    bounds = [spec.ranges[n] for n in names]
    rows: list[dict] = []

    def to_knobs(x) -> dict:
        kn = {**spec.fixed, **{n: (int(round(v)) if n in INT_KNOBS else round(float(v), 1)) for n, v in zip(names, x)}}
        kn["key"] = f"d-{knob_id(kn)}"
        return kn

    def f_vec(xs):  # DE's vectorized mode: columns are candidates -> one pool pass per generation
        batch = [to_knobs(xs[:, j]) for j in range(xs.shape[1])]
        got = score_many(batch, spec, out_dir, workers, ray=ray)
        rows.extend(got)
        return [objective(r, interactivity_weight) for r in got]

    differential_evolution(lambda x: f_vec(x.reshape(len(names), -1))[0] if x.ndim == 1 else f_vec(x),
                           bounds, maxiter=spec.de.maxiter, popsize=spec.de.popsize, seed=spec.de.seed,
                           integrality=[n in INT_KNOBS for n in names], vectorized=True, updating="deferred",
                           polish=False, tol=0)
    return rows


# ---------------------------------------------------------------------------------------------------------
def pareto(rows: list[dict]) -> dict[str, list[dict]]:
    """Fronts of the scored designs: $/Mtok (lower) against tokens/s/user and against tokens/J (higher)."""
    from jalapeno.report.pareto import pareto_front

    ok = [r for r in rows if r.get("status") == OK]
    out = {}
    for name, x in (("interactivity", "interactivity"), ("tokens_per_joule", "tokens_per_joule")):
        idx = pareto_front([r[x] for r in ok], [r["usd_per_mtok"] for r in ok], maximize_x=True, maximize_y=False)
        out[name] = [ok[i] for i in idx]
    return out


def empty_reason(rows: list[dict]) -> str:
    """Why no design is feasible: the limit (or SLO) that removed most designs."""
    from collections import Counter

    c = Counter((r.get("reason") or "").split(":")[0] for r in rows if r.get("status") != OK)
    top = ", ".join(f"{n} design(s) by {why}" for why, n in c.most_common(3))
    return f"no feasible design: {top}; relax that limit or widen the grid"


def dedupe(rows: list[dict]) -> list[dict]:
    seen: dict[str, dict] = {}
    for r in rows:
        seen[r["id"]] = r
    return list(seen.values())


def load_rows(out_dir: str | Path) -> list[dict]:
    """Every scored design under ``OUT/designs``."""
    return [json.loads(p.read_text()) for p in sorted(Path(out_dir).glob("designs/*/score.json"))]


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


__all__ = ["score_design", "score_many", "de_search", "pareto", "layouts", "limit_problem"]
