"""Wall time of `jalapeno simulate` (the whole CLI process) on the InferenceX-sized targets, on one core, and of
`jalapeno sweep` on InferenceX's 270-point grid, on two.

    python benchmarks/sim_speed.py [--repeat 3] [--no-compile] [--only TEXT] [--growth] [--native]

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

``--native``: each single-point case runs pure (``JALAPENO_NATIVE=0``) and with the native build
(``jalapeno build-native``, which must be current for this tree), alternating, ``--repeat`` times each; prints
both best times, their ratio and whether the two JSON outputs are byte-identical (sweeps and growth are skipped).
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


def timed(argv: list[str], cpu: int | None, native: bool | None = None) -> tuple[float, float, str]:
    """``native``: None leaves the environment as it is; False runs pure Python (``JALAPENO_NATIVE=0``); True
    lets a current native build load."""
    env = {**os.environ, **ONE_THREAD}
    if native is not None:
        env.pop("JALAPENO_NATIVE", None)
        if not native:
            env["JALAPENO_NATIVE"] = "0"
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
    ap.add_argument("--native", action="store_true",
                    help="run each single-point case pure and with the native build, alternating, side by side")
    args = ap.parse_args()
    if not args.no_compile:
        import jalapeno

        compileall.compile_dir(str(Path(jalapeno.__file__).parent), quiet=1)
    cpu = args.cpu
    if cpu is None:
        cpu = max(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    load0 = os.getloadavg()
    cli = [sys.executable, "-m", "jalapeno.cli"]
    if args.native:
        native_cases(args, cli, cpu)
        load1 = os.getloadavg()
        print(f"load average {', '.join(f'{x:.1f}' for x in load0)} before, {', '.join(f'{x:.1f}' for x in load1)} "
              f"after, on {os.cpu_count()} cores")
        return
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


#: run in a child: which compiled modules this tree loads from a native build, and why not
_PROBE = ("import importlib, json, jalapeno.native as n\n"
          "for m in n.MODULES: importlib.import_module(m)\n"
          "print(json.dumps([sorted(n.active()), len(n.MODULES), n.served()[1]]))")


def native_cases(args: argparse.Namespace, cli: list[str], cpu: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JALAPENO_NATIVE"}
    p = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env)
    try:
        loaded, total, why = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise SystemExit(f"--native: the probe failed: {p.stderr.strip()[-500:]}") from None
    if len(loaded) != total:
        raise SystemExit(f"--native: no current native build for this tree ({why or loaded}): run jalapeno "
                         "build-native")
    print(f"pinned to CPU {cpu}; best of {args.repeat}, pure (JALAPENO_NATIVE=0) and native alternating; "
          f"{total} modules compiled")
    print(f"{'case':44s} {'pure wall':>9s} {'cpu':>6s} {'native wall':>11s} {'cpu':>6s} {'cpu ratio':>9s} "
          f"{'target':>6s} identical")
    for name, (flags, target) in CASES.items():
        if args.only not in name:
            continue
        argv = [*cli, "simulate", *flags.split(), "--json"]
        runs: dict[bool, list] = {False: [], True: []}
        for _ in range(args.repeat):
            for native in (False, True):
                runs[native].append(timed(argv, cpu, native))
        best = {k: (min(r[0] for r in v), min(r[1] for r in v)) for k, v in runs.items()}
        same = len({r[2] for v in runs.values() for r in v}) == 1
        ok = "ok" if best[True][0] <= target else "MISSED"
        print(f"{name:44s} {best[False][0]:9.2f} {best[False][1]:6.2f} {best[True][0]:11.2f} {best[True][1]:6.2f} "
              f"{best[False][1] / best[True][1]:8.2f}x {target:6.1f} {same}  {ok}")


if __name__ == "__main__":
    main()
