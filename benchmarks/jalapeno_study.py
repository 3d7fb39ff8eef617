"""The Jalapeño study: do the seeds' claims follow from a plausible chip? (docs/jalapeno-study.md)

    python benchmarks/jalapeno_study.py            # evaluate the catalogue's jalapeno.yaml; tables + PNGs
    python benchmarks/jalapeno_study.py --fit      # re-fit the inferred parameters on GPT-OSS-120B first
    python benchmarks/jalapeno_study.py --quick    # 1k/1k only, 4 concurrencies, no PNGs (smoke run)
    python benchmarks/jalapeno_study.py --fit --quick --fit-only   # the fit alone, on 1k/1k (what the doc's fit ran)
    python benchmarks/jalapeno_study.py --overhead-check   # DeepSeek-R1 E2E vs per-layer overheads (seconds)

GPT-OSS-120B, DeepSeek-R1 and Kimi-K2.5 on Jalapeño vs GB200 / GB300 (H100, B200, TPU 8i for context) on the
InferenceX workloads (ISL/OSL 1k/1k, 1k/8k, 8k/1k; closed loop at concurrency 4..256; no speculative decoding).
Every point is the engine's scheduler over ``SimBackend`` (built by ``jalapeno.sim``'s factory, as ``jalapeno
simulate`` builds it), in-process with a pool of 2 workers. The study's logic lives in ``jalapeno.study``
(design, points, stats, fit, report); this script is its command line. Requests per point: ``--prompts-factor`` x concurrency (default 3, InferenceX uses 10).

Claim statistics (docs/jalapeno-study.md, "Ratio definitions"), per model, workload and baseline b:
  tokens/W at peak load  max over (layout, concurrency) of output tokens per joule, Jalapeño / b
  E2E latency            min over layouts of median E2E at the same concurrency, b / Jalapeño
  interactive            output tok/s per chip on the Pareto front at interactivity T = f x (b's highest
                         interactivity), f in {0.5, 0.8}, Jalapeño / b (log-log interpolation on the front)
Baselines: GB200/GB300 as the catalogue has them ("catalogue": serving overheads calibrated on H200 InferenceX rows
and transferred, docs/fidelity.md; no Blackwell serving measurements exist in our data) and, for the previous
fit's comparison, with the pre-calibration near-roofline efficiencies ("uncalibrated": 40 us per step, no
per-layer overhead, NVLink 0.82). GPUs run InferenceX single-node layouts (<= 8 chips); Jalapeño runs the same
plus TP16/32/64 inside its 64-chip domain, pinning weights in SRAM because its chip says so (``pin_weights``).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from jalapeno.study.design import (
    BASELINES, CONCURRENCIES, MODELS, PRIOR, SENSITIVITY, WORKLOADS, jal_layouts, jalapeno_chip, params_from_chip,
)
from jalapeno.study.fit import FIT_CONCS, FIT_MODEL, evaluate, fit
from jalapeno.study.points import baseline_points, run_tasks, tasks_for
from jalapeno.study.report import claim_table, deepseek_point, overhead_check, plot
from jalapeno.study.stats import front

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fit", action="store_true", help="re-fit the inferred parameters on GPT-OSS-120B first")
    ap.add_argument("--fit-baseline", choices=("catalogue", "uncalibrated"), default="catalogue",
                    help="GB200/GB300 efficiencies the fit compares against (default: the catalogue's)")
    ap.add_argument("--uncalibrated", action="store_true",
                    help="also report against GB200/GB300 with the pre-calibration overheads (the previous fit's)")
    ap.add_argument("--quick", action="store_true", help="1k/1k, concurrency 4/16/64/256, no plots")
    ap.add_argument("--prompts-factor", type=float, default=3.0, help="requests per point = factor x concurrency")
    ap.add_argument("--fit-prompts-factor", type=float, default=2.0, help="the same, inside the fit")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--fit-only", action="store_true", help="stop after the fit and its sensitivities")
    ap.add_argument("--overhead-check", action="store_true",
                    help="only the DeepSeek-R1 per-layer-overhead check (docs/jalapeno-study.md), then stop")
    a = ap.parse_args(argv)
    from jalapeno.hardware import get_chip

    t0 = time.time()
    workloads = WORKLOADS[:1] if a.quick else WORKLOADS
    concs = FIT_CONCS if a.quick else CONCURRENCIES
    pool = ProcessPoolExecutor(a.workers) if a.workers > 1 else None
    g = get_chip("gb300").efficiency
    print(f"GB300 catalogue efficiencies: compute {g.compute} memory {g.memory} scale_up {g.scale_up} "
          f"step {g.step_overhead_us} us layer {g.layer_overhead_us} us kernel {g.kernel_overhead_us} us")
    try:
        current = params_from_chip(get_chip("jalapeno"))
        if a.overhead_check:
            print("DeepSeek-R1 1k/1k, concurrency 4, per-layer overhead varied:\n" + overhead_check(current, pool))
            return 0
        if a.fit:
            ff = a.fit_prompts_factor
            fb = baseline_points([FIT_MODEL], workloads, FIT_CONCS, ff, pool, modes=(a.fit_baseline,), context=False)
            fit_base = {b: [q for q in fb if q["series"] == f"{b}/{a.fit_baseline}"] for b in BASELINES}
            print(f"fit on {FIT_MODEL} vs {a.fit_baseline} GB200/GB300 (concurrency {FIT_CONCS}, "
                  f"{len(workloads)} workloads, {ff:g} x concurrency requests):", flush=True)
            current, trace = fit(fit_base, workloads, ff, pool)
            print(f"fitted: {current}  ({len(trace)} evaluations, {time.time() - t0:.0f} s)", flush=True)
            for name, vals in SENSITIVITY.items():  # one at a time around the optimum
                row = []
                for v in vals:
                    val, st, _ = evaluate(replace(current, **{name: v}), fit_base, workloads, FIT_CONCS, ff, pool)
                    row.append(f"{v:g}: {st['tokens_per_w']:.2f} / {st['e2e']:.2f} / {st['interactive']:.2f} "
                               f"/ {st['max_watts']:.0f} W (loss {val:.2f})")
                print(f"  sensitivity {name} (tok/W / E2E / interactive): " + "; ".join(row), flush=True)
            print(f"fit + sensitivities: {time.time() - t0:.0f} s", flush=True)
            if a.fit_only:
                return 0
        modes = ("catalogue", "uncalibrated") if a.uncalibrated else ("catalogue",)
        base = baseline_points(MODELS, workloads, concs, a.prompts_factor, pool, modes, context=not a.quick)
        print(f"baselines: {len(base)} points, {time.time() - t0:.0f} s", flush=True)
        print(f"jalapeno parameters used: {current}")
        jal_tasks, prior_tasks = [], []
        for m in MODELS:
            jal_tasks += tasks_for(m, jalapeno_chip(current), "jalapeno", jal_layouts(m), workloads, concs,
                                   a.prompts_factor)
            if not a.quick:
                prior_tasks += tasks_for(m, jalapeno_chip(PRIOR), "jalapeno prior, no pinning", jal_layouts(m),
                                         workloads[:1], concs, a.prompts_factor, pin=False)
        jal = run_tasks(jal_tasks, pool)
        prior = run_tasks(prior_tasks, pool)
        print(f"jalapeno: {len(jal)} points, {time.time() - t0:.0f} s", flush=True)
        print("max Jalapeño power per chip (W):", {m: round(max(q["watts"] for q in jal if q["model"] == m))
                                                    for m in MODELS})
        for mode in modes:
            for cap, what in ((1 << 30, "all Jalapeño layouts (<= 64 chips)"), (8, "Jalapeño <= 8 chips too")):
                tab = claim_table(jal, base, MODELS, workloads, concs, mode, cap)
                print(f"\n### GB200/GB300 with {mode} efficiencies, {what}\n\n{tab}")
            print(f"\nDeepSeek-R1 5.99 s -> 1.65 s ({mode} GB300):\n\n{deepseek_point(jal, base, mode, concs)}")
        print("\n### Jalapeño's lowest-E2E layout, 1k/1k: E2E s, layout, GB of weights pinned in SRAM per chip")
        for m in MODELS:
            row = []
            for c in concs:
                pts = [q for q in jal
                       if q["model"] == m and q["concurrency"] == c and (q["isl"], q["osl"]) == WORKLOADS[0]]
                if pts:
                    q = min(pts, key=lambda q: q["e2e_s"])
                    row.append(f"c{c} {q['e2e_s']:.2f} s {q['layout']} ({q['sram_gb']:.1f} GB)")
            print(f"- {m}: " + "; ".join(row))
        print("\n### Layouts on Jalapeño's Pareto fronts (all workloads)")
        for m in MODELS:
            on = set()
            for w in workloads:
                pts = [q for q in jal if q["model"] == m and (q["isl"], q["osl"]) == w]
                fr = set(front(pts))
                on |= {q["layout"] for q in pts if (q["inter"], q["tput"]) in fr}
            print(f"- {m}: {', '.join(sorted(on))}")
        if not (a.quick or a.no_plots):
            for m in MODELS:
                plot(jal + base + prior, m, DOCS / f"jalapeno-study-{m}.png", workloads)
        print(f"\ntotal {time.time() - t0:.0f} s")
    finally:
        if pool:
            pool.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

