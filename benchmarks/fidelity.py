"""Fidelity of the serving simulator against published measurements; regenerates docs/fidelity.md and its plot.

    python benchmarks/fidelity.py                    # predict every usable point, write docs/fidelity.md + PNG
    python benchmarks/fidelity.py --quick            # 4 x concurrency requests per point, print, write nothing
    python benchmarks/fidelity.py --fit h200         # re-fit a chip's named efficiency parameters (prints them)
    python benchmarks/fidelity.py --fit-frameworks   # re-fit the serving frameworks' request latencies (H200)
    python benchmarks/fidelity.py --fit-mtp          # re-fit MTP acceptance per (model, framework), write it
    python benchmarks/fidelity.py --overlay DIR      # also predict Blackwell/AMD with `jalapeno calibrate` overlays

A thin caller of the library (``jalapeno.calibration``: points, fit, report; the same code as
``jalapeno calibrate``). Hopper (``calibration.csv``): "before" = the efficiency blocks the catalogue shipped with
before calibration (:data:`BEFORE`), "after" = the current catalogue. Blackwell / AMD
(``calibration-blackwell-amd.csv``): "before" = the current catalogue, "after" = the ``--overlay`` chips
(``jalapeno calibrate --out DIR``) when given, else the catalogue again.
"""

from __future__ import annotations

import argparse
import os
import json
import sys
import time
import zlib
from collections import defaultdict
from pathlib import Path

import numpy as np

from jalapeno.calibration import Point, SimSpec, config_key, spread_pct, summarize
from jalapeno.calibration.fit import (
    Job,
    Predictor,
    apply_params,
    dedupe,
    fit,
    fit_mtp_acceptance,
    prepare,
    split_items,
)
from jalapeno.calibration.inputs import read_measurements
from jalapeno.calibration.predict import efficiency_of
from jalapeno.calibration.report import (
    BEFORE_AFTER_HEADER,
    Record,
    before_after_rows,
    concurrency_band,
    markdown_table,
    records,
    scatter,
    summary_rows,
)
from jalapeno.hardware.schema import Efficiency

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "benchmarks" / "data" / "calibration.csv"
BA_CSV = ROOT / "benchmarks" / "data" / "calibration-blackwell-amd.csv"
DOC = ROOT / "docs" / "fidelity.md"
PNG = ROOT / "docs" / "fidelity-scatter.png"

#: the efficiency blocks as shipped before calibration (MAMF / D2D-copy / NVLink figures, 40 us step guess)
BEFORE = {
    "h100": dict(compute={"bf16": 0.803, "fp16": 0.803, "fp8": 0.709}, memory={"hbm": 0.9}, scale_up=0.87,
                 step_overhead_us=40.0, layer_overhead_us=0.0),
    "h200": dict(compute={"bf16": 0.8, "fp16": 0.8, "fp8": 0.734}, memory={"hbm": 0.9}, scale_up=0.87,
                 step_overhead_us=40.0, layer_overhead_us=0.0),
}
#: metrics the targets are about
HEADLINE = ("output_tput_per_gpu", "total_tput_per_gpu", "median_tpot", "median_ttft")
#: Hopper InferenceX rows from these months are held out of the fit (newest framework versions)
HELD_OUT_MONTHS = ("2026-03", "2026-04", "2026-05")
#: Blackwell / AMD split (jalapeno calibrate's default): rows from this month on are held out
BA_SPLIT = "date:2026-01"
#: parameters the Hopper fit moved (reported against BEFORE); compute/HBM fractions stay at kernel values
BOUNDS = ("scale_up", "step_overhead_us", "layer_overhead_us")
FIXED = ("compute.fp8", "compute.bf16", "memory.hbm")

Item = tuple[Point, SimSpec]


# ------------------------------------------------------------------------------------------------ helpers
def efficiencies(which: str) -> dict[str, Efficiency]:
    """Efficiency per Hopper chip: ``before`` (shipped values) or ``after`` (current catalogue)."""
    return {c: apply_params(efficiency_of(c), _flat(BEFORE[c])) if which == "before" else efficiency_of(c)
            for c in ("h100", "h200")}


def _flat(d: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in v.items() if kk != "fp16"})
        else:
            out[k] = v
    return out


def predict(pred: Predictor, items: list[Item], effs: dict[str, Efficiency], per: int | None, label: str,
            **opts) -> list[dict]:
    return pred.run([Job(s, effs[s.chip], per, **opts) for _, s in items], label)


def split_of(p: Point, s: SimSpec) -> str:
    if s.chip in ("b200", "mi355x"):
        if s.spec_tokens:  # every aggregated MTP row is from 2026-01 on: half the configurations (by hash) fit
            held = zlib.crc32(repr(config_key(s)).encode()) % 2 == 1
            return f"{'held-out' if held else 'fit'}: {s.chip.upper()} InferenceX MTP (hash half)"
        held = p.col("date")[:7] >= BA_SPLIT.split(":")[1]
        return f"{'held-out' if held else 'fit'}: {s.chip.upper()} InferenceX {'2026-01+' if held else '< 2026-01'}"
    if s.kind == "offline":
        return "held-out: TRT-LLM offline"
    if s.kind == "nim":
        return "held-out: NIM"
    if s.spec_tokens:
        return "held-out: InferenceX MTP"
    if s.chip == "h100":
        return "held-out: H100 (fractions copied from H200)"
    if p.col("date")[:7] in HELD_OUT_MONTHS:
        return "held-out: H200 InferenceX 2026-03+"
    return "fit: H200 InferenceX < 2026-03"


