"""Fit the cost model's named overhead terms on published serving points, and check them on points held out.

    python benchmarks/fit_terms.py fit --chip h200 --out /tmp/h200.json      # fit one chip's fit split
    python benchmarks/fit_terms.py eval --params /tmp/h200.json --chip h100  # predict a set with fitted values
    python benchmarks/fit_terms.py eval                                      # the catalogue's current values
    python benchmarks/fit_terms.py write --chip b200 --params /tmp/b200.json --source "..." --calibration '{...}'
    python benchmarks/fit_terms.py params --chip b200 --out /tmp/b200.json    # a chip's fitted terms, to transfer
    python benchmarks/fit_terms.py eval --chip mi355x --params /tmp/b200.json # ... e.g. B200's fit on MI355X rows
    python benchmarks/fit_terms.py fit --chip h200 --chip mi355x --frameworks --hold-decode  # pool the prefill side
    python benchmarks/fit_terms.py eval --chip b200 --params '{"fp8moe.trt-llm": 95}'     # a stack's FP8 MoE term
    python benchmarks/fit_terms.py fit --chip b200 --fix ... --start '{"pdl_kernel_fraction": 0.3}'  # B200's PDL share (step 8b)
    python benchmarks/fit_terms.py fit --chip mi355x --frameworks --reruns latest \
        --start '{"fp8moe.sglang": 30}'   # MI355X's shipped fit: newest reruns, SGLang's FP8 MoE path held (step 6)

The shipped values (docs/fidelity.md "Overhead terms: fit and transfer") come from ``fit --frameworks`` per chip
family (H200, B200, MI355X), ``--terms kernel`` (a per-kernel cost with the kernels counted from the architecture,
instead of per-layer and per-MoE-layer constants), each fit converged by the Gauss-Newton loop of
``jalapeno.calibration.gauss_newton`` (one simulation of the fit set per iteration).

Points: SemiAnalysis InferenceX aggregated rows without MTP (``benchmarks/data/calibration.csv`` for H100/H200,
``calibration-blackwell-amd.csv`` for B200/MI355X), one point per configuration (median over reruns) in the fit.
Splits (:func:`split_of`): H200 rows dated before 2026-03 are the Hopper fit set (H100 and later H200 rows are held
out); B200 and MI355X rows dated before 2026-01 are those chips' fit sets (their 2026-01 and 2026-02 rows are
held out by date), and the cross-vendor check applies one chip's fit to every row of the other.

The fit is Gauss-Newton over linearised simulations (soft-L1 loss on ln(predicted / measured) of output
throughput per chip, median TPOT and median TTFT, :data:`WEIGHTS`) over :data:`PARAMS`; every iteration simulates
every fit point once with the serving simulator (the engine over ``SimBackend``), in a process pool of 2, and
solves the linearised problem in milliseconds; it stops when no parameter moves by 1% (or after ``--max-iter``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from jalapeno.calibration import Excluded, Point, SimSpec, config_key, load_points, summarize, to_sim_spec
from jalapeno.calibration.predict import efficiency_of, framework_profile, simulate
from jalapeno.hardware.schema import Efficiency

ROOT = Path(__file__).resolve().parents[1]
CSVS = (ROOT / "benchmarks" / "data" / "calibration.csv", ROOT / "benchmarks" / "data" / "calibration-blackwell-amd.csv")
#: metrics in the fit and their weights (TTFT carries queueing noise at high concurrency: a lower weight)
WEIGHTS = {"output_tput_per_gpu": 1.0, "median_tpot": 1.0, "median_ttft": 0.7}
#: fitted efficiency fields: name -> (start, lower, upper)
PARAMS = {
    "step_overhead_us": (120.0, 0.0, 2000.0),
    "moe_layer_overhead_us": (80.0, 0.0, 500.0),
    "kernel_overhead_us": (4.0, 0.0, 100.0),
    "seq_overhead_us": (40.0, 0.0, 500.0),
    "expert_overhead_us": (0.5, 0.0, 50.0),
    "prefill_layer_overhead_us": (100.0, 0.0, 2000.0),
    "prefill_kernel_overhead_us": (20.0, 0.0, 500.0),
    "prefill_expert_overhead_us": (1.0, 0.0, 100.0),
    "prefill_token_overhead_ns": (30.0, 0.0, 1000.0),
    "prefill_collective_overlap": (0.2, 0.0, 0.9),
    "request_overhead_us_per_token": (3.0, 0.0, 50.0),
    "request_overhead_ms": (20.0, 0.0, 200.0),  # the front end of frameworks without a profile (e.g. AMD's ATOM)
    "pdl_kernel_fraction": (0.2, 0.0, 0.9),  # per-kernel share hidden by PDL: fitted only where a run launches with it
}
#: terms fitted only when asked (``fit --dequant``): the SMs' dequantization of weight-only-quantized weights
#: (MXFP4 experts on a chip without FP4 tensor cores), picoseconds per stored weight byte (issue #13 step 8)
OPTIONAL_PARAMS = {"weight_dequant_ps_per_byte": (0.3, 0.0, 5.0)}
#: dense decoder layers under CUDA/HIP graphs: about ten kernels per layer with ~2 us of launch gap each. Not
#: identifiable from the InferenceX rows (GPT-OSS has only MoE layers, DeepSeek-R1 3 dense of 61), so it is a
#: stated prior, checked by the Llama-3.1-8B batch-1 decode target, not fitted.
DENSE_LAYER_US = 20.0
#: most simulated requests per point during a fit (high-concurrency points run fewer rounds; the reported
#: errors use ``--per`` rounds for every point)
MAX_FIT_REQUESTS = 400
#: the decode-side terms (every step's fixed cost): ``fit --hold-decode`` leaves each chip's own catalogue values
DECODE_TERMS = ("step_overhead_us", "layer_overhead_us", "moe_layer_overhead_us", "kernel_overhead_us",
                "seq_overhead_us", "expert_overhead_us", "weight_dequant_ps_per_byte")
#: frameworks whose request latency is a global profile (jalapeno.perf.frameworks), fitted on the Hopper set only
FRAMEWORK_PARAMS = {"fw.vllm": (20.0, 0.0, 200.0), "fw.sglang": (40.0, 0.0, 200.0), "fw.trt-llm": (40.0, 0.0, 200.0)}


def split_of(p: Point, s: SimSpec) -> str:
    """fit / held-out label of one aggregated InferenceX point (see module doc)."""
    month = p.col("date")[:7]
    if s.chip == "h200":
        return "fit" if month < "2026-03" else "held-out (date)"
    if s.chip == "h100":
        return "held-out (chip)"
    return "fit" if month < "2026-01" else "held-out (date)"


def usable_points(chips: set[str] | None = None) -> list[tuple[Point, SimSpec]]:
    """Aggregated, non-MTP InferenceX points of the catalogue's chips (optionally only ``chips``)."""
    out = []
    for csv in CSVS:
        for p in load_points(csv):
            if "disagg=True" in p.col("notes"):  # aggregated rows only (disaggregated pools: calibrate's job)
                continue
            s = to_sim_spec(p)
            if isinstance(s, Excluded) or s.kind != "ix" or s.spec_tokens:
                continue
            if chips is None or s.chip in chips:
                out.append((p, s))
    return out


