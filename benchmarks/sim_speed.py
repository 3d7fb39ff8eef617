"""Wall time of `jalapeno simulate` (the whole CLI process) on the two InferenceX-sized targets.

    python benchmarks/sim_speed.py [--repeat 3]

Targets (docs/engine.md): DeepSeek-R1 FP8 on 8xH200 TP8 EP8, 1k/1k at concurrency 64 (640 requests)
<= 0.5 s; 1k/8k at concurrency 256 (2,560 requests, ~19M simulated tokens) <= 2 s. Reports the best wall
time and the child's CPU time (user + sys; robust when the machine is shared), plus the simulated
steps, the import-only time of the CLI and the load average for reference.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

CASES = {
    "R1 FP8 8xH200 TP8 EP8 1k/1k c64": (
        "--model deepseek-r1 --hardware h200 --tp 8 --ep 8 --precision fp8 --isl 1024 --osl 1024 --concurrency 64",
        0.5,
    ),
    "R1 FP8 8xH200 TP8 EP8 1k/8k c256": (
        "--model deepseek-r1 --hardware h200 --tp 8 --ep 8 --precision fp8 --isl 1024 --osl 8192 --concurrency 256",
        2.0,
    ),
    "  same, --dp-attention": (
        "--model deepseek-r1 --hardware h200 --tp 8 --ep 8 --dp-attention --precision fp8 --isl 1024 --osl 8192 "
        "--concurrency 256",
        2.0,
    ),
}


def timed(argv: list[str]) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise SystemExit(f"{' '.join(argv)} failed: {p.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cli = [sys.executable, "-m", "jalapeno.cli"]
    imp = min(timed([sys.executable, "-c", "import jalapeno.cli"])[:2] for _ in range(args.repeat))
    print(f"{'case':36s} {'wall s':>8s} {'cpu s':>8s} {'target':>7s} {'steps':>9s} {'sim tokens':>11s}")
    print(f"{'import jalapeno.cli only':36s} {imp[0]:8.2f} {imp[1]:8.2f}")
    for name, (flags, target) in CASES.items():
        runs = [timed([*cli, "simulate", *flags.split(), "--json"]) for _ in range(args.repeat)]
        wall = min(r[0] for r in runs)
        cpu = min(r[1] for r in runs)
        m = json.loads(runs[0][2])
        toks = m["total_input_tokens"] + m["total_output_tokens"]
        print(f"{name:36s} {wall:8.2f} {cpu:8.2f} {target:7.1f} {m['sim']['steps']:9,d} {toks:11,d}")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average {load} on {os.cpu_count()} cores (wall times inflate with load; CPU times much less)")


if __name__ == "__main__":
    main()
