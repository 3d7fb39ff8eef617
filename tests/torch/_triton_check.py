"""Run by test_triton_kernel.py in a fresh interpreter with TRITON_INTERPRET=1 (set before triton is imported).

Compares the Triton paged decode kernel with the PyTorch reference path on tiny random shapes; prints one
line per case and exits non-zero on a mismatch."""

from __future__ import annotations

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402

from jalapeno.backends.torch.attention import SeqSlice, StepMetadata, paged_attention_ref  # noqa: E402
from jalapeno.kernels.paged_attention import paged_decode  # noqa: E402


def case(name, h, kvh, d, dv, ctx_lens, block_size=4, window=None, sinks=False, mla=False):
    g = torch.Generator().manual_seed(hash(name) % 2**31)
    num_blocks = 32
    if mla:
        latent = torch.randn(num_blocks, block_size, 1, d, generator=g)
        k_cache, v_cache = latent, latent[..., :dv]
    else:
        k_cache = torch.randn(num_blocks, block_size, kvh, d, generator=g)
        v_cache = torch.randn(num_blocks, block_size, kvh, dv, generator=g)
    perm = torch.randperm(num_blocks, generator=g).tolist()
    slices = []
    for n in ctx_lens:
        nb = -(-n // block_size)
        table, perm = perm[:nb], perm[nb:]
        slices.append(SeqSlice(n - 1, 1, table))
    meta = StepMetadata.build(slices, block_size, torch.device("cpu"))
    q = torch.randn(len(ctx_lens), h, d, generator=g)
    s = torch.randn(h, generator=g) if sinks else None
    ref = paged_attention_ref(q, k_cache, v_cache, meta, 0.3, window, s)
    got = paged_decode(q, k_cache, v_cache, meta.block_tables, meta.context_lens, 0.3, window, s)
    err = (got - ref).abs().max().item()
    print(f"{name}: max abs err {err:.2e}")
    return err < 1e-4


ok = all(
    [
        case("mha", 2, 2, 8, 8, [5]),
        case("gqa-batch", 4, 2, 8, 8, [1, 7, 13, 4]),
        case("odd-dims", 2, 1, 12, 6, [9, 3]),
        case("window-sinks", 4, 2, 8, 8, [3, 14, 11], window=5, sinks=True),
        case("mla-latent", 4, 1, 24, 16, [6, 10], mla=True),
    ]
)
sys.exit(0 if ok else 1)
