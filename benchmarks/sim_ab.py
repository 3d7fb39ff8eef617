"""Side-by-side CPU time of one ``jalapeno simulate`` point under two source trees (before / after a change).

    git worktree add --detach /tmp/before main
    python benchmarks/sim_ab.py /tmp/before/src src 3 --model gpt-oss-120b --hardware h200 --tp 8 \\
        --isl 1024 --osl 8192 --concurrency 1024

Runs the same CLI process (``python -m jalapeno.cli simulate ... --json``) with ``PYTHONPATH`` set to each tree,
alternating before and after ``REPEAT`` times, pinned to one CPU with one BLAS thread, and prints the best
user + sys CPU seconds of each, their ratio, whether the two JSON outputs are byte-identical, and the load
average before and after (on a shared machine the CPU times inflate with load; the ratio much less).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys


def _run(src: str, args: list[str], cpu: int) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if hasattr(os, "sched_setaffinity") else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([sys.executable, "-m", "jalapeno.cli", "simulate", *args, "--json"], capture_output=True,
                       text=True, env=env, preexec_fn=pin)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise SystemExit(f"simulate under {src} failed: {p.stderr.strip()}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, p.stdout


def main(argv: list[str]) -> None:
    if len(argv) < 4:
        raise SystemExit(__doc__)
    trees = {"before": argv[0], "after": argv[1]}
    repeat, args = int(argv[2]), argv[3:]
    cpu = max(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    times: dict[str, list[float]] = {k: [] for k in trees}
    outs: dict[str, str] = {}
    load0 = os.getloadavg()[0]
    for _ in range(repeat):
        for name, src in trees.items():
            t, outs[name] = _run(src, args, cpu)
            times[name].append(t)
    b, a = min(times["before"]), min(times["after"])
    print(f"{' '.join(args)}\n  CPU s before {b:.2f}  after {a:.2f}  ratio {b / a:.2f}  "
          f"identical={outs['before'] == outs['after']}  load {load0:.1f} -> {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