def _progress(label: str, done: int, total: int) -> None:
    if done == total or done % 50 == 0:
        print(f"  {label}: {done}/{total}", file=sys.stderr)


# ------------------------------------------------------------------------------------------------ fits
def run_fit(usable: list[Item], chip: str, names: list[str], workers: int) -> dict:
    """Library fit of ``names`` on ``chip``'s fit split (Hopper: :func:`split_of`; others: :data:`BA_SPLIT`)."""
    mine = [it for it in usable if it[1].chip == chip and not it[1].spec_tokens and it[1].kind == "ix"]
    if chip in ("h100", "h200"):
        train = [it for it in mine if split_of(*it).startswith("fit")]
        held = [it for it in mine if not split_of(*it).startswith("fit")]
    else:
        train, held = split_items(mine, BA_SPLIT)
    rep = fit(dedupe(train), dedupe(held), chip, names, workers=workers, progress=_progress)
    return rep.to_json()


#: MTP fit: random configuration split of every InferenceX aggregated MTP row (Hopper, B200, MI355X), seed 0
MTP_SPLIT = "random:0.5"


def _mtp_split(usable: list[Item]) -> tuple[list[Item], list[Item]]:
    mtp = dedupe([it for it in usable if it[1].spec_tokens and it[1].kind == "ix" and it[1].disagg is None])
    return split_items(mtp, MTP_SPLIT, seed=0)


def mtp_tables(items: list[Item], workers: int, prompts: int = 4) -> dict:
    """Error tables of ``items`` (MTP points) before (the default acceptance) and after (the fitted one in
    mtp_acceptance.yaml), over all of them and by chip (``"after b200"``, ...)."""
    from dataclasses import replace

    from jalapeno.calibration.fit import error_table
    from jalapeno.calibration.mtp import DEFAULT_ACCEPTANCE, load_mtp_fits

    load_mtp_fits.cache_clear()
    acc = {k: f.acceptance for k, f in load_mtp_fits().items()}
    out = {}
    with Predictor(workers, _progress) as pred:
        for name, use_fit in (("before", False), ("after", True)):
            jobs = [Job(replace(s, spec_acceptance=(acc.get((s.model, s.framework), DEFAULT_ACCEPTANCE)
                                                    if use_fit else DEFAULT_ACCEPTANCE,) * s.spec_tokens),
                        efficiency_of(s.chip), prompts) for _, s in items]
            preds = pred.run(jobs, f"MTP tables {name}")
            out[name] = _summary(error_table(items, preds))
            for chip in sorted({s.chip for _, s in items}):  # and by chip
                sel = [i for i, (_, s) in enumerate(items) if s.chip == chip]
                out[f"{name} {chip}"] = _summary(error_table([items[i] for i in sel], [preds[i] for i in sel]))
    return out


def _summary(table: dict) -> dict:
    return {m: {"n": e.n, "median_abs_pct": round(e.median_abs, 1), "p90_abs_pct": round(e.p90_abs, 1),
                "median_signed_pct": round(e.median_signed, 1)} for m, e in table.items()}


def run_fit_mtp(usable: list[Item], workers: int, max_nfev: int = 5, per_group: int = 10, prompts: int = 4) -> dict:
    """One MTP acceptance per (model, framework family) on the fit half of a random configuration split of the
    InferenceX aggregated MTP rows (:data:`MTP_SPLIT`; at most ``per_group`` configurations per pair searched,
    evenly spread); writes jalapeno/calibration/mtp_acceptance.yaml and returns the fits with the held-out
    error tables before (the default acceptance) and after (the fitted one)."""
    from jalapeno.calibration.fit import subsample
    from jalapeno.calibration.mtp import write_mtp_fits

    train, held = _mtp_split(usable)
    groups: dict[tuple[str, str], list[Item]] = defaultdict(list)
    for it in train:
        groups[(it[1].model, it[1].framework)].append(it)
    search = [it for g in sorted(groups) for it in subsample(groups[g], per_group)]
    t0 = time.time()
    fits = fit_mtp_acceptance(search, None, workers=workers, search_prompts=prompts, max_nfev=max_nfev,
                              progress=_progress)
    for f in fits:
        f.source = (f"fitted on {f.points} of {len(groups[(f.model, f.framework)])} fit-split configurations "
                    f"(InferenceX aggregated MTP rows, {MTP_SPLIT} configuration split, seed 0; "
                    "python benchmarks/fidelity.py --fit-mtp)")
    write_mtp_fits(fits)
    return {"fits": [f.__dict__ for f in fits], "n_fit": len(train), "n_search": len(search), "n_held": len(held),
            "held_out": mtp_tables(held, workers, prompts), "wall_s": round(time.time() - t0, 1),
            "prompts_per_slot": prompts}


