"""Float linear layers on CPU: the weight layout, and the matmul that streams it fastest for the batch size.

Decode multiplies a few token rows by every weight matrix once per step, so on CPU its speed is the rate at
which the weights stream from memory. On the AVX2 machines we measured (docs/performance.md, "Engine on CPU")
``F.linear(x, W)`` with the usual ``[out, in]`` row-major weight reaches ~13 GB/s at one row (MKL's GEMV),
while ``x @ Wt`` with the same matrix stored *input-major* (``Wt = W.t().contiguous()``, ``[in, out]``)
reaches ~24-27 GB/s for tall matrices (``out > in``: q/k/v, gate/up, the LM head): each input element scales
one contiguous row of ``Wt`` into the output. Wide matrices (``down_proj``) stream faster row-major. For a few
rows (batched decode) on two threads oneDNN's matmul beats MKL's ``sgemm`` (most on row-major weights: it re-packs an
input-major one on each call); prefill-sized GEMMs on row-major weights run oneDNN too (10-20 % faster than MKL at 96-2048 rows on two threads).

No single layout wins both regimes (docs/performance.md): input-major tall matrices make one-sequence decode
~25% faster, but cost batched decode ~25% (oneDNN re-packs them, MKL's small-M ``sgemm`` is slow with two
threads). So the layout is a load-time choice, :data:`WEIGHT_LAYOUTS`:

* ``"batched"`` (default): row-major weights, as loaded; oneDNN for 2-64 rows.
* ``"single"``: (for models the fused CPU decode kernel does not cover; it reads row-major weights, see
  :mod:`jalapeno.backends.torch.fused_decode`) the tall float ``nn.Linear`` weights are stored input-major **in place of** the row-major copy
  (no memory is duplicated): ``module.weight`` stays a ``[out, in]`` tensor with the Hugging Face name and
  values, only its strides say the storage is transposed (``stride == (1, out)``), so ``state_dict``,
  ``nn.Linear.forward`` and weight readers keep working.

CUDA always keeps the row-major layout (cuBLAS reads both at full speed).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

#: load-time weight layouts (module docstring)
WEIGHT_LAYOUTS = ("batched", "single")
#: oneDNN (mkldnn) is compiled into this torch build
ONEDNN = torch.backends.mkldnn.is_available()
#: rows up to which oneDNN runs on an input-major weight (decode batches): oneDNN re-packs such a weight on
#: every call, which costs more than it gains on prefill-sized GEMMs (row-major weights take oneDNN at any size)
ONEDNN_MAX_ROWS = 64
#: rows up to which ``x @ Wt`` (MKL's M=1..few GEMM on an input-major weight) beats oneDNN (measured, fp32)
GEMV_MAX_ROWS = 1
#: one-row GEMVs on input-major weights at least this wide are split column-wise over two threads (MKL runs a
#: one-row GEMM on one thread: one core's bandwidth). Smaller ones stay whole: the hand-off costs more.
SPLIT_MIN_OUT = 2048
#: intra-op threads a one-row GEMV may use while the rest of a one-token step runs on one (set by the runner)
_gemv_threads: ContextVar[int] = ContextVar("gemv_threads", default=1)


@contextmanager
def gemv_threads(n: int) -> Iterator[None]:
    """Let one-row GEMVs in this block use ``n`` threads (see :data:`SPLIT_MIN_OUT`)."""
    token = _gemv_threads.set(n)
    try:
        yield
    finally:
        _gemv_threads.reset(token)


def gemv_thread_count() -> int:
    """Threads a one-row GEMV may use in the current context (:func:`gemv_threads`)."""
    return _gemv_threads.get()


def _split_gemv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x [1, in] @ w.T`` for an input-major ``w [out, in]`` (even ``out``) on two threads: ``torch.bmm`` over a
    strided ``[2, in, out/2]`` view of the same buffer (two column halves, no copy), one half per thread."""
    wt = w.t()  # [in, out], contiguous
    n_in, n_out = wt.shape
    half = n_out // 2
    halves = wt.as_strided((2, n_in, half), (half, n_out, 1))
    old = torch.get_num_threads()
    if old < 2:
        torch.set_num_threads(2)
    try:
        out = torch.bmm(x.reshape(1, 1, n_in).expand(2, 1, n_in), halves)
    finally:
        if old < 2:
            torch.set_num_threads(old)
    return out.transpose(0, 1).reshape(*x.shape[:-1], n_out)


