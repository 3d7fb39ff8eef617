"""Fused passes of the PyTorch path on CPU: residual add + RMSNorm, SiLU·up, RoPE + K/V write, prefill attention.

Between its GEMMs a decoder layer runs ~20 small PyTorch ops (RMSNorm alone is pow, mean, add, rsqrt, mul, mul),
each a separate pass over the step's activations and a separate OpenMP region. vLLM's CPU path compiles these
with Inductor into fused loops; here three C functions (``jalapeno/kernels/cpu_elementwise.c``, built at first use
like the fused decode kernel) do one pass each (docs/performance.md, "Prefill, ninth session"):

* :func:`add_rms_norm`: ``x + d`` and ``RMSNorm(x + d)`` in one pass (``d`` optional);
* :func:`silu_mul`: ``silu(gate) * up`` over the fused gate/up GEMM output;
* :func:`rope_store`: rotate q and k of the fused q/k/v GEMM output in place and write k and v to the cache;
* :func:`causal_attention`: causal flash attention of fresh prompts over their own keys (what SDPA's flash kernel
  did for :func:`~jalapeno.backends.torch.attention.fresh_prefill_attention`, ≈ 45 % less CPU at SmolLM2's
  512-token shape: the query heads of one KV head share each tile; docs/performance.md, "Prefill, tenth session").

Each applies to contiguous float32 CPU tensors when the kernel is available; otherwise (no C compiler, CUDA,
another dtype, a strided view, :func:`elementwise_kernels` ``(False)``) the caller's PyTorch ops run, so the
kernels are an optimisation, never a requirement. Results agree with the PyTorch ops to float32 rounding
(tests/torch/test_elementwise.py).
"""

from __future__ import annotations

import ctypes
import logging
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Iterator

import torch

from jalapeno.kernels.cpu_build import KernelUnavailable, load_kernel

log = logging.getLogger(__name__)

#: whether the fused elementwise kernels may run in the current context (tests switch them off to compare)
_enabled: ContextVar[bool] = ContextVar("elementwise_kernels", default=True)

_P, _I64, _F, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int


@contextmanager
def elementwise_kernels(enabled: bool) -> Iterator[None]:
    """Allow (``True``, the default) or forbid the fused elementwise kernels inside the block."""
    token = _enabled.set(enabled)
    try:
        yield
    finally:
        _enabled.reset(token)


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    """The built kernel library, or None (logged once) when it cannot be built here."""
    try:
        lib, _ = load_kernel("cpu_elementwise")
    except KernelUnavailable as exc:
        log.warning("fused elementwise kernels unavailable, using PyTorch ops: %s", exc)
        return None
    lib.jal_add_rmsnorm.argtypes = [_P, _P, _P, _P, _P, _I64, _I64, _F, _INT]
    lib.jal_silu_mul.argtypes = [_P, _P, _I64, _I64, _INT]
    lib.jal_rope_store.argtypes = [_P, _P, _P, _P, _P, _P, _I64, _I64, _I64, _I64, _INT]
    for fn in (lib.jal_add_rmsnorm, lib.jal_silu_mul, lib.jal_rope_store):
        fn.restype = None
    lib.jal_causal_attention.argtypes = [_P, _P, _P, _P, *[_I64] * 9, _F, _INT, _I64]
    lib.jal_causal_attention.restype = _INT
    return lib


def _rows(*ts: torch.Tensor) -> bool:
    """float32 CPU ``[T, heads, D]`` views whose heads and elements are contiguous inside each row (the q/k/v
    views of the fused GEMM output); the row stride is free."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 and t.dim() == 3 and t.stride(2) == 1
               and t.stride(1) == t.shape[2] and t.stride(0) >= t.shape[1] * t.shape[2] for t in ts)


def _plain(*ts: torch.Tensor) -> bool:
    """Contiguous float32 CPU tensors (what the C functions read)."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in ts)


def _kernel(*ts: torch.Tensor) -> ctypes.CDLL | None:
    """The library when the kernels may run on these tensors here, else None."""
    if not _enabled.get() or not _plain(*ts) or torch.is_grad_enabled() and any(t.requires_grad for t in ts):
        return None
    return _library()


