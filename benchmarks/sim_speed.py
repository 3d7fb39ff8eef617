"""Wall time of `jalapeno simulate` (the whole CLI process) on the InferenceX-sized targets, on one core, and of
`jalapeno sweep` on InferenceX's 270-point grid, on two.

    python benchmarks/sim_speed.py [--repeat 3] [--no-compile] [--only TEXT] [--growth]

Targets (docs/engine.md, issue #4): DeepSeek-R1 FP8 on 8xH200 TP8 EP8, 1k/1k at concurrency 64 (640 requests)
<= 0.5 s; 1k/8k at concurrency 256 (2,560 requests, ~21M simulated tokens) <= 2 s, on one core. Issue #17
item 8 / #19: one rack-scale disaggregated GB200 point (concurrency 8,192, 81,920 requests) <= 10 s; #19: any
single point up to concurrency 1,024 <= 2 s (GPT-OSS-120B on 8xH200, 1k/8k, c1024: sliding-window attention)
and the 270-point grid (examples/inferencex-grid.yaml) <= 30 s on 2 cores (a ``jalapeno sweep`` process with
2 workers, not pinned; its CPU time includes the workers'). ``--growth`` prints the cost against concurrency
and against requests (docs/performance.md).

Each case runs as a fresh `sys.executable -m jalapeno.cli simulate ... --json` process pinned to one CPU
(``os.sched_setaffinity`` in the child, where the OS has it) with OMP/OpenBLAS/MKL threads set to 1. Reports
the best wall time and the best CPU time (user + sys of the child), the simulated steps and tokens, the
import-only time of the CLI and the load average before and after. By default the package's sources are
byte-compiled first (``compileall``), as an installed package is: with ``PYTHONDONTWRITEBYTECODE`` set
(some dev shells do) every run would otherwise recompile jalapeño's modules (≈ 0.1 s).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    "GPT-OSS-120B 8xH200 TP8 1k/8k c1024": (
        "--model gpt-oss-120b --hardware h200 --tp 8 --isl 1024 --osl 8192 --concurrency 1024",
        2.0,
    ),
    # the 270-point grid's heaviest point, KV-bound (≈ 39,000 preemptions, 5.2 events per request): the one
    # "any single point up to concurrency 1,024" case still above 2 s (docs/performance.md, fourteenth session)
    "GPT-OSS-120B 1xH200 TP1 1k/8k c1024 KV fp8": (
        "--model gpt-oss-120b --hardware h200 --tp 1 --isl 1024 --osl 8192 --concurrency 1024 --kv-dtype fp8",
        2.0,
    ),
    # issue #17 item 8: an InferenceX GB200 NVL72 disaggregated point (4 prefill workers of 4 GPUs with
    # dp-attention, one 48-GPU wide-EP decode worker: 288 expert slots; KV over NVLink), 81,920 requests
    "R1 FP4 GB200 disagg 4x4P+48D c8192": (
        "--model deepseek-r1 --hardware gb200 --precision fp4 --isl 1024 --osl 1024 --concurrency 8192 "
        "--num-prompts 81920 --prefill-workers 4 --prefill-chips-per-worker 4 --prefill-ep 4 --prefill-dp-attention "
        "--decode-workers 1 --decode-chips-per-worker 48 --decode-ep 48 --decode-dp-attention",
        10.0,
    ),
}

#: name -> (sweep file, target wall s on 2 cores)
SWEEPS = {"270-point grid (sweep, 2 workers)": ("examples/inferencex-grid.yaml", 30.0)}
#: the growth curves: (label, flags) with {c} / {n} filled in
GROWTH_C = ("GPT-OSS-120B 8xH200 1k/1k, c = {c} (10c requests)",
            "--model gpt-oss-120b --hardware h200 --tp 8 --isl 1024 --osl 1024 --concurrency {c}",
            (64, 256, 1024, 4096))
GROWTH_N = ("GPT-OSS-120B 8xH200 1k/1k c1024, {n} requests",
            "--model gpt-oss-120b --hardware h200 --tp 8 --isl 1024 --osl 1024 --concurrency 1024 --num-prompts {n}",
            (2048, 10240, 40960))

#: thread pools a numerical library might start; one core means one thread
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")}


def _pin(cpu: int):
    def pin() -> None:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {cpu})

    return pin


def timed(argv: list[str], cpu: int | None) -> tuple[float, float, str]:
    env = {**os.environ, **ONE_THREAD}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, preexec_fn=None if cpu is None else _pin(cpu))
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise SystemExit(f"{' '.join(argv)} failed: {p.stderr.strip()}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu_s, p.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=None, help="CPU to pin the runs to (default: the last one allowed)")
    ap.add_argument("--no-compile", action="store_true", help="do not byte-compile the package first")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this text")
    ap.add_argument("--growth", action="store_true", help="also print time vs concurrency and vs requests")
    args = ap.parse_args()
    if not args.no_compile:
        import jalapeno

        compileall.compile_dir(str(Path(jalapeno.__file__).parent), quiet=1)
    cpu = args.cpu
    if cpu is None:
        cpu = max(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    load0 = os.getloadavg()
    cli = [sys.executable, "-m", "jalapeno.cli"]
    imp = min(timed([sys.executable, "-c", "import jalapeno.cli"], cpu)[:2] for _ in range(args.repeat))
    print(f"pinned to CPU {cpu}; best of {args.repeat}")
    print(f"{'case':36s} {'wall s':>8s} {'cpu s':>8s} {'target':>7s} {'steps':>9s} {'sim tokens':>11s}")
    print(f"{'import jalapeno.cli only':36s} {imp[0]:8.2f} {imp[1]:8.2f}")
    for name, (flags, target) in CASES.items():
        if args.only not in name:
            continue
        runs = [timed([*cli, "simulate", *flags.split(), "--json"], cpu) for _ in range(args.repeat)]
        wall = min(r[0] for r in runs)
        cpu_s = min(r[1] for r in runs)
        m = json.loads(runs[0][2])
        toks = m["total_input_tokens"] + m["total_output_tokens"]
        ok = "ok" if wall <= target else "MISSED"
        print(f"{name:36s} {wall:8.2f} {cpu_s:8.2f} {target:7.1f} {m['sim']['steps']:9,d} {toks:11,d}  {ok}")
    for name, (spec, target) in SWEEPS.items():
        if args.only not in name:
            continue
        runs = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as out:
                runs.append(timed([*cli, "sweep", spec, "--out", out, "--workers", "2", "--quiet"], None))
        wall = min(r[0] for r in runs)
        ok = "ok" if wall <= target else "MISSED"
        print(f"{name:36s} {wall:8.2f} {min(r[1] for r in runs):8.2f} {target:7.1f}  {runs[0][2].strip()}  {ok}")
    if args.growth:
        for label, flags, values in (GROWTH_C, GROWTH_N):
            for v in values:
                argv = [*cli, "simulate", *flags.format(c=v, n=v).split(), "--json"]
                wall, cpu_s, out = min(timed(argv, cpu) for _ in range(args.repeat))
                m = json.loads(out)
                print(f"{label.format(c=v, n=v):52s} {wall:8.2f} {cpu_s:8.2f} steps {m['sim']['steps']:9,d}")
    load1 = os.getloadavg()
    fmt = lambda la: ", ".join(f"{x:.1f}" for x in la)  # noqa: E731
    print(f"load average {fmt(load0)} before, {fmt(load1)} after, on {os.cpu_count()} cores "
          "(wall times inflate with load; CPU times much less)")


if __name__ == "__main__":
    main()
