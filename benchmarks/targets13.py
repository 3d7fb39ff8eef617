"""Every target of issue #13 on the shipped catalogue, in one table: the value now, and met / not met.

    python benchmarks/targets13.py --workers 1              # the full protocol (~30-40 CPU-minutes, most of it disagg)
    python benchmarks/targets13.py --quick                  # a smoke run: fewer requests per slot (NOT the protocol)
    python benchmarks/targets13.py --only b200-later --only roofline --json /tmp/t.json
    python benchmarks/targets13.py --markdown               # the table as docs/fidelity.md prints it (paste as is)

Thin: every number comes from the existing scripts' library functions, under the protocols docs/fidelity.md
states for them:

* aggregated InferenceX rows (``benchmarks/fit_terms.py``: ``usable_points``, ``split_of``, ``predict``,
  ``errors``; every row, not deduplicated, ``--per 4`` requests per unit of concurrency, as ``fit_terms.py eval``):
  H200 rows dated 2026-03+ and every H100 row (Hopper's fit is H200 < 2026-03); B200 and MI355X rows dated
  2026-01+ (their fits are < 2026-01); the clean cross-vendor transfers of steps 9 / 10: B200's fitted values
  (``transfer_params("b200")``) on every MI355X row, MI355X's (``transfer_params("mi355x")`` with the front ends
  :data:`CLEAN_MI355X_TO_B200`) on every B200 row;
* disaggregated points (``benchmarks/disagg_fidelity.py``): coverage = every ``disagg=True`` row of both CSVs that
  maps to pools and runs one request end to end (the script's ``--sample`` check); errors = the seventh session's
  protocol, ``--held-out-only --min-per-concurrency 10 --max-concurrency 1024 --max-requests 100000000`` (the
  stratified random:0.5 split of ``calibration-blackwell-amd.csv``'s configurations);
* Llama-3.1-8B bf16 batch-1 decode on H200 (``jalapeno roofline --model llama-3.1-8b --hardware h200 --phase decode
  --batch 1 --context 1024 --weight-dtype bf16``): HBM bytes of the step / HBM peak bandwidth, over the priced step;
* the non-GPU chips (``benchmarks/nongpu_check.py``): every published single-stream figure within 2x, and every chip
  without one labelled ``uncalibrated``.

Errors are ``100 (predicted - measured) / measured``; "median" is the median |error|, "p90" its 90th percentile,
"signed" the median signed error. Progress goes to stderr; the table to stdout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    """A sibling benchmark script as a module (they are scripts, not a package): imported by name from
    ``benchmarks/`` so that the process pool's workers unpickle its functions the same way."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module(name)


#: docs/fidelity.md step 9 / 10's clean MI355X -> B200 protocol: no front end fitted on B200 travels with MI355X's
#: values (TensorRT-LLM / vLLM at H200's step-7 9.65 / 0 ms, SGLang at MI355X's 8.7 ms, no TensorRT-LLM FP8 MoE term,
#: no SGLang eager-prefill host floor: B200's fitted one stays behind, MI355X has none; step 12b)
CLEAN_MI355X_TO_B200 = {"fw.trt-llm": 9.65, "fw.vllm": 0.0, "fw.sglang": 8.7, "fp8moe.trt-llm": 0.0,
                        "prefill_host.sglang": 0.0}
#: issue #13's limits on median |error| (%): output throughput per chip, TPOT, TTFT
SAME_CHIP = {"output_tput_per_gpu": 10.0, "median_tpot": 10.0, "median_ttft": 20.0}
CROSS_VENDOR = {"output_tput_per_gpu": 15.0, "median_tpot": 15.0, "median_ttft": 30.0}
DISAGG = {"median_tpot": 15.0, "median_ttft": 30.0}
DISAGG_COVERAGE = 95.0  # % of disaggregated points simulated without error
ROOFLINE_BAND = (50.0, 90.0)  # % of the HBM roofline, Llama-3.1-8B bf16 batch-1 decode on H200
NONGPU_FACTOR = 2.0  # every published non-GPU figure within this factor
METRIC_NAMES = {"output_tput_per_gpu": "output tok/s per chip", "median_tpot": "TPOT", "median_ttft": "TTFT"}


@dataclass
class Row:
    """One line of the table: a target's metric on its set."""

    target: str
    set: str
    metric: str
    n: int
    value: float  # median |error| %, or the coverage / roofline share %, or the worst factor
    goal: str
    met: bool
    p90: float | None = None
    signed: float | None = None
    unit: str = "%"
    note: str = ""