def add_rms_norm(
    x: torch.Tensor, d: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(s, weight * s / sqrt(mean(s^2) + eps))`` with ``s = x + d`` (``s = x`` when ``d`` is None) over the
    last dimension, in one pass into new tensors; None when the kernel does not apply (the caller runs its ops)."""
    n = x.shape[-1]
    parts = (x, weight) if d is None else (x, d, weight)
    if (d is not None and d.shape != x.shape) or weight.shape != (n,) or x.numel() == 0:
        return None
    lib = _kernel(*parts)
    if lib is None:
        return None
    s = x if d is None else torch.empty_like(x)
    h = torch.empty_like(x)
    lib.jal_add_rmsnorm(x.data_ptr(), None if d is None else d.data_ptr(), weight.data_ptr(), s.data_ptr(),
                        h.data_ptr(), x.numel() // n, n, eps, torch.get_num_threads())
    return s, h


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor | None:
    """``silu(gate) * up`` for ``gate_up [..., 2I]`` = ``(gate, up)`` side by side (the fused gate/up GEMM's
    output) -> ``[..., I]``; None when the kernel does not apply."""
    lib = _kernel(gate_up)
    if lib is None or gate_up.shape[-1] % 2 or gate_up.numel() == 0:
        return None
    inter = gate_up.shape[-1] // 2
    out = gate_up.new_empty(*gate_up.shape[:-1], inter)
    lib.jal_silu_mul(gate_up.data_ptr(), out.data_ptr(), gate_up.numel() // (2 * inter), inter,
                     torch.get_num_threads())
    return out


def rope_store(
    qkv: torch.Tensor,
    heads: int,
    kv_heads: int,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
) -> bool:
    """For ``qkv [T, heads + 2 kv_heads, D]`` (q, k, v heads side by side): rotate the q and k heads in place by
    the tables of :func:`~jalapeno.backends.torch.rope.rope_cos_sin` (``[T, 1, D]``, rotate-half pairs) and
    write k and v to flat cache slots ``slots [T]`` of ``k_cache``/``v_cache`` ``[blocks, block_size,
    kv_heads, D]``, in one pass. False (nothing done) when the kernel does not apply: the caller runs
    ``apply_rope`` and ``write_kv``."""
    t, n_heads, d = qkv.shape
    if (
        n_heads != heads + 2 * kv_heads or d % 2 or cos.shape != (t, 1, d) or sin.shape != (t, 1, d)
        or k_cache.shape[-2:] != (kv_heads, d) or v_cache.shape != k_cache.shape
        or slots.shape != (t,) or slots.dtype != torch.int64 or not slots.is_contiguous() or t == 0
    ):
        return False
    lib = _kernel(qkv, cos, sin, k_cache, v_cache)
    if lib is None:
        return False
    lo, hi = torch.aminmax(slots)
    if lo < 0 or hi >= k_cache.numel() // (kv_heads * d):  # what index_copy_ would refuse: never write outside
        return False
    lib.jal_rope_store(qkv.data_ptr(), cos.data_ptr(), sin.data_ptr(), slots.data_ptr(), k_cache.data_ptr(),
                       v_cache.data_ptr(), t, heads, kv_heads, d, torch.get_num_threads())
    return True


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: int, scale: float,
                     prefix: int = 0) -> torch.Tensor | None:
    """Causal attention of ``b`` equal-length prompts fed from position 0 over their own keys, GQA: ``q [T, H,
    D]``, ``k [T, kvh, D]``, ``v [T, kvh, Dv]`` (rows may be strided views of one fused q/k/v output) ->
    ``[T, H, Dv]``, by the C flash-attention kernel (``jal_causal_attention``: the query heads that share a KV head
    stacked into one tile, blocks above the diagonal skipped); None when the kernel does not apply (the caller
    runs SDPA). ``prefix`` > 0: each prompt's ``T / b`` queries are a later chunk after ``prefix`` cached tokens, and
    ``k``/``v`` hold ``b (prefix + T / b)`` rows (each sequence's whole context, the chunk's own keys last): query
    ``i`` sees keys ``0 .. prefix + i``."""
    t, h, d = q.shape
    kvh, dv = k.shape[1], v.shape[-1]
    if (
        t == 0 or b < 1 or t % b or prefix < 0 or kvh == 0 or h % kvh or k.shape != (t + b * prefix, kvh, d)
        or v.shape[:2] != (t + b * prefix, kvh) or not _enabled.get() or not _rows(q, k, v)
        or torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    ):
        return None
    lib = _library()
    if lib is None:
        return None
    out = q.new_empty(t, h, dv)
    rc = lib.jal_causal_attention(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), b, t // b, h, kvh, d,
                                  dv, q.stride(0), k.stride(0), v.stride(0), scale, torch.get_num_threads(), prefix)
    return out if rc == 0 else None
