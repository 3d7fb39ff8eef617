"""Side by side with NVIDIA aiconfigurator: wall time and predictions of one serving point.

    python benchmarks/peer_aiconfigurator.py [--repeat 3] [--aic /tmp/aic/bin/aiconfigurator] [--quick]

Times the whole process of `jalapeno simulate ... --json` and of `aiconfigurator cli estimate` (agg mode,
TensorRT-LLM perf database) for DeepSeek-R1 FP8 on 8xH200 TP8 EP8, runs interleaved, best of N; prints
both tools' median TTFT / TPOT / output tok/s per GPU next to the InferenceX measurements of the same
point in benchmarks/data/calibration.csv (median and range). aiconfigurator is looked up with --aic, then
$AICONFIGURATOR, then PATH; install it in its own venv (`python -m venv /tmp/aic &&
/tmp/aic/bin/pip install aiconfigurator`). Without it the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

CALIBRATION = Path(__file__).parent / "data" / "calibration.csv"
# (isl, osl, concurrency, DP attention). aiconfigurator's --batch-size is per attention-DP rank, and its
# agg mode needs the whole batch's KV resident (no preemption): 1k/8k c256 at TP8 attention is an OOM there.
CASES = [(1024, 1024, 64, False), (1024, 8192, 256, False), (1024, 8192, 256, True)]


def ours_argv(isl: int, osl: int, conc: int, dp_attn: bool) -> list[str]:
    return [sys.executable, "-m", "jalapeno.cli", "simulate", "--model", "deepseek-r1", "--hardware", "h200",
            "--tp", "8", "--ep", "8", *(["--dp-attention"] if dp_attn else []), "--precision", "fp8",
            "--isl", str(isl), "--osl", str(osl), "--concurrency", str(conc), "--json"]


def theirs_argv(aic: str, isl: int, osl: int, conc: int, dp_attn: bool) -> list[str]:
    par = ["--tp", "1", "--dp", "8", "--batch-size", str(conc // 8)] if dp_attn else \
        ["--tp", "8", "--batch-size", str(conc)]
    return [aic, "cli", "estimate", "--model", "deepseek-ai/DeepSeek-R1", "--system", "h200_sxm",
            "--backend", "trtllm", *par, "--ep", "8", "--isl", str(isl), "--osl", str(osl),
            "--log-level", "ERROR"]


class Failed(Exception):
    """The tool exited non-zero; the message is its last error line."""


def timed(argv: list[str]) -> tuple[float, float, str]:
    """(wall s, child CPU s = user + sys, stdout) of one whole process; raises Failed on a non-zero exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        lines = (p.stderr or p.stdout).strip().splitlines() or ["(no output)"]
        raise Failed(f"wall {wall:.2f} s, exit {p.returncode}: {lines[-1][:200]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), p.stdout


def parse_ours(out: str) -> dict[str, float]:
    m = json.loads(out)
    return {"ttft_ms": m["median_ttft_ms"], "tpot_ms": m["median_tpot_ms"],
            "out_tok_s_gpu": m["output_throughput_per_chip"]}


def parse_theirs(out: str) -> dict[str, float]:
    """aiconfigurator prints one summary box; its tokens/s/gpu is output tokens (seq/s x OSL / GPUs)."""
    def grab(label: str) -> float:
        hit = re.search(rf"^\s*{re.escape(label)}:\s*([\d,.]+)", out, re.M)
        return float(hit.group(1).replace(",", "")) if hit else float("nan")
    return {"ttft_ms": grab("TTFT"), "tpot_ms": grab("TPOT"), "out_tok_s_gpu": grab("tokens/s/gpu")}


def measured(isl: int, osl: int, conc: int, dp_attn: bool) -> dict[str, list[float]]:
    """InferenceX rows for R1 FP8 8xH200 TP8 EP8, aggregated; ms and tok/s/GPU."""
    want = {"median_ttft": ("ttft_ms", 1e3), "median_tpot": ("tpot_ms", 1e3),
            "output_tput_per_gpu": ("out_tok_s_gpu", 1.0)}
    out: dict[str, list[float]] = {}
    with CALIBRATION.open() as f:
        for r in csv.DictReader(f):
            if (r["hardware"] == "h200" and r["model"].startswith("DeepSeek-R1") and r["precision"] == "fp8"
                    and r["parallelism"].startswith(f"TP8 EP8 DPattn={dp_attn}") and (r["isl"], r["osl"],
                    r["concurrency_or_batch"]) == (str(isl), str(osl), str(conc)) and r["metric"] in want):
                key, scale = want[r["metric"]]
                out.setdefault(key, []).append(float(r["value"]) * scale)
    return out


def find_aic(flag: str | None) -> str | None:
    for cand in (flag, os.environ.get("AICONFIGURATOR"), shutil.which("aiconfigurator"), "/tmp/aic/bin/aiconfigurator"):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--aic", help="path to the aiconfigurator executable")
    ap.add_argument("--quick", action="store_true", help="only 1k/1k c64")
    args = ap.parse_args()
    aic = find_aic(args.aic)
    if aic is None:
        print("aiconfigurator not found (pass --aic PATH or set AICONFIGURATOR); skipping.")
        return
    version = subprocess.run([aic, "version"], capture_output=True, text=True).stdout.strip()
    print(f"peer: {version} ({aic})")
    for isl, osl, conc, dp_attn in CASES[:1] if args.quick else CASES:
        rows: dict[str, list[tuple[float, float, str]]] = {"jalapeno": [], "aiconfigurator": []}
        errors: dict[str, str] = {}
        for _ in range(args.repeat):  # interleaved so both see the same load
            for name, argv in (("jalapeno", ours_argv(isl, osl, conc, dp_attn)),
                               ("aiconfigurator", theirs_argv(aic, isl, osl, conc, dp_attn))):
                if name in errors:
                    continue
                try:
                    rows[name].append(timed(argv))
                except Failed as e:
                    errors[name] = str(e)
        print(f"\nDeepSeek-R1 FP8 8xH200 TP8 EP8{' DP-attention' if dp_attn else ''}, {isl}/{osl}, "
              f"concurrency {conc}")
        print(f"{'':16s} {'wall s':>7s} {'cpu s':>7s} {'TTFT ms':>9s} {'TPOT ms':>8s} {'out tok/s/GPU':>14s}")
        walls = {}
        for name, parse in (("jalapeno", parse_ours), ("aiconfigurator", parse_theirs)):
            if name in errors:
                print(f"{name:16s} failed ({errors[name]})")
                continue
            r = rows[name]
            walls[name] = min(x[0] for x in r)
            p = parse(r[0][2])
            print(f"{name:16s} {walls[name]:7.2f} {min(x[1] for x in r):7.2f} {p['ttft_ms']:9.1f} "
                  f"{p['tpot_ms']:8.2f} {p['out_tok_s_gpu']:14.1f}")
        meas = measured(isl, osl, conc, dp_attn)
        if meas:
            def cell(k: str, fmt: str) -> str:
                v = meas.get(k, [])
                return (f"{statistics.median(v):{fmt}} [{min(v):{fmt}}-{max(v):{fmt}}]" if v else "-")
            n = max(len(v) for v in meas.values())
            print(f"InferenceX (n={n}, median [range]): TTFT {cell('ttft_ms', '.1f')} ms, "
                  f"TPOT {cell('tpot_ms', '.2f')} ms, out {cell('out_tok_s_gpu', '.1f')} tok/s/GPU")
        else:
            print("InferenceX: no row for this point in calibration.csv")
        if len(walls) == 2:
            print(f"wall ratio jalapeno / aiconfigurator = {walls['jalapeno'] / walls['aiconfigurator']:.2f}")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nload average {load} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
