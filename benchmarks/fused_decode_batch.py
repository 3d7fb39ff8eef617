"""Fused CPU decode kernel vs the PyTorch-ops path by decode batch size (SmolLM2-135M, float32).

    python benchmarks/fused_decode_batch.py [--batches 1,4,8,12,16,24,32,64] [--repeat 2] [--decode-tokens 32]

Same process, same weights (row-major "batched" layout), the two paths alternating (the runner's
``DecodePolicy``: kernel on/off), each measured as in benchmarks/engine_cpu.py: decode = wall(N new tokens) -
wall(1 new token) through the shared Engine. By default the kernel takes batches up to
``fused_decode.MAX_BATCH``; the script sets the policy's crossover past the largest batch so the crossover can
be seen. Prints decode tok/s per batch and path (docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as engine_cpu.py

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from engine_cpu import jalapeno_run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,4,8,12,16,24,32,48,64")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--decode-tokens", type=int, default=32)
    args = ap.parse_args()

    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.backends.torch.runner import PYTORCH_ONLY, DecodePolicy

    backend = TorchBackend(None, kv_cache_gb=1.0)
    g = torch.Generator().manual_seed(0)
    batches = [int(x) for x in args.batches.split(",")]
    uncapped = DecodePolicy(fused_max_batch=max(batches))  # measure past the default crossover
    print(f"load average {os.getloadavg()[0]:.2f}; threads {torch.get_num_threads()}")
    print("| sequences | fused tok/s | PyTorch ops tok/s | ratio |")
    print("|---:|---:|---:|---:|")
    for b in batches:
        prompts = [torch.randint(100, 40000, (16,), generator=g).tolist() for _ in range(b)]
        runs: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.repeat):
            for fused in (True, False):
                backend.set_decode_policy(uncapped if fused else PYTORCH_ONLY)
                jalapeno_run(backend, prompts[:1], 2)
                runs[fused].append(jalapeno_run(backend, prompts, args.decode_tokens)["decode_tok_s"])
        f, t = max(runs[True]), max(runs[False])
        print(f"| {b} | {f:.1f} | {t:.1f} | {f / t:.2f} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
