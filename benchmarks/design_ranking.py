"""Does simulating fewer requests per point keep the design ranking? And how long do N designs take?

    python benchmarks/design_ranking.py                       # examples/design-seeds.yaml (81 designs x 3 workloads)
    python benchmarks/design_ranking.py --few 1 --many 10     # requests = few/many x concurrency
    python benchmarks/design_ranking.py --timing-grid 500     # also time a 500-design grid at the few setting

Scores the spec's grid twice (``num_prompts`` = few × and many × the largest concurrency, each point at least
one full wave), compares the rankings of the feasible designs (Spearman and Kendall on $/Mtok, tokens/s/user,
tokens/J) and the Pareto fronts, and prints wall times. Output directories go under a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _score(spec, out: str, workers: int) -> tuple[list[dict], float]:
    from jalapeno.design import search as S
    from jalapeno.design.spec import grid_designs

    t0 = time.perf_counter()
    rows = S.score_many(grid_designs(spec), spec, out, workers)
    return rows, time.perf_counter() - t0


def main() -> None:
    from scipy.stats import kendalltau, spearmanr

    from jalapeno.design import search as S
    from jalapeno.design.spec import load_design_spec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(ROOT / "examples" / "design-seeds.yaml"))
    ap.add_argument("--few", type=int, default=1, help="requests per point = few x concurrency")
    ap.add_argument("--many", type=int, default=10, help="requests per point = many x concurrency (InferenceX: 10)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timing-grid", type=int, default=0, help="also time a grid of about this many designs")
    a = ap.parse_args()
    base = load_design_spec(a.spec)
    conc = max(c for w in base.workloads for c in w.concurrencies)
    tmp = tempfile.mkdtemp(prefix="design-ranking-")
    res = {}
    for label, mult in (("few", a.few), ("many", a.many)):
        spec = base.model_copy(update={"num_prompts": mult * conc})
        rows, wall = _score(spec, os.path.join(tmp, label), a.workers)
        res[label] = ({r["id"].split("-")[0]: r for r in rows}, wall, rows)
        print(f"{label}: {mult} x concurrency {conc} = {mult * conc} requests per point: {len(rows)} designs in {wall:.1f} s "
              f"({wall / len(rows):.2f} s per design x {len(base.workloads)} workloads, {a.workers} workers)")
    few, many = res["few"][0], res["many"][0]
    ok = [k for k in few if few[k]["status"] == "ok" and many.get(k, {}).get("status") == "ok"]
    agree = sum(few[k]["status"] == many[k]["status"] for k in few)
    print(f"feasibility agrees on {agree}/{len(few)} designs; {len(ok)} feasible in both")
    for m in ("usd_per_mtok", "interactivity", "tokens_per_joule"):
        x, y = [few[k][m] for k in ok], [many[k][m] for k in ok]
        print(f"  {m:17s} Spearman {spearmanr(x, y)[0]:.3f}  Kendall {kendalltau(x, y)[0]:.3f}  "
              f"max |few/many - 1| {max(abs(p / q - 1) for p, q in zip(x, y)):.2f}")
    for name in ("interactivity", "tokens_per_joule"):
        fa = {r["id"].split("-")[0] for r in S.pareto(res["few"][2])[name]}
        fb = {r["id"].split("-")[0] for r in S.pareto(res["many"][2])[name]}
        print(f"  front vs {name}: {len(fa & fb)} common, {len(fa - fb)} only with few, {len(fb - fa)} only with many")
    if a.timing_grid:
        side = max(2, round(a.timing_grid ** 0.25))
        grid = {"fp8_tflops": [625 * 2 ** (i * 3 / (side - 1)) for i in range(side)],
                "sram_mb": [0] + [250 * 2 ** (i * 3 / (side - 2)) for i in range(side - 1)],
                "stacks": [round(8 * i / (side - 1)) for i in range(side)],
                "scale_up_gbps": [400 * 2 ** i for i in range(side)]}
        spec = base.model_copy(update={"num_prompts": a.few * conc, "grid": {k: [round(v, 1) for v in vs] for k, vs in grid.items()}})
        rows, wall = _score(spec, os.path.join(tmp, "timing"), a.workers)
        print(f"timing grid: {len(rows)} designs x {len(base.workloads)} workloads in {wall:.0f} s "
              f"({sum(r['status'] == 'ok' for r in rows)} feasible), {a.workers} workers")
    print(f"(outputs in {tmp}; load: {os.getloadavg()[0]:.1f} 1-min average on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
