"""Pick the Triton kernel or the PyTorch path for a quantized matmul, and validate activations."""

from __future__ import annotations

import importlib.util
import os
from typing import Literal

import torch

from jalapeno.errors import ConfigError

Backend = Literal["auto", "torch", "triton"]
_BACKENDS = ("auto", "torch", "triton")


def triton_interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1`` set before import)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def use_triton(x: torch.Tensor, backend: str, *, needs_fp8: bool = False) -> bool:
    """Decide the execution path: Triton on CUDA (``auto``), PyTorch elsewhere.

    ``backend="triton"`` forces the kernel: on CPU tensors it needs the Triton interpreter
    (``TRITON_INTERPRET=1``). ``needs_fp8``: the kernel converts E4M3 in registers, which Triton supports on
    compute capability >= 8.9 (Ada, Hopper, Blackwell); older GPUs use the PyTorch path under ``auto``.
    """
    if backend not in _BACKENDS:
        raise ConfigError(f"unknown matmul backend {backend!r}; choose one of {', '.join(_BACKENDS)}")
    if backend == "torch":
        return False
    have_triton = importlib.util.find_spec("triton") is not None
    if backend == "triton":
        if not have_triton:
            raise ConfigError("backend='triton' needs the triton package; install it or use backend='torch'")
        if not x.is_cuda and not triton_interpreting():
            raise ConfigError(
                "backend='triton' on CPU tensors needs TRITON_INTERPRET=1 set before triton is imported; "
                "use backend='torch' (or 'auto') on CPU"
            )
        return True
    if not (x.is_cuda and have_triton):
        return False
    if needs_fp8 and torch.cuda.get_device_capability(x.device) < (8, 9):
        return False
    return True


def check_activations(x: torch.Tensor, k: int, what: str) -> None:
    """Activations must be floating point with ``k`` channels in the last dim."""
    if not x.is_floating_point():
        raise ConfigError(f"{what}: activations must be floating point, got dtype {x.dtype}")
    if x.ndim < 1 or x.shape[-1] != k:
        raise ConfigError(
            f"{what}: activations of shape {tuple(x.shape)} do not match the weight's in_features={k}"
        )