@dataclass
class Result:
    name: str
    rows: list[Row]
    seconds: float
    detail: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ arithmetic
def error_rows(target: str, set_name: str, errs: dict[str, list[float]], limits: dict[str, float],
               failed: dict[str, int] | None = None) -> list[Row]:
    """One row per limited metric: met when the median |error| is within the limit. ``failed[m]``: points of the
    set that measure ``m`` but failed to simulate; each counts as an |error| beyond every limit (infinite) in the
    median and p90, so a failure is never silently dropped; n counts them; the signed median is over the simulated
    points. A metric with no point is never met."""
    import numpy as np

    from jalapeno.calibration import summarize

    rows = []
    for m, limit in limits.items():
        k = (failed or {}).get(m, 0)
        s = summarize(errs.get(m, []))
        a = np.array([abs(e) for e in errs.get(m, []) if e == e] + [_BIG] * k, dtype=float)
        med, p90 = (_unbig(np.median(a)), _unbig(np.percentile(a, 90))) if a.size else (math.nan, math.nan)
        note = ""
        if k:
            note = (f"{k} point(s) failed to simulate (counted as |error| = inf); over the {s.n} simulated: "
                    f"{s.median_abs:.1f}")
        if a.size and abs(med - limit) < 0.05:  # the one-decimal value would hide the decision
            note = "; ".join(x for x in (note, f"{med:.3f} vs {limit:g}") if x)
        rows.append(Row(target, set_name, METRIC_NAMES.get(m, m), int(a.size), med, f"<= {limit:g}%",
                        bool(a.size) and med <= limit, p90=p90, signed=s.median_signed, note=note))
    return rows


#: a failed point's |error| while taking medians (a finite stand-in for infinity: numpy interpolates inf to nan)
_BIG = 1e12


def _unbig(x: float) -> float:
    return math.inf if x >= _BIG / 4 else float(x)


def failed_per_metric(points: list, preds: list[dict | None], metrics) -> dict[str, int]:
    """Per metric, the points that measure it and failed to simulate (``pred`` None or carrying ``error``)."""
    return {m: sum(1 for p, pr in zip(points, preds) if (pr is None or "error" in pr) and p.metrics.get(m, 0) > 0)
            for m in metrics}


def coverage_row(target: str, set_name: str, ok: int, total: int, minimum: float = DISAGG_COVERAGE) -> Row:
    pct = 100.0 * ok / total if total else math.nan
    return Row(target, set_name, "simulated without error", total, pct, f">= {minimum:g}%",
               bool(total) and pct >= minimum, note=f"{ok} of {total}")


def band_row(target: str, set_name: str, metric: str, value: float, band: tuple[float, float]) -> Row:
    return Row(target, set_name, metric, 1, value, f"{band[0]:g}-{band[1]:g}%", band[0] <= value <= band[1])


def factor_row(target: str, set_name: str, ratios: list[float], flagged_ok: bool, note: str,
               factor: float = NONGPU_FACTOR) -> Row:
    """``ratios``: predicted / published per figure; met when every one is within ``factor`` either way and every
    chip without a figure says so (``flagged_ok``). The value is the worst factor, max(r, 1 / r)."""
    worst = max((max(r, 1.0 / r) for r in ratios), default=math.nan)
    from jalapeno.calibration import summarize

    s = summarize([100.0 * (r - 1.0) for r in ratios])
    return Row(target, set_name, "predicted / published (worst factor)", len(ratios), worst, f"<= {factor:g}x",
               bool(ratios) and worst <= factor and flagged_ok, p90=s.p90_abs, signed=s.median_signed, unit="x",
               note=note)


# ------------------------------------------------------------------------------------------------ targets
@dataclass(frozen=True)
class Aggregated:
    chip: str  # the rows' chip
    split: str | None  # fit_terms.split_of label the set keeps (None: every row)
    values: str  # whose values ("catalogue" or the source chip of a transfer)
    set_name: str
    limits: dict


