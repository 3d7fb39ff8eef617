"""Decompose low-load TTFT into an intercept (front end) and a slope per prompt token, per chip x stack x model.

    python benchmarks/ttft_decompose.py --out /tmp/ttft.jsonl                  # simulate the c <= 4 rows
    python benchmarks/ttft_decompose.py --load /tmp/ttft.jsonl [--by chip,framework,model]   # tables only

At concurrency <= 4 a request barely queues, so its TTFT is the serving stack's front end plus the prefill of its
prompt (and the step that carries the first token). For every aggregated InferenceX configuration at c <= 4 (one
point per configuration: the median over its reruns) this prices the same request path with the serving simulator
twice: with the chip's catalogue efficiency block ("full"), and with every prefill-side and front-end term at 0
("bare": no front end, no per-prompt-token front-end time, no per-prefill-layer / expert / token cost, prefill
collectives fully exposed; the decode-side terms stay, they price every step). ``measured - bare`` is then what the
overhead terms must supply; its least-squares line against ISL (the rows have ISL 1k and 8k) gives an intercept
(ms at ISL 0: a true front end, if the line holds) and a slope (us per prompt token beyond what the roofline prices
for the prefill). The bare price's own slope is printed beside it (``priced us/tok``): the ratio of the two says
whether the missing time scales with the prefill work (an efficiency) or with the tokens (bookkeeping).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fit_terms import dedupe, predict, split_of, usable_points  # noqa: E402

#: every prefill-side term and front end at 0 (``fit_terms.py --params`` names)
BARE = {"request_overhead_ms": 0.0, "request_overhead_us_per_token": 0.0, "prefill_layer_overhead_us": 0.0,
        "prefill_expert_overhead_us": 0.0, "prefill_token_overhead_ns": 0.0, "prefill_collective_overlap": 0.0,
        "fw.vllm": 0.0, "fw.sglang": 0.0, "fw.trt-llm": 0.0}
LOW_LOAD = 4


def simulate_rows(chips: set[str], per: int, workers: int, reruns: str) -> list[dict]:
    """Measured, full and bare TTFT (s) of every deduplicated c <= LOW_LOAD configuration of ``chips``."""
    items = dedupe([(p, s) for p, s in usable_points(chips) if (s.concurrency or 10**9) <= LOW_LOAD], reruns)
    specs = [s for _, s in items]
    with ProcessPoolExecutor(workers) as pool:
        full = predict(specs, None, per, pool)
        bare = predict(specs, BARE, per, pool)
    rows = []
    for (p, s), f, b in zip(items, full, bare):
        if "error" in f or "error" in b or not p.metrics.get("median_ttft"):
            continue
        rows.append({"chip": s.chip, "model": s.model, "weights": s.weights, "framework": s.framework,
                     "layout": f"TP{s.layout.tp} EP{s.layout.ep}{' DPA' if s.layout.dp_attention else ''}",
                     "isl": s.isl, "osl": s.osl, "conc": s.concurrency, "split": split_of(p, s),
                     "reruns": len(p.ids), "measured": p.metrics["median_ttft"], "full": f["median_ttft"],
                     "bare": b["median_ttft"]})
    return rows


def line(rows: list[dict], key: str) -> tuple[float, float]:
    """(intercept s, slope s per token) of ``row[key]`` against ISL: the line through its median at each ISL
    (medians: a few configurations of a group sit far off the rest, e.g. B200 SGLang TP4 EP1 at 2-3x its
    group); least squares over the medians with more than two ISLs, nan slope with one."""
    by: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        by[r["isl"]].append(r[key])
    x = np.array(sorted(by), float)
    y = np.array([np.median(by[int(i)]) for i in x])
    if len(x) < 2:
        return float(y[0]), float("nan")
    slope, icpt = np.polyfit(x, y, 1)
    return float(icpt), float(slope)


def table(rows: list[dict], by: list[str]) -> str:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[tuple(str(r[k]) for k in by)].append({**r, "gap": r["measured"] - r["bare"],
                                                     "added": r["full"] - r["bare"]})
    head = ("| " + " | ".join(by) + " | n | TTFT 1k / 8k measured (ms) | bare 1k / 8k (ms) | gap intercept (ms) | "
            "gap slope (us/tok) | priced slope (us/tok) | catalogue adds 1k / 8k (ms) | full signed 1k / 8k (%) |")
    out = [head, "|" + "---|" * (len(by) + 8)]
    for k in sorted(groups):
        g = groups[k]

        def med(key: str, isl: int, scale: float = 1e3) -> str:
            v = [r[key] for r in g if r["isl"] == isl]
            return f"{scale * np.median(v):.0f}" if v else "–"

        def signed(isl: int) -> str:
            v = [100 * (r["full"] - r["measured"]) / r["measured"] for r in g if r["isl"] == isl]
            return f"{np.median(v):+.0f}" if v else "–"

        a, b = line(g, "gap")
        _, pb = line(g, "bare")
        out.append("| " + " | ".join(k) + f" | {len(g)} | {med('measured', 1024)} / {med('measured', 8192)} | "
                   f"{med('bare', 1024)} / {med('bare', 8192)} | {1e3 * a:.1f} | {1e6 * b:.2f} | {1e6 * pb:.2f} | "
                   f"{med('added', 1024)} / {med('added', 8192)} | {signed(1024)} / {signed(8192)} |")
    return "\n".join(out)


def kernel_table(rows: list[dict]) -> str:
    """The 1k-prompt gap (measured - bare, median over a group's configurations) against the kernels of a prefill
    step (``perf.model.kernel_count`` of each layout) and their ratio. Where one chip x stack serves two models
    (B200 TensorRT-LLM, MI355X ATOM) the line through the two rows splits the gap into a front end F (ms) and a
    per-kernel cost k (us): k = (gap_a - gap_b) / (kernels_a - kernels_b)."""
    from jalapeno.models.catalog import load_model
    from jalapeno.perf.model import kernel_count

    groups: dict[tuple, list[tuple[int, float]]] = defaultdict(list)
    for r in rows:
        if r["isl"] != 1024:
            continue
        tp, ep = (int(t[2:]) for t in r["layout"].split()[:2])
        groups[(r["chip"], r["framework"], r["model"], r["weights"])].append(
            (kernel_count(load_model(r["model"]), tp, ep), 1e3 * (r["measured"] - r["bare"])))
    out = ["| chip | stack | model | weights | n | kernels | 1k gap (ms) | gap / kernel (us) |", "|---|---|---|---|---|---|---|---|"]
    for k in sorted(groups):
        kern = float(np.median([x for x, _ in groups[k]]))
        gap = float(np.median([g for _, g in groups[k]]))
        out.append("| " + " | ".join(k) + f" | {len(groups[k])} | {kern:.0f} | {gap:.0f} | {1e3 * gap / kern:.1f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chip", action="append", help="chips (default: b200, mi355x, h200, h100)")
    ap.add_argument("--out", type=Path, help="write the rows here (JSON lines)")
    ap.add_argument("--load", type=Path, help="read rows written by --out instead of simulating")
    ap.add_argument("--by", default="chip,framework,model,weights")
    ap.add_argument("--per", type=int, default=4, help="simulated requests per unit of concurrency")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--reruns", choices=("median", "latest"), default="median")
    a = ap.parse_args(argv)
    if a.load:
        rows = [json.loads(ln) for ln in a.load.read_text().splitlines() if ln.strip()]
    else:
        rows = simulate_rows(set(a.chip or ("b200", "mi355x", "h200", "h100")), a.per, a.workers, a.reruns)
        if a.out:
            a.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if a.chip and a.load:
        rows = [r for r in rows if r["chip"] in a.chip]
    print(table(rows, a.by.split(",")))
    print()
    print(kernel_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
