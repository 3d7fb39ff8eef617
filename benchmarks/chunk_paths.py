"""Offline, one thread, CPU time: which attention path each kind of engine step the closed loop produces takes, and
what it costs beyond the simulator's price (issue 16, eleventh session).

Steps (SmolLM2-135M's layer shape, random float32 weights, ``--layers`` of them, no server), fed through the runner
exactly as the engine feeds them:

* fresh prompts alone (every sequence from position 0, equal lengths): the C flash kernel (``jal_causal_attention``);
* a prompt's later chunk (earlier context of the same prompt in the cache): its context gathered through the block
  table, then the same C kernel with a key offset (``later_chunk_attention``, fourteenth session); until then the
  PyTorch path's masked SDPA (``paged_attention_ref``: an explicit ``[chunk, context]`` mask, the full rectangle, no
  causal skip), which any prompt in a *mixed* step (decode rows beside it) took too: now each group of fresh prompts
  there takes the flash kernel on its own K/V;
* decode steps at batch 1-32 x 513-2049 keys: the fused CPU decode kernel.

Each step is timed on ONE thread (``torch.set_num_threads(1)``; CPU time, which a shared machine's load inflates
far less than wall time), in interleaved rounds (every step once per round, best of the rounds). Printed: CPU ms,
the step's price on ``--hardware`` (two threads), and the ratio; the ratios between steps are what carry over to a
quiet two-thread run, not the levels.

    python benchmarks/chunk_paths.py [--layers 2] [--rounds 3] [--hardware CHIP.yaml] [--out chunk.json]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from _record import finish

#: SmolLM2-135M's layer shape (hidden 576, MLP 1536, 9 query / 3 KV heads of 64); a small vocabulary (the LM head
#: reads one row per sequence, the same in every step kind)
HIDDEN, INTER, VOCAB = 576, 1536, 2048
BLOCK = 16

#: (label, prefill chunks as (tokens, cached prefix), decode contexts incl. the new token)
SHAPES: list[tuple[str, list[tuple[int, int]], list[int]]] = [
    ("fresh 512", [(512, 0)], []),
    ("fresh 2048", [(2048, 0)], []),
    ("fresh 4x512", [(512, 0)] * 4, []),
    ("fresh 512 + 1 decode", [(512, 0)], [513]),
    ("fresh 2048 + 1 decode", [(2048, 0)], [2049]),
    ("fresh 3x512 + 1 decode", [(512, 0)] * 3, [513]),
    ("chunk 512 after 512", [(512, 512)], []),
    ("chunk 512 after 1536", [(512, 1536)], []),
    ("chunk 1024 after 1024", [(1024, 1024)], []),
    ("decode b=1 @513", [], [513]),
    ("decode b=1 @2049", [], [2049]),
    ("decode b=8 @513", [], [513] * 8),
    ("decode b=16 @513", [], [513] * 16),
    ("decode b=16 @2049", [], [2049] * 16),
    ("decode b=32 @513", [], [513] * 32),
    ("decode b=32 @2049", [], [2049] * 32),
]


#: ``--decode-grid``: decode steps only, batch x keys (the kernel's cost per key by batch, and whether it changes
#: when a layer's KV, batch x keys x 1.5 KB, outgrows the last-level cache)
DECODE_GRID = [(f"decode b={b} @{c}", [], [c] * b) for b in (1, 8, 16, 32) for c in (513, 1025, 2049)]


def slices_of(prefill: list[tuple[int, int]], decode: list[int]):
    """The runner's slices for one step: decode rows first (as the scheduler orders them), then the prefill chunks;
    each sequence gets its own blocks."""
    from jalapeno.backends.torch.attention import SeqSlice

    out, nxt = [], 0
    for ctx in decode:
        n = -(-ctx // BLOCK)
        out.append(SeqSlice(ctx - 1, 1, list(range(nxt, nxt + n))))
        nxt += n
    for chunk, prefix in prefill:
        n = -(-(chunk + prefix) // BLOCK)
        out.append(SeqSlice(prefix, chunk, list(range(nxt, nxt + n))))
        nxt += n
    return out, nxt


def attention_path(slices) -> str:
    """The attention path :func:`~jalapeno.backends.torch.attention.paged_attention` takes for these slices on CPU
    (the step's metadata decides it; the fused kernel takes steps of at most its crossover's tokens)."""
    qlens = [s.num_tokens for s in slices]
    if max(qlens) == 1:
        return "fused decode kernel"
    fresh = any(s.start == 0 and s.num_tokens > 1 for s in slices)
    later = any(s.start and s.num_tokens > 1 for s in slices)
    if len(set(qlens)) > 1 or len({s.start for s in slices}) > 1:
        return "grouped: " + " + ".join(x for x, on in (("flash", fresh), ("gather + flash from the prefix", later),
                                                       ("decode rows", 1 in qlens)) if on)
    if fresh:
        return "flash (jal_causal_attention)"
    return "gather + flash from the prefix (jal_causal_attention with a key offset)"


def main() -> None:
    import torch

    from jalapeno.backends.torch.runner import DecodePolicy, ModelRunner
    from jalapeno.hardware import probe as pr
    from jalapeno.hardware.catalog import load_spec_file
    from jalapeno.models.hf_config import arch_from_config
    from jalapeno.perf import StepShape
    from jalapeno.sim import cost_model_for

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--decode-grid", action="store_true", help="time DECODE_GRID instead of SHAPES")
    ap.add_argument("--only", default=None, help="substring: time only the steps whose label contains it")
    ap.add_argument("--hardware", type=Path, default=Path("benchmarks/data/local_probe_quiet_1113.yaml"))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    config = pr.llama_config(args.layers, HIDDEN, INTER, VOCAB)
    loaded = pr.random_llama(args.layers, HIDDEN, INTER, VOCAB, "cpu")
    todo = [s for s in (DECODE_GRID if args.decode_grid else SHAPES) if not args.only or args.only in s[0]]
    blocks = max(slices_of(p, d)[1] for _, p, d in todo)
    runner = ModelRunner(loaded.model, blocks, BLOCK, "cpu", torch.float32,
                         policy=DecodePolicy(fused_max_batch=128, panel_min_rows=8))
    chip = load_spec_file(args.hardware)
    cm = cost_model_for(arch_from_config(config, "chunk-paths"), chip, precision="fp32", kv="fp32")
    steps = []
    for label, prefill, decode in todo:
        sl, _ = slices_of(prefill, decode)
        ids = [1] * sum(s.num_tokens for s in sl)
        logits = [sum(s.num_tokens for s in sl[: i + 1]) - 1 for i in range(len(sl))]
        shape = StepShape.from_lists(prefill=prefill, decode_ctx=decode)
        steps.append((label, sl, ids, logits, shape))
    load0 = os.getloadavg()[0]
    print(f"{args.layers} layers, {args.threads} thread(s), {args.rounds} rounds; load average {load0:.1f} "
          f"({os.cpu_count()} cpus); priced on {args.hardware}", flush=True)
    best = {label: float("inf") for label, *_ in steps}
    for label, sl, ids, logits, _ in steps:  # warm-up
        runner.forward(sl, ids, logits)
    for _ in range(args.rounds):
        for label, sl, ids, logits, _ in steps:
            c0 = time.process_time()
            runner.forward(sl, ids, logits)
            best[label] = min(best[label], time.process_time() - c0)
    print("| step | path | CPU ms (1 thread) | priced ms (2 threads) | CPU / priced |")
    print("|---|---|---:|---:|---:|")
    rows = []
    for label, sl, ids, logits, shape in steps:
        priced = cm.step(shape).time_s
        rows.append(dict(step=label, path=attention_path(sl), cpu_s=best[label], priced_s=priced,
                         prefill=[list(c) for c in next(p for lb, p, _ in todo if lb == label)],
                         decode=next(d for lb, _, d in todo if lb == label)))
        print(f"| {label} | {rows[-1]['path']} | {best[label] * 1e3:.1f} | {priced * 1e3:.1f} | "
              f"{best[label] / priced:.2f} |", flush=True)
    finish(args.out, "chunk_paths.py", load0, layers=args.layers, threads=args.threads, rounds=args.rounds,
           hardware=str(args.hardware), rows=rows)


if __name__ == "__main__":
    main()