AGGREGATED = {
    "h200-held-out": Aggregated("h200", "held-out (date)", "catalogue",
                                "H200 rows dated 2026-03+ (Hopper fit: H200 < 2026-03); H200's values", SAME_CHIP),
    "h100-held-out": Aggregated("h100", None, "catalogue",
                                "every H100 row (held out by chip); H200's values (transferred)", SAME_CHIP),
    "b200-later": Aggregated("b200", "held-out (date)", "catalogue",
                             "B200 rows dated 2026-01+ (fit: B200 < 2026-01); B200's values", SAME_CHIP),
    "mi355x-later": Aggregated("mi355x", "held-out (date)", "catalogue",
                               "MI355X rows dated 2026-01+ (fit: MI355X < 2026-01); MI355X's values", SAME_CHIP),
    "xv-b200-to-mi355x": Aggregated("mi355x", None, "b200",
                                    "every MI355X row; B200's fitted values and front ends (transfer_params)",
                                    CROSS_VENDOR),
    "xv-mi355x-to-b200": Aggregated("b200", None, "mi355x",
                                    "every B200 row; MI355X's fitted values, clean front ends (steps 9/10)",
                                    CROSS_VENDOR),
}
NAMES = ("disagg-held-out", *AGGREGATED, "disagg-coverage", "roofline", "nongpu")  # the long one first


def transfer_values(values: str) -> dict[str, float] | None:
    """The ``fit_terms.predict`` params of a set: None (the catalogue) or a source chip's transferred values."""
    if values == "catalogue":
        return None
    from jalapeno.calibration.predict import transfer_params

    params = transfer_params(values)
    if values == "mi355x":
        params.update(CLEAN_MI355X_TO_B200)
    return params


def aggregated_items(t: Aggregated, limit: int = 0) -> list:
    ft = _script("fit_terms")
    items = [(p, s) for p, s in ft.usable_points({t.chip}) if t.split is None or ft.split_of(p, s) == t.split]
    if limit:  # a tiny slice (tests): the cheapest points first
        items = sorted(items, key=lambda it: (it[1].concurrency or 1) * (it[1].isl + it[1].osl))[:limit]
    return items


def run_aggregated(name: str, per: int, pool, progress, limit: int = 0) -> Result:
    ft = _script("fit_terms")
    t = AGGREGATED[name]
    t0 = time.time()
    items = aggregated_items(t, limit)
    params = transfer_values(t.values)
    preds: list[dict] = []
    step = 100
    for i in range(0, len(items), step):  # chunks: a progress line per 100 points (each point is independent)
        preds += ft.predict([s for _, s in items[i:i + step]], params, per, pool)
        progress(f"{name}: {len(preds)}/{len(items)} points ({time.time() - t0:.0f} s)")
    failed = failed_per_metric([p for p, _ in items], preds, t.limits)
    rows = error_rows(name, t.set_name, ft.errors(items, preds), t.limits, failed)
    pts = [{"label": p.label, "date": p.col("date"), "measured": p.metrics, "predicted": pr}
           for (p, _), pr in zip(items, preds)]
    return Result(name, rows, time.time() - t0, {"per": per, "params": params, "points": pts})


def _disagg_points() -> list:
    from jalapeno.calibration import load_points

    ft = _script("fit_terms")
    return [p for csv in ft.CSVS for p in load_points(csv) if "disagg=True" in p.col("notes")]


def run_disagg_coverage(pool, progress) -> Result:
    """Every disaggregated row of both CSVs: mapped to pools (``to_sim_spec``) and one request at concurrency 1
    run end to end (``disagg_fidelity``'s ``--sample`` check)."""
    from jalapeno.calibration import Excluded, to_sim_spec

    df = _script("disagg_fidelity")
    t0 = time.time()
    points = _disagg_points()
    failures: dict[str, str] = {}
    jobs, labels = [], []
    for p in points:
        s = to_sim_spec(p)
        if isinstance(s, Excluded):
            failures[p.label] = f"excluded: {s.reason}"
            continue
        jobs.append((replace(s, concurrency=1), 1))
        labels.append(p.label)
    for i, (label, (_, err, _)) in enumerate(zip(labels, pool.map(df._predict, jobs))):
        if err is not None:
            failures[label] = err
        if (i + 1) % 20 == 0 or i + 1 == len(jobs):
            progress(f"disagg-coverage: {i + 1}/{len(jobs)} checked ({time.time() - t0:.0f} s)")
    n_bw = sum(1 for p in points if p.col("hardware") in ("b200", "mi355x"))
    row = coverage_row("disagg-coverage", f"every disagg=True row ({n_bw} B200/MI355X, {len(points) - n_bw} Hopper): "
                       "pools built, one request run", len(points) - len(failures), len(points))
    return Result("disagg-coverage", [row], time.time() - t0, {"failures": failures})