def dedupe(items: list[tuple[Point, SimSpec]], reruns: str = "median") -> list[tuple[Point, SimSpec]]:
    """One point per configuration: measured metrics = median over its reruns (``reruns="latest"``: over the
    reruns of its latest date only, the serving stack's release closest to the points being predicted; an
    InferenceX date the artifact does not pin, ``2025-12..2026-01``, sorts after every day of its first month)."""
    groups: dict[tuple, list[tuple[Point, SimSpec]]] = defaultdict(list)
    for p, s in items:
        groups[config_key(s)].append((p, s))
    out = []
    for g in groups.values():
        if reruns == "latest":
            last = max(p.col("date") for p, _ in g)
            g = [(p, s) for p, s in g if p.col("date") == last]
        p0, s0 = g[0]
        ms = {m for p, _ in g for m in p.metrics}
        metrics = {m: float(np.median([p.metrics[m] for p, _ in g if m in p.metrics])) for m in ms}
        out.append((Point(p0.source, p0.key, tuple(i for p, _ in g for i in p.ids), metrics), s0))
    return out


# ------------------------------------------------------------------------------------------------ predicting
def efficiency_with(base: Efficiency, params: dict[str, float]) -> Efficiency:
    """``base`` with ``params`` applied: ``fw.<stack>`` are front ends (see :func:`_latency_ms`), ``fp8moe.<stack>``
    a stack's ``framework_fp8_moe_layer_us`` entry, ``prefill_host.<stack>`` its ``framework_prefill_host_kernel_us``
    entry (the eager prefill's host time per layer, step 12b), ``moe_compute.<dtype>`` an ``efficiency.moe_compute`` entry (0:
    removed, the dtype's dense fraction), ``prefill_moe.<format>`` 0 drops that measured ``efficiency.prefill_moe``
    entry (a trial without it), anything else an efficiency field."""
    upd: dict = {k: float(v) for k, v in params.items()
                 if not k.startswith(("fw.", "fp8moe.", "moe_compute.", "prefill_moe.", "prefill_host."))}
    drop = {k.split(".", 1)[1] for k, v in params.items() if k.startswith("prefill_moe.")}
    if any(float(params[f"prefill_moe.{f}"]) != 0 for f in drop):
        raise SystemExit("prefill_moe.<format> takes 0 only (drop the measured entry); its values are chip facts")
    if drop:
        upd["prefill_moe"] = {f: k for f, k in base.prefill_moe.items() if f not in drop}
    fp8 = {k.split(".", 1)[1]: float(v) for k, v in params.items() if k.startswith("fp8moe.")}
    if fp8:
        upd["framework_fp8_moe_layer_us"] = {**base.framework_fp8_moe_layer_us, **fp8}
    host = {k.split(".", 1)[1]: float(v) for k, v in params.items() if k.startswith("prefill_host.")}
    if host:
        upd["framework_prefill_host_kernel_us"] = {**base.framework_prefill_host_kernel_us, **host}
    moe = {k.split(".", 1)[1]: float(v) for k, v in params.items() if k.startswith("moe_compute.")}
    if moe:
        upd["moe_compute"] = {d: f for d, f in {**base.moe_compute, **moe}.items() if f > 0}
    return base.model_copy(update=upd)


