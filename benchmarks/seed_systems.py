"""Every system the seeds describe, as `jalapeno simulate` runs it: the numbers of docs/seed-systems.md.

    python benchmarks/seed_systems.py            # all sections (~1-2 min on the 2-core container)
    python benchmarks/seed_systems.py lpx        # one section

Each row is one `jalapeno simulate ... --json` command (printed with the table), run in-process.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HW = str(ROOT / "examples" / "hardware")
DS = ["--model", "deepseek-r1"]
FP8 = ["--precision", "fp8", "--kv-dtype", "fp8"]
W1K = ["--isl", "1024", "--osl", "1024"]
LPX_DECODE = ["--decode-hardware", "groq-lp30", "--decode-tp", "128", "--decode-ep", "128", "--decode-pp", "20"]

#: section -> [(label, simulate arguments)]
SECTIONS: dict[str, list[tuple[str, list[str]]]] = {
    "boardfly": [
        (f"TPU 8i {name}, DeepSeek-R1 over 1,024 chips", [
            *DS, "--hardware", hw, "--hardware-dir", HW, "--tp", "1024", "--ep", "256", "--dp-attention", *FP8,
            "--isl", "1024", "--osl", "256", "--concurrency", "256", "--num-prompts", "512"])
        for name, hw in (("BoardFly + CAE (catalogue)", "tpu-8i"), ("3D torus, no CAE (what-if)", "tpu-8i-torus"))
    ],
    "lpx": [
        ("Vera Rubin NVL72 slice, TP8 EP8 FP4, c=1", [*DS, "--hardware", "vera-rubin", "--tp", "8", "--ep", "8",
                                                      "--precision", "fp4", "--kv-dtype", "fp8", *W1K,
                                                      "--concurrency", "1", "--num-prompts", "4"]),
        ("Vera Rubin NVL72 slice, TP8 EP8 FP4, c=64", [*DS, "--hardware", "vera-rubin", "--tp", "8", "--ep", "8",
                                                       "--precision", "fp4", "--kv-dtype", "fp8", *W1K,
                                                       "--concurrency", "64", "--num-prompts", "128"]),
        ("Rubin prefill (TP8 FP4) + 10 LPX racks decode (TP128 EP128 PP20 FP8), c=1", [
            *DS, *FP8, "--prefill-hardware", "vera-rubin", "--prefill-tp", "8", "--prefill-ep", "8",
            "--prefill-precision", "fp4", *LPX_DECODE, "--max-num-batched-tokens", "1024", *W1K,
            "--concurrency", "1", "--num-prompts", "4"]),
        ("Rubin prefill + 10 LPX racks decode, c=64", [
            *DS, *FP8, "--prefill-hardware", "vera-rubin", "--prefill-tp", "8", "--prefill-ep", "8",
            "--prefill-precision", "fp4", *LPX_DECODE, "--max-num-batched-tokens", "1024", *W1K,
            "--concurrency", "64", "--num-prompts", "128"]),
        ("Rubin prefill + 15 LPX racks decode (PP30), c=64", [
            *DS, *FP8, "--prefill-hardware", "vera-rubin", "--prefill-tp", "8", "--prefill-ep", "8",
            "--prefill-precision", "fp4", *LPX_DECODE[:-1], "30", "--max-num-batched-tokens", "1024", *W1K,
            "--concurrency", "64", "--num-prompts", "128"]),
        ("Kimi-K2.5 (INT4) aggregated on 15.25 LPX racks (TP64 EP64 PP61), c=1", [
            "--model", "kimi-k2.5", "--hardware", "groq-lp30", "--tp", "64", "--ep", "64", "--pp", "61",
            "--kv-dtype", "fp8", "--max-num-batched-tokens", "256", *W1K, "--concurrency", "1",
            "--num-prompts", "4"]),
    ],
    "nvl72": [
        ("GB300 TP8 EP8 FP4 (InferenceX single node), c=64", [*DS, "--hardware", "gb300", "--tp", "8", "--ep", "8",
                                                              "--dp-attention", "--precision", "fp4",
                                                              "--kv-dtype", "fp8", *W1K, "--concurrency", "64",
                                                              "--num-prompts", "192"]),
        ("GB300 NVL72 wide EP: TP72 EP72 (288 slots) FP4, c=64", [
            *DS, "--hardware", "gb300", "--tp", "72", "--ep", "72", "--dp-attention", "--precision", "fp4",
            "--kv-dtype", "fp8", *W1K, "--concurrency", "64", "--num-prompts", "192"]),
        ("GB300 NVL72 wide EP: TP72 EP72 FP4, c=1024", [
            *DS, "--hardware", "gb300", "--tp", "72", "--ep", "72", "--dp-attention", "--precision", "fp4",
            "--kv-dtype", "fp8", *W1K, "--concurrency", "1024", "--num-prompts", "2048"]),
    ],
    "dense": [  # the hyperscalers seed's table: TTFT / TPOT relative to H100 for a dense decoder
        (f"{hw} TP8, Llama-3.1-70B FP8, c=16", ["--model", "llama-3.1-70b", "--hardware", hw, "--tp", "8",
                                                *FP8, "--isl", "2048", "--osl", "512", "--concurrency", "16",
                                                "--num-prompts", "48"])
        for hw in ("h100", "tpu-v6e", "b200", "jalapeno")
    ] + [("jalapeno TP64 (weights in SRAM), Llama-3.1-70B FP8, c=16", [
        "--model", "llama-3.1-70b", "--hardware", "jalapeno", "--tp", "64", *FP8, "--isl", "2048", "--osl", "512",
        "--concurrency", "16", "--num-prompts", "48"])],
}

KEYS = [("num_chips", "chips", "{:.0f}"), ("median_ttft_ms", "TTFT ms", "{:,.0f}"),
        ("median_tpot_ms", "TPOT ms", "{:.2f}"), ("median_e2el_ms", "E2E s", "{:.2f}"),
        ("output_throughput", "out tok/s", "{:,.0f}"), ("usd_per_mtok", "$/Mtok", "{:.2f}")]


def simulate(args: list[str]) -> dict:
    from jalapeno.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(["simulate", *args, "--json"])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise RuntimeError(f"simulate {' '.join(args)} exited {exc.code}") from None
    return json.loads(buf.getvalue())


def _cell(m: dict, key: str, fmt: str) -> str:
    v = m.get(key)
    if v is None:
        return "-"
    return fmt.format(v / 1000 if key == "median_e2el_ms" else v)


def main(names: list[str]) -> None:
    for name in names or list(SECTIONS):
        print(f"\n### {name}\n\n| system | " + " | ".join(h for _, h, _ in KEYS) + " |")
        print("|---|" + "---|" * len(KEYS))
        cmds = []
        for label, args in SECTIONS[name]:
            t0 = time.perf_counter()
            m = simulate(args)
            cmds.append(f"jalapeno simulate {' '.join(a.replace(str(ROOT) + '/', '') for a in args)}"
                        f"   # {time.perf_counter() - t0:.1f} s")
            print(f"| {label} | " + " | ".join(_cell(m, k, f) for k, _, f in KEYS) + " |")
        print("\n```\n" + "\n".join(cmds) + "\n```")


if __name__ == "__main__":
    main(sys.argv[1:])
