"""Offline, deterministic: time the engine steps the closed loop produces under load, through the runner exactly
as the server runs them, and compare each with what the simulator prices for the same step on the probed chip.

Shapes (SmolLM2-135M's architecture, random float32 weights, no server): pure decode at batch 8/16/32, a
512- and a 2048-token prefill alone, and each prefill mixed with 7 / 15 decode rows (the step a completion
brings at concurrency 8 / 16: one new prompt, the other sequences decoding). Each step is timed best-of-N
(wall and CPU time) with the runner's policy from the probe (``apply_measured_choices``: the server's path) and
priced with ``cost_model_for("smollm2-135m", local, fp32)`` (the ``bench --compare-sim`` cost model). The
machine is shared: compare the ratios (measured / priced), not absolute times, and note the load.

    jalapeno hardware probe --quick --out $JALAPENO_CACHE/hardware
    python benchmarks/mixed_step.py [--reps 3] [--out mixed.json]
    python benchmarks/mixed_step.py --layers 4 --vocab 2048 --no-price --out tests/hardware/data/mixed_trace.json

The last form records the trace tests/hardware/test_mixed_trace.py prices on a hand-made chip (a 4-layer model:
seconds, not minutes, per step on a loaded machine; no probe needed).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from _record import finish

#: SmolLM2-135M: 30 layers, hidden 576, MLP 1536, 9 query / 3 KV heads of 64, vocab 49152 (tied)
LAYERS, HIDDEN, INTER, VOCAB = 30, 576, 1536, 49152
BLOCK = 16
DECODE_CTX = 64  # tokens each decoding sequence has generated past its prompt when the new prompt arrives


def shapes() -> list[tuple[str, int, int, int]]:
    """(label, prefill tokens, decode rows, decode rows' prompt length)."""
    out = [(f"decode b={b}", 0, b, 512) for b in (8, 16, 32)]
    for isl in (512, 2048):
        out.append((f"prefill {isl}", isl, 0, isl))
        out += [(f"prefill {isl} + {d} decode", isl, d, isl) for d in (7, 15)]
    return out


def _slices(prefill: int, decode: int, prompt: int):
    from jalapeno.backends.torch.attention import SeqSlice

    slices, nxt = [], 0
    per = -(-(prompt + DECODE_CTX + 1) // BLOCK)
    for _ in range(decode):
        slices.append(SeqSlice(prompt + DECODE_CTX, 1, list(range(nxt, nxt + per))))
        nxt += per
    if prefill:
        pb = -(-prefill // BLOCK)
        slices.append(SeqSlice(0, prefill, list(range(nxt, nxt + pb))))
    return slices


def _time(fn, reps: int) -> tuple[float, float]:
    """Best wall and best CPU (process) seconds of ``fn`` over ``reps`` runs after one warm-up."""
    fn()
    wall = cpu = float("inf")
    for _ in range(reps):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
    return wall, cpu


def main() -> None:
    import torch

    from jalapeno.backends.torch.runner import ModelRunner
    from jalapeno.hardware import probe as pr
    from jalapeno.models.hf_config import arch_from_config
    from jalapeno.perf import StepShape
    from jalapeno.sim import cost_model_for

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default=None, help="substring: time only the shapes whose label contains it")
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--no-price", action="store_true", help="time only (no probed local chip needed)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    config = pr.llama_config(args.layers, HIDDEN, INTER, args.vocab)
    loaded = pr.random_llama(args.layers, HIDDEN, INTER, args.vocab, "cpu")
    todo = [s for s in shapes() if not args.only or args.only in s[0]]
    blocks = max(d * -(-(p + DECODE_CTX + 1) // BLOCK) + -(-f // BLOCK) for _, f, d, p in todo)
    runner = ModelRunner(loaded.model, blocks, BLOCK, "cpu", torch.float32)
    line = pr.apply_measured_choices(_PolicyTarget(runner), torch.device("cpu"))
    cm = None if args.no_price else cost_model_for(arch_from_config(config, "mixed-step"), "local",
                                                   precision="fp32", kv="fp32")
    load0 = os.getloadavg()[0]
    print(f"{line}\nload average {load0:.1f} ({os.cpu_count()} cpus)")
    print("| step | tokens | wall ms | cpu ms | priced ms | wall / priced |")
    print("|---|---:|---:|---:|---:|---:|")
    rows = []
    for label, f, d, p in todo:
        sl = _slices(f, d, p)
        ids = [1] * sum(s.num_tokens for s in sl)
        logits = [sum(s.num_tokens for s in sl[: i + 1]) - 1 for i in range(len(sl))]
        wall, cpu = _time(lambda: runner.forward(sl, ids, logits), args.reps)
        shape = StepShape.from_lists(prefill=[(f, 0)] if f else [], decode_ctx=[p + DECODE_CTX + 1] * d)
        priced = cm.step(shape).time_s if cm else float("nan")
        rows.append(dict(step=label, prefill=f, decode=d, decode_ctx=p + DECODE_CTX + 1, wall_s=wall, cpu_s=cpu,
                         **({} if cm is None else {"priced_s": priced})))
        print(f"| {label} | {len(ids)} | {wall * 1e3:.1f} | {cpu * 1e3:.1f} | {priced * 1e3:.1f} | "
              f"{wall / priced:.2f} |", flush=True)
    finish(args.out, "mixed_step.py", load0, policy=line, model_config=config, rows=rows)


class _PolicyTarget:
    def __init__(self, runner) -> None:
        self.runner = runner

    def set_decode_policy(self, policy) -> None:
        self.runner.policy = policy


if __name__ == "__main__":
    main()