# ------------------------------------------------------------------------------------------------ main
def load(path: Path) -> tuple[list[Item], dict[str, int], dict[str, int], int]:
    points = read_measurements(path)
    prep = prepare(points)
    excluded_rows: dict[str, int] = defaultdict(int)
    for p in points:  # rows per exclusion reason, for the table
        from jalapeno.calibration import Excluded, to_sim_spec

        s = to_sim_spec(p)
        reason = s.reason if isinstance(s, Excluded) else s.not_simulated
        if reason:
            excluded_rows[reason] += len(p.ids)
    return prep.items, prep.excluded, dict(excluded_rows), len(points)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", type=Path, default=CSV)
    ap.add_argument("--ba-csv", type=Path, default=BA_CSV)
    ap.add_argument("--fit", metavar="CHIP", help="re-fit CHIP's efficiency parameters on its fit split, print them")
    ap.add_argument("--params", default="scale_up,step_overhead_us,layer_overhead_us", help="with --fit")
    ap.add_argument("--fit-frameworks", action="store_true",
                    help="fit each serving framework's request latency on the H200 fit rows, print them and stop")
    ap.add_argument("--fit-mtp", action="store_true", help="fit MTP acceptance per (model, framework), write it")
    ap.add_argument("--mtp-per-group", type=int, default=10, help="--fit-mtp: configurations searched per pair")
    ap.add_argument("--mtp-prompts", type=int, default=4, help="--fit-mtp: requests per concurrency slot")
    ap.add_argument("--mtp-tables", action="store_true",
                    help="held-out MTP error tables, default vs fitted acceptance (2 requests per slot); print, stop")
    ap.add_argument("--overlay", type=Path, help="`jalapeno calibrate --out` directory: Blackwell/AMD 'after'")
    ap.add_argument("--quick", action="store_true", help="4 x concurrency requests per point; write nothing")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also dump per-point predictions here")
    ap.add_argument("--doc", type=Path, default=DOC, help="markdown to write (the scatter PNG goes next to it)")
    a = ap.parse_args(argv)

    t0 = time.time()
    usable, excluded, excluded_rows, n_points = load(a.csv)
    ba, ba_excluded, ba_excluded_rows, ba_n = load(a.ba_csv)
    print(f"Hopper: {n_points} points, {len(usable)} usable; Blackwell/AMD: {ba_n} points, {len(ba)} usable",
          file=sys.stderr)
    if a.fit:
        print(json.dumps(run_fit(usable + ba, a.fit, a.params.split(","), a.workers), indent=1))
        return 0
    if a.fit_frameworks:
        fws = sorted({s.framework for _, s in usable if s.kind == "ix" and s.framework in ("vllm", "sglang", "trt")})
        print(json.dumps(run_fit(usable, "h200", [f"request_overhead_ms@{f}" for f in fws], a.workers), indent=1))
        return 0
    if a.fit_mtp:
        print(json.dumps(run_fit_mtp(usable + ba, a.workers, max_nfev=3, per_group=a.mtp_per_group,
                                     prompts=a.mtp_prompts), indent=1))
        return 0
    if a.mtp_tables:
        train, held = _mtp_split(usable + ba)
        print(json.dumps({"n_fit": len(train), "n_held": len(held), "held_out": mtp_tables(held, a.workers, 2)},
                         indent=1))
        return 0

    per = 4 if a.quick else None
    ba_after = {c: efficiency_of(c) for c in ("b200", "mi355x")}
    if a.overlay:
        from jalapeno.hardware.catalog import get_chip

        ba_after.update({c: get_chip(c, [a.overlay]).efficiency for c in ba_after})
    with Predictor(a.workers, _progress) as pred:
        preds = {w: predict(pred, usable, efficiencies(w), per, f"Hopper {w}") for w in ("before", "after")}
        if not a.quick:  # the same "after" efficiencies with the chips' generic request overhead (no framework)
            preds["generic"] = predict(pred, usable, efficiencies("after"), per, "Hopper generic", frameworks=False)
        ba_preds = {"before": predict(pred, ba, {c: efficiency_of(c) for c in ba_after}, per, "B200/MI355X")}
        ba_preds["after"] = ba_preds["before"] if not a.overlay else predict(pred, ba, ba_after, per, "overlay")
    errs = {w: records(usable, preds[w]) for w in preds}
    ba_errs = {w: records(ba, ba_preds[w]) for w in ba_preds}
    failures = [(p.label, pr["error"]) for (p, _), pr in zip(usable + ba, preds["after"] + ba_preds["after"])
                if "error" in pr]
    wall = time.time() - t0
    print(f"done in {wall:.0f} s", file=sys.stderr)
    if a.json:
        a.json.write_text(json.dumps([{"label": p.label, "measured": p.metrics, "before": b, "after": af}
                                      for (p, _), b, af in zip(usable + ba, preds["before"] + ba_preds["before"],
                                                               preds["after"] + ba_preds["after"])], indent=0))
    hdr = ["set", "metric", "n", "median |%|", "p90 |%|", "median signed %"]
    print(markdown_table(hdr, summary_rows(errs["after"], lambda r: f"Hopper {split_of(r.point, r.spec)}", HEADLINE)))
    print(markdown_table(hdr, summary_rows(ba_errs["after"], lambda r: split_of(r.point, r.spec), HEADLINE)))
    if a.quick:
        return 0
    spreads = measurement_spread(usable)
    a.doc.parent.mkdir(parents=True, exist_ok=True)
    write_doc(a.doc, usable, errs, excluded, excluded_rows, failures, spreads, wall,
              ba=(ba, ba_errs, ba_excluded, ba_excluded_rows, ba_n, a.overlay))
    scatter(errs["after"] + ba_errs["after"], a.doc.parent / PNG.name,
            "Jalapeño simulator vs published measurements (Hopper after calibration, B200/MI355X current; dotted: ±30%)")
    return 0