def stack_efficiency(spec: SimSpec, eff: Efficiency) -> Efficiency:
    """``eff`` with the per-stack kernel terms of ``spec``'s serving stack resolved (``simulate`` runs with
    ``frameworks=False`` here: the front end is passed on its own)."""
    from jalapeno.perf.frameworks import stack_kernel_terms

    return stack_kernel_terms(eff, framework_profile(spec))


def _latency_ms(spec: SimSpec, eff: Efficiency, params: dict[str, float]) -> float:
    """The request's fixed front-end latency: its framework's profile (fitted or current), else the chip's."""
    from jalapeno.perf.frameworks import get_framework

    fw = framework_profile(spec)
    if fw is None:
        return eff.request_overhead_ms
    return float(params.get(f"fw.{fw}", eff.framework_overhead_ms.get(fw, get_framework(fw).request_overhead_ms)))


#: run each point's serving-stack scheduling policy (``--no-scheduling``: every stack as vLLM-style mixed prefill)
SCHEDULING = {"on": True}


def _job(args) -> dict:
    spec, eff, per, ms, sched = args
    try:
        return simulate(spec, eff, prompts_per_concurrency=per, frameworks=False, request_overhead_ms=ms,
                        scheduling=sched)
    except Exception as exc:  # noqa: BLE001 - a failed point is reported, not fatal
        return {"error": f"{type(exc).__name__}: {exc}"}