def run_disagg_held_out(min_per: int, max_requests: int, pool, progress) -> Result:
    """The seventh session's protocol on the held-out configurations of calibration-blackwell-amd.csv."""
    from jalapeno.calibration import load_points

    df = _script("disagg_fidelity")
    t0 = time.time()
    points = load_points(df.CSV)
    _, held = df.split_sets(points)
    keys = {repr(_config_key(s)) for _, s in held}
    disagg = [p for p in points if "disagg=True" in p.col("notes")]
    jobs, excluded = df.point_jobs(disagg, keys, max_concurrency=1024, min_per_concurrency=min_per,
                                   max_requests=max_requests)
    jobs.sort(key=lambda j: -j[1].concurrency * j[2] * (j[1].isl + j[1].osl))  # longest first (a pool of many)
    errs: dict[str, list[float]] = {}
    pts, preds = [], []
    args = [(s, per, None) for _, s, per in jobs]
    for i, ((p, s, per), (pred, err, sec)) in enumerate(zip(jobs, pool.map(df._predict, args))):
        preds.append(pred)
        if pred is not None:
            for m, e in df.point_errors(p, pred).items():
                errs.setdefault(m, []).append(e)
        pts.append({"label": p.label, "per": per, "error": err, "seconds": sec, "measured": p.metrics,
                    "predicted": pred and {m: pred.get(m) for m in df.COMPARED}})
        progress(f"disagg-held-out: {i + 1}/{len(jobs)} {p.label}: {err or 'ok'} ({sec:.0f} s; "
                 f"{time.time() - t0:.0f} s in all)")
    set_name = (f"held-out configurations (random:0.5 by stack) of calibration-blackwell-amd.csv, c <= 1024, "
                f">= {min_per} requests per slot")
    failed = failed_per_metric([j[0] for j in jobs], preds, DISAGG)
    rows = error_rows("disagg-held-out", set_name, errs, DISAGG, failed)
    return Result("disagg-held-out", rows, time.time() - t0,
                  {"min_per_concurrency": min_per, "max_requests": max_requests, "excluded": dict(excluded),
                   "points": pts})


def _config_key(s):
    from jalapeno.calibration.fit import config_key

    return config_key(s)


def roofline_share(model: str = "llama-3.1-8b", chip: str = "h200", context: int = 1024) -> dict:
    """``jalapeno roofline``'s batch-1 decode step (bf16 weights and KV, TP1): HBM bytes over the HBM peak
    bandwidth, divided by the priced step time."""
    from jalapeno.hardware import get_chip
    from jalapeno.models import load_model
    from jalapeno.perf.model import CostModel
    from jalapeno.perf.shape import StepShape
    from jalapeno.perf.types import Parallelism, Precision

    spec = get_chip(chip)
    cm = CostModel(load_model(model), spec, Parallelism(tp=1), Precision(weights="bf16", kv="bf16"))
    bd = cm.breakdown(StepShape.from_lists(decode_ctx=[context]))
    hbm = sum(o.bytes.get("hbm", 0.0) for o in bd.ops)
    t_min = hbm / (float(spec.level("hbm").bandwidth_tbps) * 1e12)
    step = bd.totals()["step_time_s"]
    return {"hbm_bytes": hbm, "roofline_s": t_min, "step_s": step, "share_pct": 100.0 * t_min / step}


def run_roofline(progress) -> Result:
    t0 = time.time()
    r = roofline_share()
    progress(f"roofline: {r['step_s'] * 1e3:.2f} ms priced, {r['roofline_s'] * 1e3:.2f} ms at HBM peak")
    row = band_row("roofline", "Llama-3.1-8B bf16 batch-1 decode on H200, context 1024 (`jalapeno roofline`)",
                   "share of the HBM roofline", r["share_pct"], ROOFLINE_BAND)
    row.note = f"{r['step_s'] * 1e3:.2f} ms per token priced, {r['roofline_s'] * 1e3:.2f} ms at HBM peak"
    return Result("roofline", [row], time.time() - t0, r)