def _current_params(chip: str) -> dict[str, float]:
    e = efficiency_of(chip)
    return {"compute.fp8": e.compute.get("fp8", e.compute_default), "compute.bf16": e.compute.get("bf16", e.compute_default),
            "memory.hbm": e.memory.get("hbm", e.memory_default), "scale_up": e.scale_up,
            "step_overhead_us": e.step_overhead_us, "layer_overhead_us": e.layer_overhead_us}


def measurement_spread(usable: list[tuple[Point, SimSpec]]) -> list[list[str]]:
    """Spread (max - min) / median of the same configuration measured more than once, per metric."""
    groups: dict[tuple, list[Point]] = defaultdict(list)
    for p, s in usable:
        groups[config_key(s)].append(p)
    by: dict[str, list[float]] = defaultdict(list)
    nconf = 0
    for g in groups.values():
        if len(g) < 2:
            continue
        nconf += 1
        for m in HEADLINE + ("median_e2e_latency",):
            v = [p.metrics[m] for p in g if m in p.metrics]
            if len(v) >= 2:
                by[m].append(spread_pct(v))
    rows = []
    for m, v in by.items():
        rows.append([m, str(len(v)), f"{np.median(v):.1f}", f"{np.percentile(v, 90):.1f}", f"{max(v):.0f}"])
    return rows


def ttft_gap_rows(errs: list[Record]) -> list[list[str]]:
    """Low-concurrency TTFT (c <= 8, little queueing): measured - predicted (ms) and measured / predicted, by
    framework, model, layout and ISL. A constant gap = per-request latency; a constant ratio = prefill speed."""
    g: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for r in errs:
        s = r.spec
        if r.metric == "median_ttft" and s.kind == "ix" and s.concurrency <= 8 and not s.spec_tokens:
            lay = f"tp{s.layout.tp}" + (f" ep{s.layout.ep}" if s.layout.ep > 1 else "") + (" dpa" if s.layout.dp_attention else "")
            g[(s.framework, s.model, s.chip, lay, s.isl)].append((r.meas, r.pred))
    rows = []
    for k in sorted(g):
        m = np.array(g[k])
        rows.append([*map(str, k), str(len(m)), f"{np.median(m[:, 0]) * 1e3:.0f}", f"{np.median(m[:, 1]) * 1e3:.0f}",
                     f"{np.median(m[:, 0] - m[:, 1]) * 1e3:.0f}", f"{np.median(m[:, 0] / m[:, 1]):.1f}"])
    return rows


TARGETS = {"output_tput_per_gpu": 15.0, "total_tput_per_gpu": 15.0, "median_tpot": 15.0, "median_ttft": 30.0}


def targets_text(ea: list[Record]) -> str:
    """One line per target metric: median |error| after calibration over all usable points, and met or not."""
    lines = ["## Targets (median |error| over all usable points, after calibration)\n"]
    for m, lim in TARGETS.items():
        v = summarize([r.pct for r in ea if r.metric == m]).median_abs
        lines.append(f"* `{m}`: {v:.1f}% (target <= {lim:.0f}%): {'met' if v <= lim else '**not met**'}")
    return "\n".join(lines) + "\n"


