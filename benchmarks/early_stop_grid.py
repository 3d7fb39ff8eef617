"""Compare a sweep run with ``early_stop`` against the same sweep run exactly: do the rankings and Pareto fronts
agree? (issue #19: a sweep may use the fast mode only where they equal the exact ones.)

    jalapeno sweep examples/inferencex-grid.yaml --out runs/exact --workers 2
    (cat examples/inferencex-grid.yaml; echo "early_stop: 0.1") > /tmp/es.yaml
    jalapeno sweep /tmp/es.yaml --out runs/fast --workers 2
    python benchmarks/early_stop_grid.py runs/exact runs/fast

Prints, per workload (ISL/OSL), whether the ranking of the layouts×concurrencies by output throughput per chip
and by median interactivity is the same, and whether the three report fronts (throughput per chip, per MW, $/Mtok
against interactivity) hold the same points; then the worst point-by-point relative differences.
"""

from __future__ import annotations

import sys

import pyarrow.parquet as pq

from jalapeno.report.pareto import FRONTS, fronts_by_group

KEY = ("tp", "ep", "dp", "dp_attention", "concurrency")


def _rows(path: str) -> list[dict]:
    return [r for r in pq.read_table(f"{path}/results.parquet").to_pylist() if r["status"] == "ok"]


def _key(r: dict) -> tuple:
    return tuple(r[k] for k in KEY)


def main(exact_dir: str, fast_dir: str) -> int:
    exact, fast = _rows(exact_dir), _rows(fast_dir)
    stopped = sum(bool(r.get("early_stop_stopped_early")) for r in fast)
    print(f"{len(exact)} exact rows, {len(fast)} early-stop rows ({stopped} stopped early)")
    same = True
    for wl in sorted({(r["isl"], r["osl"]) for r in exact}):
        ex = [r for r in exact if (r["isl"], r["osl"]) == wl]
        fa = [r for r in fast if (r["isl"], r["osl"]) == wl]
        for col in ("output_throughput_per_chip", "median_interactivity"):
            a = [_key(r) for r in sorted(ex, key=lambda r: (-r[col], _key(r)))]
            b = [_key(r) for r in sorted(fa, key=lambda r: (-r[col], _key(r)))]
            diff = sum(x != y for x, y in zip(a, b))
            same &= diff == 0
            print(f"  {wl[0]}/{wl[1]} ranking by {col}: {'equal' if not diff else f'{diff} positions differ'}")
        for name, (y, up) in FRONTS.items():
            fe = {k: [_key(r) for r in v] for k, v in fronts_by_group(ex, y, up, group_by=("model",)).items()}
            ff = {k: [_key(r) for r in v] for k, v in fronts_by_group(fa, y, up, group_by=("model",)).items()}
            same &= fe == ff
            detail = "" if fe == ff else f"  exact {list(fe.values())} vs early stop {list(ff.values())}"
            print(f"  {wl[0]}/{wl[1]} front {name}: {'equal' if fe == ff else 'DIFFERS'}{detail}")
    by_key = {(_key(r), r["isl"], r["osl"]): r for r in exact}
    for col in ("output_throughput_per_chip", "median_tpot_ms", "median_ttft_ms", "p99_ttft_ms", "median_interactivity"):
        worst = max(abs(r[col] / by_key[(_key(r), r["isl"], r["osl"])][col] - 1.0) for r in fast)
        print(f"  worst relative difference in {col}: {100 * worst:.2f} %")
    print("rankings and fronts equal" if same else "rankings or fronts DIFFER")
    return 0 if same else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
