"""Break the simulator's errors down by model x chip x precision x framework x concurrency band x ISL.

    python benchmarks/fit_terms.py eval --per 4 --dump /tmp/points.jsonl     # predictions, one JSON line per row
    python benchmarks/residual_breakdown.py /tmp/points.jsonl [--by chip,model,weights,framework,band,isl]

Prints a Markdown table: n, then median signed % error of output tok/s per chip, TPOT and TTFT (positive
throughput or negative latency = the simulator is too fast), and median |%| of TPOT. No pandas: a dict of lists.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

METRICS = (("output_tput_per_gpu", "tput"), ("median_tpot", "TPOT"), ("median_ttft", "TTFT"))


def band(conc: int | None) -> str:
    c = conc or 0
    return "c<=8" if c <= 8 else "c<=32" if c <= 32 else "c<=128" if c <= 128 else "c>128"


def key_of(row: dict, by: list[str]) -> tuple:
    out = []
    for k in by:
        if k == "band":
            out.append(band(row["conc"]))
        elif k == "isl":
            out.append(f"{row['isl']}/{row['osl']}")
        elif k == "layout":
            out.append(f"TP{row['tp']} EP{row['ep']}{' DPA' if row['dpa'] else ''}")
        else:
            out.append(str(row[k]))
    return tuple(out)


def table(rows: list[dict], by: list[str], min_n: int = 3) -> str:
    groups: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        pr, me = r["predicted"], r["measured"]
        if "error" in pr:
            continue
        g = groups[key_of(r, by)]
        g["n"].append(1.0)
        for m, _ in METRICS:
            if me.get(m) and m in pr:
                g[m].append(100.0 * (pr[m] - me[m]) / me[m])
    head = "| " + " | ".join(by) + " | n | " + " | ".join(f"{n} signed" for _, n in METRICS) + " | TPOT abs |"
    out = [head, "|" + "---|" * (len(by) + len(METRICS) + 2)]
    for k in sorted(groups):
        g = groups[k]
        if len(g["n"]) < min_n:
            continue
        cells = [f"{np.median(g[m]):+.1f}" if g[m] else "–" for m, _ in METRICS]
        tabs = f"{np.median(np.abs(g['median_tpot'])):.1f}" if g["median_tpot"] else "–"
        out.append("| " + " | ".join(k) + f" | {len(g['n'])} | " + " | ".join(cells) + f" | {tabs} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump", type=Path)
    ap.add_argument("--by", default="chip,model,weights,framework,band")
    ap.add_argument("--chip", action="append")
    ap.add_argument("--min-n", type=int, default=3)
    ap.add_argument("--scatter", type=Path, help="also draw predicted vs measured (calibration.report.scatter) here")
    ap.add_argument("--title", default="Jalapeño simulator vs published measurements")
    a = ap.parse_args(argv)
    rows = [json.loads(ln) for ln in a.dump.read_text().splitlines() if ln.strip()]
    if a.chip:
        rows = [r for r in rows if r["chip"] in a.chip]
    print(table(rows, a.by.split(","), a.min_n))
    if a.scatter:
        from types import SimpleNamespace

        from jalapeno.calibration.report import scatter

        recs = [SimpleNamespace(spec=SimpleNamespace(model=r["model"], chip=r["chip"]), metric=m,
                                meas=r["measured"][m], pred=r["predicted"][m])
                for r in rows if "error" not in r["predicted"]
                for m in ("output_tput_per_gpu", "total_tput_per_gpu", "median_tpot", "median_ttft")
                if r["measured"].get(m) and r["predicted"].get(m)]
        scatter(recs, a.scatter, a.title)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