def run_nongpu(progress) -> Result:
    ng = _script("nongpu_check")
    from jalapeno.hardware import get_chip

    t0 = time.time()
    ratios, checks, unflagged = [], [], []
    gpu = {"h200"}  # the calibrated reference row of nongpu_check
    for c in ng.CHECKS:
        if c.chip in gpu:
            continue
        label = get_chip(c.chip).calibration.label()
        if c.published:
            tok_s = ng.predict(c)
            ratios.append(tok_s / c.published)
            checks.append({"chip": c.chip, "model": c.model, "published": c.published, "predicted": tok_s,
                           "ratio": tok_s / c.published, "role": c.role, "label": label})
        else:
            checks.append({"chip": c.chip, "model": c.model, "published": None, "label": label})
            if not label.startswith("uncalibrated"):
                unflagged.append(c.chip)
    progress(f"nongpu: {len(ratios)} published figures checked")
    flagged = sorted({c["chip"] for c in checks if c["published"] is None})
    roles = [c["role"] for c in checks if c["published"] is not None]
    note = (f"{roles.count('fit')} fit + {roles.count('held-out')} held-out figures; "
            f"{len(flagged)} chip(s) with no published figure labelled uncalibrated"
            + (f"; not labelled: {', '.join(unflagged)}" if unflagged else ""))
    row = factor_row("nongpu", "non-GPU chips' published single-stream figures (nongpu_check.CHECKS)", ratios,
                     not unflagged, note)
    return Result("nongpu", [row], time.time() - t0, {"checks": checks})


# ------------------------------------------------------------------------------------------------ output
def _fmt(x: float | None, unit: str = "%") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if math.isinf(x):
        return "inf"
    if unit == "x":
        return f"{x:.2f}x"
    return f"{x:+.1f}" if unit == "signed" else f"{x:.1f}"


def table_cells(r: Row) -> list[str]:
    return [r.target, r.set, r.metric, str(r.n), _fmt(r.value, r.unit), _fmt(r.p90), _fmt(r.signed, "signed"),
            r.goal, "met" if r.met else "NOT MET", r.note]


HEADER = ["target", "set", "metric", "n", "value", "p90 |err| %", "signed %", "goal", "status", "note"]
#: what the value column holds (printed under the table)
LEGEND = ("value: median |error| % (errors 100 (predicted - measured) / measured), except coverage (% of points), the "
          "roofline share (%) and the non-GPU worst factor (x); p90 |err| and signed %: the 90th percentile of |error| "
          "and the median signed error (positive throughput / negative latency = optimistic)")


def markdown(rows: list[Row]) -> list[str]:
    out = ["| " + " | ".join(h.replace("|", "\\|") for h in HEADER) + " |", "|" + "---|" * len(HEADER)]
    prev = None
    for r in rows:
        cells = table_cells(r)
        cells[8] = "met" if r.met else "**not met**"
        if (r.target, r.set) == prev:  # a target's set once, on its first row
            cells[1] = "″"
        prev = (r.target, r.set)
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return out


