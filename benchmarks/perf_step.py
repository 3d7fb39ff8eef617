"""Time the cost model's fast paths (timeit) and print a markdown table.

Run: ``python benchmarks/perf_step.py`` (uses the built-in model and chip catalogues). Goal: a decode step of
any batch size priced in microseconds; <= 20 us per ``step()`` for DeepSeek-R1 on 8 chips (TP8 EP8).
"""

from __future__ import annotations

import platform
import timeit

from jalapeno.hardware import get_chip
from jalapeno.models import load_model
from jalapeno.perf import CostModel, Parallelism, Precision, StepShape

CASES = [
    ("llama-3.1-8b", "h200", Parallelism(tp=1), "decode", 1),
    ("llama-3.1-8b", "h200", Parallelism(tp=1), "decode", 256),
    ("gpt-oss-120b", "b200", Parallelism(tp=1), "decode", 64),
    ("deepseek-r1", "h200", Parallelism(tp=8, ep=8), "decode", 1),
    ("deepseek-r1", "h200", Parallelism(tp=8, ep=8), "decode", 512),
    ("deepseek-r1", "h200", Parallelism(tp=8, ep=8, dp_attention=True), "mixed", 64),
    ("llama-3.1-70b", "groq-lp30", Parallelism(tp=8, pp=32), "decode", 8),
]


def _shape(kind: str, batch: int, window: int | None) -> StepShape:
    if kind == "decode":
        return StepShape.from_lists(decode_ctx=[1000 + 7 * i for i in range(batch)], window=window)
    return StepShape.from_lists(prefill=[(2048, 0)], decode_ctx=[1000] * batch, window=window)


def _best_us(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def main() -> None:
    base = _best_us(lambda: sum(range(100)), 20000)
    print(f"python {platform.python_version()} on {platform.machine()}; machine-load reference: "
          f"sum(range(100)) takes {base:.2f} µs\n")
    print("| model | chip | parallelism | step | init (ms) | step() (µs) | breakdown() (µs) | decode_steps(k=64) (µs per step) |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    for model, hw, par, kind, batch in CASES:
        m, c = load_model(model), get_chip(hw)
        prec = Precision("fp8") if model == "llama-3.1-70b" else Precision()
        init_ms = _best_us(lambda: CostModel(m, c, par, prec), 5) / 1e3
        cm = CostModel(m, c, par, prec)
        s = _shape(kind, batch, m.attention_window)
        step_us = _best_us(lambda: cm.step(s), 20000)
        bd_us = _best_us(lambda: cm.breakdown(s), 500)
        if kind == "decode":
            multi = f"{_best_us(lambda: cm.decode_steps(s, 64), 2000) / 64:.2f}"
        else:
            multi = "-"
        print(f"| {model} | {hw} | {par.describe()} | {kind} b={batch} | {init_ms:.2f} | {step_us:.1f} | {bd_us:.0f} | {multi} |")


if __name__ == "__main__":
    main()