def write_doc(doc: Path, usable, errs, excluded, excluded_rows, failures, spreads, wall, ba) -> None:
    eb, ea = errs["before"], errs["after"]
    splits = {id(p): split_of(p, s) for p, s in usable}
    hdr_ba = BEFORE_AFTER_HEADER
    fr = _current_params("h200")
    fr100 = _current_params("h100")
    parts = [DOC_HEAD.format(n_points=len(usable) + sum(excluded.values()), n_usable=len(usable), wall=wall,
                             load=os.getloadavg()[0],
                             ba_points=ba[4], ba_usable=len(ba[0]))]
    parts.append(targets_text(ea))
    parts.append("## Headline (all usable points)\n")
    parts.append(markdown_table(hdr_ba, before_after_rows(eb, ea, lambda r: "all")))
    parts.append("\n## By split (fit vs held-out)\n")
    parts.append(markdown_table(hdr_ba, before_after_rows(eb, ea, lambda r: splits[id(r.point)])))
    parts.append("\n## By model and chip\n")
    parts.append(markdown_table(hdr_ba, before_after_rows(eb, ea, lambda r: f"{r.spec.model} {r.spec.chip}")))
    parts.append("\n## By framework\n")
    parts.append(markdown_table(hdr_ba, before_after_rows(eb, ea, lambda r: f"{r.spec.framework} ({r.spec.kind})")))
    parts.append("\n## By concurrency (InferenceX)\n")
    parts.append(markdown_table(hdr_ba, before_after_rows(
        eb, ea, lambda r: f"c={r.spec.concurrency:>3}" if r.spec.kind == "ix" else None)))
    parts.append("\n## By concurrency band and ISL (InferenceX, headline metrics)\n")
    parts.append(markdown_table(hdr_ba, before_after_rows(
        eb, ea, lambda r: f"{concurrency_band(r.spec.concurrency)}, ISL {r.spec.isl}" if r.spec.kind == "ix" else None,
        HEADLINE)))
    parts.append("\n## TTFT at low concurrency (c <= 8): where the time goes\n")
    parts.append(markdown_table(["framework", "model", "chip", "layout", "ISL", "n", "measured ms", "predicted ms",
                        "gap ms", "ratio"], ttft_gap_rows(ea)))
    if "generic" in errs:
        from jalapeno.perf.frameworks import FRAMEWORKS

        parts.append("\n## Serving-framework profiles (`--framework`)\n")
        parts.append(FRAMEWORK_TEXT.format(values=", ".join(f"{fw.key} {fw.request_overhead_ms:.0f} ms" for fw in FRAMEWORKS)))
        eg = errs["generic"]
        rows = []
        for metric in ("median_ttft", "median_e2e_latency"):
            for grp in ["all", *sorted({splits[id(p)] for p, _ in usable})]:
                sel = lambda ev: [r.pct for r in ev if r.metric == metric and  # noqa: E731
                                  (grp == "all" or splits[id(r.point)] == grp)]
                if not sel(ea):
                    continue
                g, f = summarize(sel(eg)), summarize(sel(ea))
                rows.append([grp, metric, str(len(sel(ea))), f"{g.median_abs:.1f}", f"{g.p90_abs:.1f}",
                             f"{g.median_signed:+.1f}", f"{f.median_abs:.1f}", f"{f.p90_abs:.1f}", f"{f.median_signed:+.1f}"])
        parts.append(markdown_table(["group", "metric", "n", "generic median |%|", "generic p90 |%|", "generic signed %",
                            "profiles median |%|", "profiles p90 |%|", "profiles signed %"], rows))
    parts.append("\n## Spread of the measurements themselves\n")
    parts.append("Same configuration (model, chip, layout, framework family, ISL/OSL, concurrency) measured on "
                 "different dates / framework versions: (max - min) / median, in %.\n")
    parts.append(markdown_table(["metric", "configs with reruns", "median spread %", "p90 spread %", "max %"], spreads))
    parts.append("\n## Excluded points\n")
    parts.append(markdown_table(["reason", "points", "rows"],
                       [[k, str(v), str(excluded_rows[k])] for k, v in sorted(excluded.items(), key=lambda t: -t[1])]))
    if failures:
        parts.append("\nPoints the simulator could not run: " + "; ".join(f"{l}: {e}" for l, e in failures[:10]))
    parts.append("\n## Fitted efficiency (current catalogue)\n")
    parts.append(markdown_table(["parameter", "H200 before", "H200 after", "H100 before", "H100 after"], [
        [k, _fmt(_before_param("h200", k)), _fmt(fr[k]), _fmt(_before_param("h100", k)), _fmt(fr100[k])] for k in (*FIXED, *BOUNDS)]))
    parts.append(DOC_TAIL)
    parts.append(blackwell_amd_section(*ba))
    # the last section belongs to benchmarks/nongpu_check.py (chips without serving data): keep it
    kept = doc.read_text(encoding="utf-8").partition("## Chips without serving calibration") if doc.exists() else ("", "", "")
    doc.write_text("\n".join(parts) + "\n" + ("\n" + kept[1] + kept[2] if kept[1] else ""))


def _before_param(chip: str, k: str) -> float:
    return _flat(BEFORE[chip])[k]


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def blackwell_amd_section(ba, ba_errs, excluded, excluded_rows, n_points, overlay) -> str:
    """Tables for B200 / MI355X: by chip and split, framework, model, concurrency band and ISL."""
    from jalapeno.calibration.mtp import load_mtp_fits

    eb, ea = ba_errs["before"], ba_errs["after"]
    parts = [BA_HEAD.format(n_points=n_points, n_usable=len(ba), split=BA_SPLIT,
                            after=f"the `jalapeno calibrate` overlay in `{overlay}`" if overlay else
                            "the same (no overlay given: both columns are the current catalogue)")]

    def tab(title: str, group, metrics=HEADLINE) -> None:
        parts.append(f"\n### {title}\n")
        parts.append(markdown_table(BEFORE_AFTER_HEADER, before_after_rows(eb, ea, group, metrics)))

    tab("By chip and split (fit vs held-out)", lambda r: split_of(r.point, r.spec), None)
    tab("By chip and framework", lambda r: f"{r.spec.chip} {r.spec.framework}" + (" MTP" if r.spec.spec_tokens else ""))
    tab("By chip and model", lambda r: f"{r.spec.chip} {r.spec.model}")
    tab("By chip and concurrency band", lambda r: f"{r.spec.chip} {concurrency_band(r.spec.concurrency)}")
    tab("By chip and ISL/OSL", lambda r: f"{r.spec.chip} {r.spec.isl}/{r.spec.osl}")
    fits = load_mtp_fits()
    parts.append("\n### MTP acceptance (fitted, `jalapeno/calibration/mtp_acceptance.yaml`)\n")
    parts.append(MTP_TEXT)
    parts.append(markdown_table(["model", "framework", "acceptance", "fit configurations", "source"],
                                [[f.model, f.framework, f"{f.acceptance:.3f}", str(f.points), f.source]
                                 for f in fits.values()]) if fits else
                 "**No fitted values in this run**: every MTP row was predicted with the default acceptance 0.75 "
                 "(run `python benchmarks/fidelity.py --fit-mtp`, then regenerate).")
    parts.append("\n### Excluded points\n")
    parts.append(markdown_table(["reason", "points", "rows"], [[k, str(v), str(excluded_rows.get(k, 0))] for k, v in
                                                              sorted(excluded.items(), key=lambda t: -t[1])]))
    return "\n".join(parts) + "\n"


