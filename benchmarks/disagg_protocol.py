"""How a disaggregated point's simulated median TTFT depends on the requests per concurrency slot.

    python benchmarks/disagg_protocol.py --filter REGEX [--per 2,3,5,10] [--early-stop 0.05] [--json out.json]

InferenceX sends ``10 × concurrency`` requests in a closed loop: the first ``concurrency`` ("the first wave")
all arrive at t = 0 and queue behind the prefill pool, the rest arrive as others finish. The evaluation runs
fewer requests per slot for CPU time; this script shows, per selected point, the median TTFT at each requests
per slot of ``--per``, the first wave's and the later waves' medians, the InferenceX-weighted estimate of every
run (:func:`jalapeno.calibration.disagg.weighted_median_ttft`: the first wave weighted 1/10, the rest 9/10) and,
with ``--early-stop``, a 10-per-slot run under the simulator's statistical early stop.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "benchmarks" / "data" / "calibration-blackwell-amd.csv"


def _run(spec, per: int, early_stop: float | None = None) -> dict:
    from jalapeno.calibration.disagg import disagg_scenario, weighted_median_ttft
    from jalapeno.sim.scenario import run_scenario

    sc = disagg_scenario(spec, prompts_per_concurrency=per)
    if early_stop:
        sc = replace(sc, early_stop=early_stop)
    t0 = time.perf_counter()
    m, res = run_scenario(sc, return_result=True)
    dt = time.perf_counter() - t0
    outs = sorted((o for o in res.outcomes if o.success), key=lambda o: o.start_s)
    c = int(spec.concurrency)
    ttft = np.array([o.ttft_s for o in outs])
    return {"per": per, "requests": len(outs), "seconds": round(dt, 1),
            "median_ttft": float(np.median(ttft)),
            "first_wave": float(np.median(ttft[:c])), "later_waves": float(np.median(ttft[c:])) if len(ttft) > c else None,
            "weighted10": weighted_median_ttft([o.start_s for o in outs], ttft, c),
            "early_stop": m.get("early_stop")}


def main(argv: list[str] | None = None) -> int:
    from jalapeno.calibration import load_points
    from jalapeno.calibration.disagg import disagg_items
    from jalapeno.calibration.fit import dedupe

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", type=Path, default=CSV)
    ap.add_argument("--filter", required=True, help="points whose label matches this regular expression")
    ap.add_argument("--per", default="2,3,5,10", help="requests per concurrency slot to run, comma-separated")
    ap.add_argument("--early-stop", type=float, default=0.0, help="also run 10 per slot under this early-stop tolerance")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    pers = [int(x) for x in a.per.split(",") if x]
    items = [(p, s) for p, s in dedupe(disagg_items(load_points(a.csv))) if re.search(a.filter, p.label)]
    out = []
    for p, s in items:
        row = {"label": p.label, "concurrency": s.concurrency, "measured_ttft": p.metrics.get("median_ttft"), "runs": []}
        for per in pers:
            r = _run(s, per)
            row["runs"].append(r)
            print(f"{p.label} per={per}: median {r['median_ttft']:.3f} s (first wave {r['first_wave']:.3f}, later "
                  f"{r['later_waves'] if r['later_waves'] is None else round(r['later_waves'], 3)}, weighted10 "
                  f"{r['weighted10']:.3f}) {r['seconds']} s", file=sys.stderr, flush=True)
        if a.early_stop:
            r = _run(s, 10, a.early_stop)
            r["per"] = f"10 early-stop {a.early_stop}"
            row["runs"].append(r)
            print(f"{p.label} early-stop: median {r['median_ttft']:.3f} s, {r['requests']} requests, "
                  f"{r['seconds']} s", file=sys.stderr, flush=True)
        out.append(row)
    print("| point | c | measured | " + " | ".join(str(r["per"]) for r in out[0]["runs"]) + " |" if out else "")
    for row in out:
        cells = [f"{r['median_ttft']:.3f} (w {r['weighted10']:.3f})" for r in row["runs"]]
        print(f"| {row['label']} | {row['concurrency']} | {row['measured_ttft']:.3f} | " + " | ".join(cells) + " |")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