def print_rich(rows: list[Row], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for h in HEADER:
        t.add_column(h, overflow="fold", justify="right" if h in ("n",) or "%" in h else "left")
    for r in rows:
        cells = table_cells(r)
        cells[8] = "[green]met[/green]" if r.met else "[bold red]NOT MET[/bold red]"
        t.add_row(*cells)
    c = Console(width=max(200, Console().width))
    c.print(t)
    c.print(LEGEND + ".")


DOC = ROOT / "docs" / "fidelity.md"
MARKS = ("<!-- targets13 table: start (python benchmarks/targets13.py --write-doc) -->", "<!-- targets13 table: end -->")


def write_doc(lines: list[str], doc: Path = DOC) -> None:
    """Replace the text between :data:`MARKS` in ``doc`` with ``lines``."""
    text = doc.read_text(encoding="utf-8")
    start, end = text.find(MARKS[0]), text.find(MARKS[1])
    if start < 0 or end < start:
        raise SystemExit(f"error: {doc} has no targets13 markers ({MARKS[0]} ... {MARKS[1]})")
    doc.write_text(text[:start + len(MARKS[0])] + "\n" + "\n".join(lines) + "\n" + text[end:], encoding="utf-8")


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


# ------------------------------------------------------------------------------------------------ main
def _replay(a) -> int:
    """The table of an earlier ``--json`` run (``--from-json``), as markdown or rich, into the doc if asked."""
    try:
        saved = json.loads(a.from_json.read_text())
        rows = [Row(**r) for r in saved["rows"]]
        head, quick = saved["header"], saved["quick"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: {a.from_json} is not a targets13 --json file ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    if a.write_doc and (quick or len(rows) < len(NAMES)):
        print("error: --write-doc needs the full protocol (that run was --quick or --only)", file=sys.stderr)
        return 2
    _show(a, rows, head)
    return 0


def _show(a, rows: list, head: str) -> None:
    """Print the table (markdown or rich) and, with ``--write-doc``, write it between the doc's markers."""
    md = [head, "", *markdown(rows), "", LEGEND + "."]
    if a.markdown:
        print("\n".join(md))
    else:
        print_rich(rows, head)
    if a.write_doc:
        write_doc(md)
        print(f"wrote the table into {DOC}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=f"targets: {', '.join(NAMES)}")
    ap.add_argument("--only", action="append", metavar="NAME", help="run only this target (repeatable)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run, NOT the protocol: aggregated rows at 3 requests per unit of concurrency (protocol: "
                         "4; at 1 or 2 the first wave sets the median TTFT), disaggregated at >= 4 per slot and <= 1024 "
                         "requests (protocol: >= 10, no cap)")
    ap.add_argument("--workers", type=int, default=1, help="simulation processes (default 1)")
    ap.add_argument("--json", type=Path, metavar="OUT", help="write every row and per-point detail here")
    ap.add_argument("--markdown", action="store_true", help="print the markdown table (for docs/fidelity.md)")
    ap.add_argument("--write-doc", action="store_true",
                    help="also replace the table between the targets13 markers of docs/fidelity.md (full runs only)")
    ap.add_argument("--from-json", type=Path, metavar="IN",
                    help="print (and --write-doc) the table of an earlier --json run instead of simulating")
    a = ap.parse_args(argv)
    if a.from_json:
        return _replay(a)
    if a.write_doc and (a.quick or a.only):
        print("error: --write-doc needs the full protocol (no --quick, no --only)", file=sys.stderr)
        return 2
    only = a.only or list(NAMES)
    unknown = [n for n in only if n not in NAMES]
    if unknown:
        print(f"error: unknown target {unknown[0]!r}; choose from {', '.join(NAMES)}", file=sys.stderr)
        return 2
    if a.workers < 1:
        print(f"error: --workers must be at least 1 (got {a.workers})", file=sys.stderr)
        return 2
    per, min_per, max_req = (3, 4, 1024) if a.quick else (4, 10, 100_000_000)
    load0 = os.getloadavg()
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.time()

    def progress(msg: str) -> None:
        print(f"[{time.time() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True)

    results: list[Result] = []
    with ProcessPoolExecutor(a.workers) as pool:
        for name in [n for n in NAMES if n in only]:
            progress(f"{name}: start")
            if name in AGGREGATED:
                res = run_aggregated(name, per, pool, progress)
            elif name == "disagg-coverage":
                res = run_disagg_coverage(pool, progress)
            elif name == "disagg-held-out":
                res = run_disagg_held_out(min_per, max_req, pool, progress)
            elif name == "roofline":
                res = run_roofline(progress)
            else:
                res = run_nongpu(progress)
            progress(f"{name}: done in {res.seconds:.0f} s")
            results.append(res)
    order = {n: i for i, n in enumerate((*AGGREGATED, "disagg-coverage", "disagg-held-out", "roofline", "nongpu"))}
    results.sort(key=lambda r: order[r.name])
    rows = [row for r in results for row in r.rows]
    wall = time.time() - t0
    load1 = os.getloadavg()
    commit = _git("rev-parse", "--short", "HEAD") + (" (uncommitted changes)" if _git("status", "--porcelain",
                                                                                     "--untracked-files=no") else "")
    cmd = "python benchmarks/targets13.py " + " ".join(argv if argv is not None else sys.argv[1:])
    head = (f"{started:%Y-%m-%d %H:%M} UTC, commit {commit}, `{cmd.strip()}`"
            + (" (--quick: NOT the protocol)" if a.quick else "")
            + f"; wall {wall:.0f} s with {a.workers} worker(s), load average {load0[0]:.1f} -> {load1[0]:.1f}; "
            f"{sum(r.met for r in rows)} of {len(rows)} rows met")
    _show(a, rows, head)
    if a.json:
        a.json.write_text(json.dumps({"header": head, "commit": commit, "command": cmd.strip(), "quick": a.quick,
                                      "started": started.isoformat(), "wall_s": wall, "workers": a.workers,
                                      "load": [load0, load1], "rows": [asdict(r) for r in rows],
                                      "targets": {r.name: {"seconds": r.seconds, **r.detail} for r in results}},
                                     indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