BA_HEAD = """
## Blackwell and AMD (B200, MI355X): `benchmarks/data/calibration-blackwell-amd.csv`

{n_points} measured points ({n_usable} predicted), SemiAnalysis InferenceX rows dated before 2026-03: aggregated
(predicted like the Hopper InferenceX rows above), MTP (`spec_decoding=mtp`: one draft token, an acceptance
per model and framework, below) and disaggregated. Disaggregated rows are parsed into their prefill and decode
pools (`jalapeno.calibration.points.DisaggLayout`: workers, per-worker chips = pool GPUs / workers, EP,
dp-attention) and simulated pool by pool, but kept out of these tables: they have their own section
(Disaggregated, below; `benchmarks/disagg_fidelity.py`). Split as `jalapeno calibrate --split {split}` (rows from 2026-01 on held out). "before" = the
current catalogue (H200's fitted overheads transferred), "after" = {after}.
Framework `atom` (AMD) has no serving-framework profile: it runs with the chip's generic request latency; the
disaggregated stacks (dynamo-sglang, dynamo-trt, mori-sglang, sglang-disagg) take their engine's.
"""

MTP_TEXT = """InferenceX does not publish MTP's acceptance. Each row runs the draft length its benchmark script
launched (`jalapeno.calibration.points.mtp_draft_tokens`: TensorRT-LLM 3, 1 with attention DP; SGLang 2; ATOM 1), each
draft pass priced as the MTP block it runs (`jalapeno.perf.mtp`), and ONE acceptance probability per (model, serving
framework), the same at every draft position, is FITTED, not published: on the fit half of
a random configuration split (seed 0) of every InferenceX aggregated MTP row (H200, B200, MI355X; the other half is
held out): `python benchmarks/fidelity.py --fit-mtp`, i.e. `jalapeno.calibration.fit.fit_mtp_acceptance`: a bounded
search on the soft-L1 cost of ln(pred/meas) of output tok/s per GPU and median TPOT, the chips' catalogue
efficiency held fixed. Each value is written to `mtp_acceptance.yaml` with status `fitted` and its source. A
fitted value also absorbs what the simulator still misprices in MTP, so read it as an effective acceptance, not a
measured one. Disaggregated stacks keep the default (their engine's value made
held-out disaggregated TPOT worse).
"""


FRAMEWORK_TEXT = """InferenceX rows are predicted with their serving framework's profile (`jalapeno.perf.frameworks`: {values}):
the per-request front-end latency (HTTP, tokenization, admission, detokenization, first-chunk streaming) that
the chip's generic `efficiency.request_overhead_ms` (40 ms) stands for when no framework is named. Each value is
fitted on that framework's fit-split configurations only (then: the value minimising the median |ln(pred/meas)| of
median TTFT, 10 ms grid then +-5 ms; now `python benchmarks/fidelity.py --fit-frameworks`, a bounded search on
the soft-L1 cost of ln(pred/meas) of median TTFT); nothing else moves, and H100
and later H200 rows are held out. NIM and the offline table keep the generic value. "generic" = the same
predictions with the generic 40 ms for every row (what `jalapeno simulate` does without `--framework`).
"""

DOC_HEAD = """# Simulator fidelity against published measurements

Generated by `python benchmarks/fidelity.py` ({wall:.0f} s on 2 CPU cores, load average {load:.0f}) from
`benchmarks/data/calibration.csv` ({n_points} measured Hopper points; {n_usable} predicted) and
`benchmarks/data/calibration-blackwell-amd.csv` ({ba_points} B200 / MI355X points; {ba_usable} predicted; last
section). Each usable point is simulated in-process: the engine's
scheduler and KV block manager over `SimBackend` and the roofline cost model (`jalapeno.perf`), i.e. what
`jalapeno simulate` runs. Errors are `100 (predicted - measured) / measured`; tables give the median and 90th
percentile of |error| and the median signed error (positive throughput or negative latency errors mean the
simulator is optimistic, i.e. too fast). "before" = the catalogue's uncalibrated efficiency blocks, "after" =
the calibrated ones now in `h100.yaml` / `h200.yaml`. Scatter: `docs/fidelity-scatter.png`.

![predicted vs measured](fidelity-scatter.png)

## How points are predicted

* **InferenceX** (IXAPI / IXRUN, aggregated single node): layout from `parallelism` (`TP8 EP8 DPattn=True` ->
  tp 8, ep 8, attention data-parallel); random lengths uniform in [0.8 L, L]; closed loop at `concurrency`,
  10 x concurrency requests; engine limits 8192 batched tokens, max(1024, concurrency) sequences (the simulator's defaults, `jalapeno.sim.SimLimits`); KV cache bf16.
  `spec_decoding=mtp` rows run DeepSeek MTP speculative decoding with 1 draft token (R1 ships one MTP module)
  accepted with probability 0.75 (1.75 tokens per step; InferenceX does not publish either: an assumption) and
  are reported separately.
* **TRT-LLM** offline max throughput (fixed lengths): closed loop with as many sequences as the KV cache holds
  (cap 2048), 3 x that many requests; output tokens/s per GPU compared. `DEP8` = tp 8, ep 8, attention DP. The
  v1.0-era table reports the whole TP group's output throughput: divided by `num_chips`.
* **NIM** (Llama-3.3-70B FP8, TP2 on 2 x H100, fixed ISL/OSL, concurrency 1-250): closed loop, 10 x concurrency
  requests; its TTFT and ITL are *means* (compared to the simulator's means), throughput is output tok/s of
  the deployment (per GPU here).
* Precision: DeepSeek-R1 FP8 and GPT-OSS MXFP4 run their native checkpoints (the TRT-LLM "FP8" label for
  GPT-OSS is its activation/KV format); Llama / Qwen FP8 rows quantize all linear layers to FP8.
"""