def input_major(w: torch.Tensor) -> torch.Tensor:
    """``w [out, in]`` with the same values, backed by an ``[in, out]`` contiguous buffer."""
    return w.detach().t().contiguous().t()


def is_input_major(w: torch.Tensor) -> bool:
    """True when a 2-D ``[out, in]`` weight is stored as a contiguous ``[in, out]`` buffer."""
    return w.dim() == 2 and w.stride(0) == 1 and w.stride(1) == w.shape[0]


def wants_input_major(w: torch.Tensor) -> bool:
    """Whether :func:`linear` runs faster with ``w [out, in]`` input-major: float32 CPU weights taller than
    wide (q/k/v, gate/up, the LM head). Wide ones (``out < in``, e.g. ``down_proj``) stream faster row-major,
    as one dot product of length ``in`` per output (18 vs 15 GB/s for SmolLM2's ``[576, 1536]``); square ones
    stream alike either way at one row, and row-major is faster for oneDNN's batched GEMM, so they stay."""
    return w.device.type == "cpu" and w.dtype == torch.float32 and w.dim() == 2 and w.shape[0] > w.shape[1]


def relayout(module: nn.Module, to_input_major: bool) -> None:
    """Re-store a plain ``nn.Linear``'s weight input-major (where :func:`wants_input_major`) or row-major."""
    if type(module) is not nn.Linear:
        return
    w = module.weight
    if to_input_major and wants_input_major(w) and not is_input_major(w):
        module.weight = nn.Parameter(input_major(w), requires_grad=False)
    elif not to_input_major and not w.is_contiguous():
        module.weight = nn.Parameter(w.detach().contiguous(), requires_grad=False)


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ w.T + b`` for ``x [..., in]`` and ``w [out, in]`` in any layout, picking the fastest kernel.

    Input-major CPU weights: one row runs ``x @ Wt`` (MKL streams the rows of ``Wt``). Several rows on more
    than one thread run oneDNN's matmul (MKL's multi-threaded ``sgemm`` is the slower one there, most at small
    M; on one thread MKL is as fast): any number of rows on a row-major weight, up to :data:`ONEDNN_MAX_ROWS`
    on an input-major one. Anything else (CUDA, bf16, one thread, ...) is ``F.linear``. All paths agree to float32
    rounding (tests/torch/test_linear.py).
    """
    if x.is_cuda or x.dtype != torch.float32 or w.dtype != torch.float32:
        return F.linear(x, w, b)
    rows = x.numel() // x.shape[-1] if x.numel() else 0
    if rows <= GEMV_MAX_ROWS and w.stride(0) == 1:  # input-major: stride(0) == 1 for [out, in] with out > 1
        if rows == 1 and w.shape[0] >= SPLIT_MIN_OUT and w.shape[0] % 2 == 0 and _gemv_threads.get() > 1:
            out = _split_gemv(x, w)
            return out if b is None else out.add_(b)
        out = torch.matmul(x, w.t())
        return out if b is None else out.add_(b)
    # oneDNN for several rows on 2+ threads: any number of rows on a row-major weight (prefill too: ~10-20 %
    # less time per GEMM than MKL's sgemm at 96-2048 rows, docs/performance.md "Prefill"); up to
    # ONEDNN_MAX_ROWS on an input-major one, which oneDNN re-packs on every call. One row on a row-major weight
    # on 2+ threads (a prefill's LM head; the runner runs one-token steps on one thread) takes oneDNN too: MKL's
    # row-major GEMV runs on one thread, oneDNN splits the outputs over all (docs/performance.md, "Prefill,
    # ninth session").
    row_major = w.is_contiguous()
    use_onednn = rows > GEMV_MAX_ROWS and (rows <= ONEDNN_MAX_ROWS or row_major) or rows == 1 and row_major
    if use_onednn and ONEDNN and x.device.type == "cpu" and torch.get_num_threads() > 1:
        out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, x.shape[-1]), w, b, "none", [], "")
        return out.view(*x.shape[:-1], w.shape[0])
    return F.linear(x, w, b)


def run_linear(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)``, through :func:`linear` when the module is a plain float ``nn.Linear``."""
    if type(module) is nn.Linear:
        return linear(x, module.weight, module.bias)
    return module(x)
