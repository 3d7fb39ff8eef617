"""Triton paged-attention decode kernel (one query token per sequence), used by the torch backend on CUDA.

One program per (sequence, query head): it walks the sequence's block table, loads ``BLOCK_SIZE`` keys at a
time from the paged cache ``[num_blocks, block_size, kv_heads, head_dim]`` and keeps an online softmax
(running max ``m``, denominator ``l``, weighted sum ``acc``) in float32. Supports GQA (query head ``h`` reads
KV head ``h // group``), a sliding window (only blocks that can hold visible keys are visited), per-head
attention sinks (an extra logit in the denominator, GPT-OSS) and a V head size different from K's (MLA's latent
cache, where V is a strided view of the first ``kv_lora_rank`` dims of the same tensor).

CI has no GPU: ``tests/torch/test_triton_kernel.py`` runs this kernel under ``TRITON_INTERPRET=1`` on CPU
tensors against the PyTorch reference path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _paged_decode_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, tables_ptr, ctx_ptr, sinks_ptr,
    scale, window,
    s_qb, s_qh,
    s_kn, s_kt, s_kh,
    s_vn, s_vt, s_vh,
    s_ob, s_oh,
    s_tb,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, V_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_SIZE: tl.constexpr, HAS_SINKS: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // GROUP
    ctx = tl.load(ctx_ptr + b).to(tl.int32)  # int64 on the host; int32 keeps `first` one type in both branches
    q_pos = ctx - 1
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    offs_t = tl.arange(0, BLOCK_SIZE)
    q = tl.load(q_ptr + b * s_qb + h * s_qh + offs_d, mask=offs_d < HEAD_DIM, other=0.0).to(tl.float32)

    m = tl.full((), -1.0e30, tl.float32)
    l = tl.zeros((), tl.float32)
    acc = tl.zeros((BLOCK_DV,), tl.float32)
    first = 0
    if window > 0:
        first = tl.maximum(q_pos - window + 1, 0) // BLOCK_SIZE
    n_blocks = (ctx + BLOCK_SIZE - 1) // BLOCK_SIZE
    for blk in range(first, n_blocks):
        block_id = tl.load(tables_ptr + b * s_tb + blk).to(tl.int64)
        pos = blk * BLOCK_SIZE + offs_t
        visible = pos < ctx
        if window > 0:
            visible = visible & (q_pos - pos < window)
        k = tl.load(
            k_ptr + block_id * s_kn + offs_t[:, None] * s_kt + kvh * s_kh + offs_d[None, :],
            mask=visible[:, None] & (offs_d[None, :] < HEAD_DIM),
            other=0.0,
        ).to(tl.float32)
        logits = tl.sum(k * q[None, :], axis=1) * scale
        logits = tl.where(visible, logits, float("-inf"))
        m_new = tl.maximum(m, tl.max(logits, axis=0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(logits - m_new)
        v = tl.load(
            v_ptr + block_id * s_vn + offs_t[:, None] * s_vt + kvh * s_vh + offs_dv[None, :],
            mask=visible[:, None] & (offs_dv[None, :] < V_DIM),
            other=0.0,
        ).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l = l * alpha + tl.sum(p, axis=0)
        m = m_new
    if HAS_SINKS:
        sink = tl.load(sinks_ptr + h).to(tl.float32)
        m_fin = tl.maximum(m, sink)
        alpha = tl.exp(m - m_fin)
        acc = acc * alpha
        l = l * alpha + tl.exp(sink - m_fin)
    out = acc / l
    tl.store(out_ptr + b * s_ob + h * s_oh + offs_dv, out.to(out_ptr.dtype.element_ty), mask=offs_dv < V_DIM)


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decode attention: ``q [B, H, D]`` (one token per sequence, the newest, at position ctx-1) over the
    paged cache; ``block_tables [B, max_blocks]`` int32, ``context_lens [B]``. Returns ``[B, H, Dv]``."""
    b, h, d = q.shape
    _, block_size, kvh, _ = k_cache.shape
    dv = v_cache.shape[-1]
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError("paged_decode needs unit stride in the head dimension")
    if block_size & (block_size - 1):
        raise ValueError(f"paged_decode needs a power-of-two block size (got {block_size})")
    out = torch.empty((b, h, dv), dtype=q.dtype, device=q.device)
    sinks_arg = sinks if sinks is not None else q  # any pointer; unused when HAS_SINKS is False
    _paged_decode_kernel[(b, h)](
        q, k_cache, v_cache, out, block_tables, context_lens, sinks_arg,
        float(scale), int(window or 0),
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        out.stride(0), out.stride(1),
        block_tables.stride(0),
        GROUP=h // kvh, HEAD_DIM=d, V_DIM=dv,
        BLOCK_D=triton.next_power_of_2(d), BLOCK_DV=triton.next_power_of_2(dv),
        BLOCK_SIZE=block_size, HAS_SINKS=sinks is not None,
    )
    return out