DOC_TAIL = """
## What was fitted and how

* Fitted: three fields of the H200 `efficiency` block — `scale_up`, `step_overhead_us`, `layer_overhead_us`.
  Nothing per point, per model or per framework. Result: scale_up 0.87 -> **0.50**, step overhead 40 ->
  **120 us**, layer overhead 0 -> **100 us** (x 61 layers = 6.1 ms per DeepSeek-R1 step, x 36 = 3.6 ms per
  GPT-OSS step). H100 takes the same three values unchanged (same NVLink4 switch, same serving kernels).
* Kept at their measured kernel values (not fitted): `compute` (MAMF best-shape GEMM: H100 0.803 bf16 / 0.709
  fp8, H200 0.80 / 0.734) and `memory.hbm` 0.90 (D2D copy) — the values every other chip in the catalogue uses,
  so chips stay comparable (the what-if above shows what freeing them would do).
* Data: H200 InferenceX aggregated rows without MTP dated before 2026-03 — 234 rows, 82 configurations, each
  configuration one point (median of its reruns), 4 x concurrency requests per point during the search.
* Objective: mean over {output tok/s per GPU, median TPOT} of the median |ln(predicted / measured)|. TTFT is
  *not* in the objective: its miss is mostly a per-request latency the model lacks (below); with TTFT in the
  objective the search only inflates the per-step overheads (step overhead -> 240 us) and worsens TPOT p90.
* Search (at the time): a bounded coordinate search (12% multiplicative steps on scale_up within 0.5-0.9, 40 us
  additive steps on the overheads, halved after a pass without improvement), 30 evaluations, objective 0.141 ->
  0.125, from a start chosen by a coarse manual probe. The fit is now library code (`jalapeno.calibration.fit`,
  the same as `jalapeno calibrate`: bounded soft-L1 least squares on ln(pred/meas)); re-run it with
  `python benchmarks/fidelity.py --fit h200 --params scale_up,step_overhead_us,layer_overhead_us`.

* Physical reading: 100 us per layer is ~10-20 small kernels per decoder layer at 5-10 us each at small batch
  (norms, rotary, router/top-k, quantize, all-reduce launch + sync) that a roofline prices at ~0; 120 us per
  step is scheduling, sampling and host<->device sync with CUDA graphs. scale_up 0.5 is NCCL/custom all-reduce
  bus bandwidth at the 0.1-50 MB messages of a serving step, well below the 0.87 large-copy asymptote.
* Held out: all H100 rows, H200 InferenceX rows from 2026-03 on (newer framework versions), MTP rows, the
  TRT-LLM offline table and the NIM table (other frameworks and workload shapes).
* After that fit, two changes the evidence below called for were made (then the whole benchmark was re-run;
  the tables above are that run): (1) a per-request serving latency, `efficiency.request_overhead_ms` = **40 ms**
  (HTTP, tokenization, admission; in TTFT and E2E, not in step time), set from the median measured-minus-simulated
  TTFT gap on these rows (74 ms median, 26-190 ms p10-p90; 40 ms minimised median |TTFT error| without raising
  its p90: 66% -> 31%) and carried to every chip in the catalogue as the *generic* serving front end; (2)
  MXFP4 on a chip without FP4 units now runs at the bf16 rate (W4A16, as vLLM's Hopper kernels do), item 2(a)
  below. Throughput and TPOT errors did not move (11.2% / 11.1%); TTFT went from 67% to 31% (target 30%: just
  missed); NIM's mean TTFT, already close, got worse (+41%: its 5k-token prompts make the fixed 40 ms too much).
* Then (3) serving-framework profiles (`jalapeno simulate --framework vllm|sglang|trt-llm`,
  `jalapeno.perf.frameworks`): the low-concurrency TTFT gap is a property of the serving front end, not of the
  chip — about 30 ms for vLLM and 60-80 ms for SGLang and TensorRT-LLM at ISL 1k on every TP size — so one
  generic value is too long for vLLM rows and too short for the others. One request overhead per framework was
  fitted on the fit split only (`--fit-frameworks`; 51 vLLM, 15 SGLang and 16 TRT-LLM configurations: vLLM
  30 ms, SGLang 70 ms, TensorRT-LLM 65 ms) and InferenceX rows are predicted with their framework's profile.
  Step times do not change (throughput and TPOT within the noise of the closed loop); the table "Serving-framework
  profiles" above compares TTFT and E2E with and without the profiles, split by fit and held-out rows.
* Then (4) expert-parallel load imbalance in the cost model (item 3 below; no parameter, nothing refitted):
  on all usable points output tok/s per GPU 11.2% -> 10.5% median |error| (p90 41.5% -> 33.8%), median TPOT
  11.2% -> 9.5% (p90 28.2% -> 21.7%), E2E 11.8% -> 10.4%; the "before" columns include it too.

## Remaining error sources (evidence) and recommended modelling changes

1. **TTFT: the per-request latency is the serving framework's (done: `--framework`).** At concurrency <= 8
   (little queueing; table above) the measured TTFT exceeds a pure-engine prediction by 20-37 ms at ISL 1k for
   vLLM GPT-OSS at every TP and by 60-80 ms for SGLang / TRT-LLM DeepSeek-R1, a gap that does not shrink with TP,
   i.e. not prefill work: HTTP + tokenizing ~1k random tokens + detokenizing + engine IPC + first-chunk
   streaming. The simulator now has it (`efficiency.request_overhead_ms`, generic 40 ms, replaced by a framework
   profile when one is named). What remains of the TTFT error grows with ISL (item 2).
2. **Prefill is priced 1.5-4.6x too fast (perf).** The low-concurrency TTFT ratio grows with ISL for GPT-OSS
   (H200 tp1: 3.5x at 1k, 4.6x at 8k), so part of the gap scales with prefill work. GPT-OSS's MXFP4 experts are
   priced at the FP8 rate on Hopper (`perf/dtypes.py` chain mxfp4 -> fp4, fp8, ...), but Hopper has no FP4 MMA
   and vLLM's Hopper MXFP4 MoE kernels (Triton matmul_ogs / Marlin) are weight-only W4A16: BF16 rate. Recommended:
   (a) mxfp4 on a chip without fp4 -> the bf16 chain, as int4; (b) a grouped-GEMM efficiency curve for
   `moe_experts`, e.g. `eff = eff_c * m / (m + m_half)` with `m` = tokens per expert and `m_half` ~ 64-128,
   which a roofline with one large-GEMM fraction cannot express. Evidence: freeing the compute fractions drives
   them to the 0.30 floor (what-if table; InferSim's default serving MFU is 0.35) and fixes the fit-set p90
   (45% -> 18%) but generalises worse to H100 and to later dates, so the loss is workload-shaped (a curve), not
   a chip constant. The same mechanism explains the largest InferenceX misses — prefill-heavy 8k/1k at
   concurrency 32-64 (GPT-OSS H200 tp1/tp2 +66-79% output tok/s with TPOT ~40% too short, DeepSeek-R1 TRT-LLM
   attention-DP +54%: decode steps that carry 8k-token prefill chunks are priced too cheaply) — and the TRT-LLM
   offline GPT-OSS rows (+100-200% at 400-1,400 sequences in flight, where the MoE GEMMs are compute-bound).
3. **Expert-parallel load imbalance (done: `perf/ops.py` `Routing`).** DeepSeek-R1 with expert parallelism
   (TRT-LLM TP8 EP8) was predicted ~30% too fast on output tok/s vs ~12% for SGLang TP8 on the same model and
   chip: the busiest EP rank sets the step. The cost model now prices `moe_experts` time on the busiest rank
   of a uniform top-k router (expected max of the per-rank touched experts and (token, expert) pairs; a lower
   bound, real routers are skewed); FLOPs and energy stay the average rank's. Nothing was refitted. Effect on
   the TRT-LLM InferenceX rows: output tok/s +29.9% -> +16.3% median signed, TPOT -20.8% -> -12.0%; offline DEP8
   1k/1k rows at ~1,700 sequences stay fast (compute-bound, where uniform routing is nearly balanced).
   Remaining: a dispatch/combine latency term and router skew (hot experts).
4. **MTP** (16 rows, held out): InferenceX does not publish its draft length or acceptance; the assumption
   (DeepSeek's single MTP module, 1 draft token, acceptance 0.75, ~1.75 tokens per step) still predicts MTP
   rows ~20% too fast (a 3-token, ~2.7-tokens-per-step assumption was ~50% too fast). Measured MTP / no-MTP TPOT
   ratios of matched configurations are only 1.13-1.26x (SGLang) and 1.27-1.88x (TRT-LLM): the verify step and
   the draft pass cost more than the simulator's "k/L of a decode step" for the MTP proposer (each draft pass
   pays its own launch/sampling overheads). Recommended in `sim/backend.py`: price an MTP draft pass as one
   layer plus LM head plus the per-step overhead.
5. **Few-point regimes and outliers**: concurrency 256 (2 rows, TRT-LLM attention-DP 1k/1k and 8k/1k: +50-75%)
   and the TRT-LLM 32k-context rows remain off by 20-120%; too few rows to fit anything to. Two SGLang 8k/1k
   rows of 2026-05-13 are 3-5x below their own reruns in throughput at a normal TPOT (a degraded run): the
   simulator is "off" by +205% and +439% there.

The spread table shows reruns of one configuration agree to ~1% at the median (many InferenceX reruns are the
same run reported by the API and the run artifacts) but 10-27% at p90 and up to 83% (throughput) in the worst
case, so errors of 10-15% are at the level of run-to-run variation.
"""


if __name__ == "__main__":
    raise SystemExit(main())