def predict(specs: list[SimSpec], params: dict[str, float] | None, per: int, pool=None,
            max_requests: int | None = None) -> list[dict]:
    """Predictions with ``params`` applied over each chip's catalogue efficiency (None: the catalogue as is).
    ``max_requests`` (fit only): fewer requests per unit of concurrency at high concurrency (at least one)."""
    params = params or {}
    jobs = []
    for s in specs:
        eff = stack_efficiency(s, efficiency_with(efficiency_of(s.chip), params))
        n = per if max_requests is None else max(1, min(per, max_requests // max(1, s.concurrency or 1)))
        jobs.append((s, eff, n, _latency_ms(s, eff, params), SCHEDULING["on"]))
    order = sorted(range(len(jobs)), key=lambda i: -(specs[i].concurrency or 1) * (specs[i].osl + specs[i].isl / 8))
    res = list(pool.map(_job, [jobs[i] for i in order], chunksize=1)) if pool else [_job(jobs[i]) for i in order]
    out: list[dict] = [{}] * len(jobs)
    for i, r in zip(order, res):
        out[i] = r
    return out


def residuals(points: list[Point], preds: list[dict]) -> np.ndarray:
    """Weighted ln(pred / meas) per (point, fitted metric); a failed point counts as a factor e off."""
    r = []
    for p, pr in zip(points, preds):
        for m, w in WEIGHTS.items():
            if m not in p.metrics or p.metrics[m] <= 0:
                continue
            if "error" in pr or pr.get(m, 0) <= 0:
                r.append(w * 1.0)
            else:
                r.append(w * math.log(pr[m] / p.metrics[m]))
    return np.array(r)


def errors(items: list[tuple[Point, SimSpec]], preds: list[dict]) -> dict[str, list[float]]:
    """Signed % errors per headline metric."""
    out: dict[str, list[float]] = defaultdict(list)
    for (p, _), pr in zip(items, preds):
        if "error" in pr:
            continue
        for m in WEIGHTS:
            if m in p.metrics and m in pr and p.metrics[m] > 0:
                out[m].append(100.0 * (pr[m] - p.metrics[m]) / p.metrics[m])
    return out


def report(name: str, items, preds) -> dict:
    e = errors(items, preds)
    failed = sum(1 for pr in preds if "error" in pr)
    row = {m: summarize(v).row() for m, v in e.items()}
    print(f"{name:40s} n={len(items):4d} failed={failed}  " + "  ".join(
        f"{m.replace('median_', '').replace('output_tput_per_gpu', 'tput')}: {r[1]}% (p90 {r[2]}, signed {r[3]})"
        for m, r in row.items()), file=sys.stderr, flush=True)
    return {"n": len(items), "failed": failed, **{m: r for m, r in row.items()}}


# ------------------------------------------------------------------------------------------------ fitting
#: bounds of a stack's eager-prefill host time per layer (``prefill_host.<stack>``, ``fit --host STACK``), us
HOST_BOUNDS = (0.0, 5000.0)


def _lib_name(n: str) -> str:
    """This script's parameter name as the library's (``fw.vllm`` -> ``request_overhead_ms@vllm``;
    ``prefill_host.<stack>`` -> the resolved ``prefill_host_kernel_us``, one stack per fit)."""
    if n.startswith("prefill_host."):
        return "prefill_host_kernel_us"
    return f"request_overhead_ms@{n[3:]}" if n.startswith("fw.") else n


def fit(items: list[tuple[Point, SimSpec]], names: list[str], start: dict[str, float], per: int, pool,
        max_iter: int) -> tuple[dict[str, float], float, dict]:
    """Gauss-Newton over linearised simulations (jalapeno.calibration.gauss_newton): each iteration simulates
    every fit point once; stops when no parameter moves by 1%. Returns (values, median |ln| at them, log)."""
    from jalapeno.calibration.gauss_newton import Spec, gauss_newton

    spec_all = {**PARAMS, **FRAMEWORK_PARAMS, **OPTIONAL_PARAMS,
                **{n: (0.0, *HOST_BOUNDS) for n in names if n.startswith("prefill_host.")}}
    lib = [_lib_name(n) for n in names]
    if len(set(lib)) < len(lib):
        raise SystemExit("fit: one prefill_host.<stack> per fit (--host)")
    fixed = {k: v for k, v in start.items() if k not in names}
    x0 = {ln: float(np.clip(start.get(n, spec_all[n][0]), spec_all[n][1], spec_all[n][2])) for n, ln in zip(names, lib)}
    #: the library name of the fitted stack host term -> this script's (its value goes to that stack only; a
    #: linearised bump of the resolved field on another stack's point is a floor far below its prefill steps)
    back = {ln: n for n, ln in zip(names, lib) if n.startswith("prefill_host.")}

    def eff(s: SimSpec, vals: dict[str, float]) -> Efficiency:
        return stack_efficiency(s, efficiency_with(efficiency_of(s.chip),
                                                   {**fixed, **{back.get(k, k): v for k, v in vals.items() if "@" not in k}}))

    held = {k[3:]: float(v) for k, v in fixed.items() if k.startswith("fw.")}  # a front end --start'ed and --fix'ed

    def latency(vals: dict[str, float]) -> dict[str, float]:
        return {**held, **{k.split("@", 1)[1]: v for k, v in vals.items() if "@" in k}}

    def prompts(s: SimSpec) -> int:
        return max(1, min(per, MAX_FIT_REQUESTS // max(1, s.concurrency or 1)))

    def mapper(fn, args, label):
        order = sorted(range(len(args)), key=lambda i: -(args[i][0].concurrency or 1) * (args[i][0].osl + args[i][0].isl / 8))
        res = list(pool.map(_star, [(fn, args[i]) for i in order], chunksize=1)) if pool else [fn(*args[i]) for i in order]
        out: list = [None] * len(args)
        for i, r in zip(order, res):
            out[i] = r
        print(f"  {label}: {len(args)} points simulated", file=sys.stderr, flush=True)
        return out

    spec = Spec(tuple(lib), tuple((spec_all[n][1], spec_all[n][2]) for n in names), WEIGHTS, eff, latency)
    gn = gauss_newton(items, spec, x0, prompts=prompts, mapper=mapper, max_iter=max_iter)
    for k, it in enumerate(gn.iterations, 1):
        print(f"  iteration {k}: cost {it.cost:.4f} median |ln| {it.median_abs_log:.4f} failed {it.failed} "
              f"move {it.move:.3g} " + " ".join(f"{n}={v:.4g}" for n, v in it.values.items()), file=sys.stderr, flush=True)
    got = {**fixed, **{n: gn.values[ln] for n, ln in zip(names, lib)}}
    best = min((it for it in gn.iterations), key=lambda it: it.cost, default=None)
    log = {"converged": gn.converged, "stop": gn.stop, "iterations": [{**it.__dict__} for it in gn.iterations],
           "simulations": gn.simulations}
    return got, (best.median_abs_log if best else math.nan), log


def _star(fa):
    fn, a = fa
    return fn(*a)


# ------------------------------------------------------------------------------------------------ writing
OVERHEAD_KEYS = ("step_overhead_us", "layer_overhead_us", "moe_layer_overhead_us", "kernel_overhead_us", "expert_overhead_us",
                 "seq_overhead_us",
                 "prefill_layer_overhead_us", "prefill_kernel_overhead_us", "prefill_expert_overhead_us", "prefill_token_overhead_ns", "prefill_collective_overlap",
                 "pdl_kernel_fraction",
                 "request_overhead_ms", "request_overhead_us_per_token", "weight_dequant_ps_per_byte")


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def write_yaml(path: Path, params: dict[str, float], source: str, calibration: dict,
               frameworks: dict[str, float] | None = None, fitted: dict[str, str] | None = None) -> None:
    """Put ``params`` (the overhead fields) and ``source`` into the chip file's ``efficiency`` block and replace
    its ``calibration`` block, keeping every other line (and comment) as it is. ``fitted``: parameter name ->
    the source of its fit: each becomes a Fact with status ``fitted`` in ``efficiency.fitted``."""
    lines = path.read_text().splitlines()
    i = lines.index("efficiency:")
    j = i + 1
    while j < len(lines) and lines[j].startswith("  "):
        j += 1
    vals = {"layer_overhead_us": DENSE_LAYER_US if not params.get("kernel_overhead_us") else 0.0,
            **{k: v for k, v in params.items() if k in OVERHEAD_KEYS}}
    old = {ln.split(":")[0].strip(): ln for ln in lines[i + 1 : j]}
    for marker in ("Kernel-level fractions (not fitted), as before:", "Kernel-level fractions below are the chip's own.",
                   "Kernel figures:"):
        kernel = old.get("source", "").split(marker)
        if len(kernel) == 2:  # keep the citations of the measured kernel fractions
            source += " Kernel-level fractions (not fitted), as before: " + kernel[1].strip().rstrip('"')
            break
    body, skip = [], False
    for ln in lines[i + 1 : j]:
        if skip and ln.startswith("    "):
            continue  # a line of the old ``fitted`` block
        skip = ln.split(":")[0].strip() == "fitted"
        if not skip and ln.split(":")[0].strip() not in (*vals, "source", "framework_overhead_ms"):
            body.append(ln)
    body += [f"  {k}: {round(float(vals[k]), 4):g}" for k in OVERHEAD_KEYS if k in vals]
    if frameworks:
        body.append("  framework_overhead_ms: {" + ", ".join(f"{k}: {v:g}" for k, v in sorted(frameworks.items())) + "}")
    body.append(f"  source: {_q(source)}")
    if fitted:
        body.append("  fitted:")
        for k, src in fitted.items():
            v = frameworks.get(k.split("@", 1)[1]) if "@" in k and frameworks else vals.get(k)
            if v is not None:
                body.append(f"    {_q(k)}: {{value: {round(float(v), 4):g}, status: fitted, source: {_q(src)}}}")
    rest = lines[j:]
    if "calibration:" in rest:  # drop the old block
        k = rest.index("calibration:")
        m = k + 1
        while m < len(rest) and rest[m].startswith("  "):
            m += 1
        rest = rest[:k] + rest[m:]
    cal = ["calibration:"] + [f"  {k}: {_q(v) if isinstance(v, str) else v}" for k, v in calibration.items()]
    path.write_text("\n".join(lines[: i + 1] + body + cal + rest) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("fit", "eval", "write", "params"))
    ap.add_argument("--chip", action="append", help="chip(s) whose points to use (default: all)")
    ap.add_argument("--params", type=Path, action="append", help="JSON of fitted values to apply (eval)")
    ap.add_argument("--out", type=Path, help="fit: write the fitted values here (JSON)")
    ap.add_argument("--max-points", type=int, default=2000, help="fit: configurations sampled from the fit split")
    ap.add_argument("--per", type=int, default=2, help="simulated requests per unit of concurrency")
    ap.add_argument("--max-iter", type=int, default=4, help="fit: Gauss-Newton iterations (one simulation of the fit set each)")
    ap.add_argument("--frameworks", action="store_true", help="fit: also fit the framework request latencies")
    ap.add_argument("--host", help="fit: also fit this stack's eager-prefill host time per layer "
                                   "(prefill_host.<stack>: a prefill step lasts max(host, device); step 12b)")
    ap.add_argument("--start", help="fit: start values (JSON)")
    ap.add_argument("--fix", action="append", help="fit: keep this parameter at its start value")
    ap.add_argument("--terms", choices=("kernel", "layer"), default="kernel",
                    help="fit: per-kernel cost (kernels counted from the architecture; no per-layer constants) or "
                         "the per-layer / per-MoE-layer constants (dense per-layer prior DENSE_LAYER_US)")
    ap.add_argument("--hold-decode", action="store_true",
                    help="fit: leave every chip's own decode terms (DECODE_TERMS) as in its catalogue file and fit only "
                         "the prefill-side terms and front ends (a pooled fit whose decode side stays per chip)")
    ap.add_argument("--dequant", action="store_true",
                    help="fit: also fit weight_dequant_ps_per_byte (the SMs' dequantization of MXFP4 / INT4 weights "
                         "a chip has no native rate for; a decode-side term)")
    ap.add_argument("--reruns", choices=("median", "latest"), default="median",
                    help="fit: a configuration's measured value is the median over all its reruns in the fit split, "
                         "or over those of its latest date only (the newest serving-stack release the fit half has)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-scheduling", action="store_true",
                    help="price every serving stack with the engine's default (vLLM-style mixed prefill) scheduling, "
                         "not its profile's policy and InferenceX launch flags (the before-#13-scheduling baseline)")
    ap.add_argument("--by-model", action="store_true", help="eval: also group by model/framework, concurrency, ISL")
    ap.add_argument("--dump", type=Path, help="eval: write every point's measured and predicted metrics (JSON lines)")
    ap.add_argument("--source", default="", help="write: the efficiency block's source text")
    ap.add_argument("--calibration", help="write: the calibration block (JSON)")
    ap.add_argument("--fit-source", default="", help="write: where the fit came from (each fitted value's Fact source)")
    a = ap.parse_args(argv)
    SCHEDULING["on"] = not a.no_scheduling
    if a.mode == "params":  # the chip's fitted terms as --params JSON (what a cross-vendor transfer moves)
        from jalapeno.calibration.predict import transfer_params

        out = {c: transfer_params(c) for c in a.chip or []}
        got = {"params": next(iter(out.values())), "from": a.chip[0]} if len(out) == 1 else out
        text = json.dumps(got, indent=1)
        if a.out:
            a.out.write_text(text + "\n")
        else:
            print(text)
        return 0
    if a.mode == "write":  # put fitted values (--params) into the chip files named by --chip
        params: dict = {}
        for f in a.params or []:
            d = json.loads(f.read_text())
            params.update(d.get("params", d))
        fw = {k[3:]: round(float(v), 1) for k, v in params.items() if k.startswith("fw.")}
        names: list[str] = []
        for f in a.params or []:  # the parameters the fit moved (its iterations' keys), for efficiency.fitted
            d = json.loads(f.read_text())
            names += list(d.get("iterations", [{}])[0].get("values", {})) if isinstance(d.get("iterations"), list) else []
        fitted = {n.replace("request_overhead_ms@", "framework_overhead_ms@"): a.fit_source for n in names} \
            if a.fit_source else None
        for chip in a.chip or []:
            path = ROOT / "src" / "jalapeno" / "hardware" / "chips" / f"{chip}.yaml"
            write_yaml(path, params, a.source, json.loads(a.calibration or "{}"), fw, fitted)
        return 0
    chips = set(a.chip) if a.chip else None
    items = usable_points(chips)
    t0 = time.time()
    with ProcessPoolExecutor(a.workers) as pool:
        if a.mode == "fit":
            train = dedupe([(p, s) for p, s in items if split_of(p, s) == "fit"], a.reruns)
            random.Random(0).shuffle(train)
            train = train[: a.max_points]
            from jalapeno.calibration.launch import launches_with_pdl

            names = [n for n in PARAMS if n != "request_overhead_ms" or any(framework_profile(s) is None for _, s in train)]
            names = [n for n in names if n != "pdl_kernel_fraction" or any(launches_with_pdl(s) for _, s in train)]
            dropped = ("moe_layer_overhead_us",) if a.terms == "kernel" else ("kernel_overhead_us",)
            names = [n for n in names if n not in dropped]
            names = [n for n in names if n not in (a.fix or [])]
            if a.dequant and "weight_dequant_ps_per_byte" not in (a.fix or []):
                names.append("weight_dequant_ps_per_byte")
            if a.frameworks:
                names += [n for n in FRAMEWORK_PARAMS if any(framework_profile(s) == n[3:] for _, s in train)
                          and n not in (a.fix or [])]
            if a.host:
                names.append(f"prefill_host.{a.host}")
            start = {**(json.loads(a.start) if a.start else {})}
            if a.hold_decode:
                names = [n for n in names if n not in DECODE_TERMS]
                start = {k: v for k, v in start.items() if k not in DECODE_TERMS}
            elif a.terms == "kernel":  # the kernel count carries every per-layer cost
                start.update(layer_overhead_us=0.0, moe_layer_overhead_us=0.0)
            else:
                start.update(layer_overhead_us=DENSE_LAYER_US, kernel_overhead_us=0.0)
            print(f"fitting {names} on {len(train)} configurations of {sorted({s.chip for _, s in train})}",
                  file=sys.stderr)
            got, cost, log = fit(train, names, start, a.per, pool, a.max_iter)
            print(json.dumps(got, indent=1))
            if a.out:
                a.out.write_text(json.dumps({"params": got, "fit_configurations": len(train),
                                             "chips": sorted({s.chip for _, s in train}), "median_abs_residual": cost, **log,
                                             "wall_s": time.time() - t0}, indent=1))
            report("fit split (sampled, deduped)", train, predict([s for _, s in train], got, a.per, pool))
            return 0
        params: dict[str, float] = {}
        for f in a.params or []:
            d = json.loads(f.read_text())
            params.update(d.get("params", d))
        specs = [s for _, s in items]
        preds = predict(specs, params or None, a.per, pool)
        if a.dump:
            with a.dump.open("w") as f:
                for (p, s), pr in zip(items, preds):
                    f.write(json.dumps({"chip": s.chip, "model": s.model, "weights": s.weights, "kv": s.kv,
                                        "framework": s.framework, "tp": s.layout.tp, "ep": s.layout.ep,
                                        "dpa": s.layout.dp_attention, "isl": s.isl, "osl": s.osl,
                                        "conc": s.concurrency, "date": p.col("date"), "split": split_of(p, s),
                                        "measured": p.metrics, "predicted": pr}) + "\n")
        groups: dict[str, list[int]] = defaultdict(list)
        for i, (p, s) in enumerate(items):
            groups[f"{s.chip} {split_of(p, s)}"].append(i)
            groups[f"{s.chip} all"].append(i)
            if a.by_model:
                groups[f"{s.chip} {s.model} {s.framework}"].append(i)
                band = "c<=16" if (s.concurrency or 0) <= 16 else "c<=64" if s.concurrency <= 64 else "c>64"
                groups[f"{s.chip} {band}"].append(i)
                groups[f"{s.chip} ISL {s.isl}"].append(i)
        out = {}
        for g in sorted(groups):
            idx = groups[g]
            out[g] = report(g, [items[i] for i in idx], [preds[i] for i in idx])
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
