"""Torch modules that keep weights quantized in memory and run the quantized matmuls in ``forward``.

* :class:`Fp8BlockLinear` — drop-in for ``nn.Linear`` holding DeepSeek's checkpoint pair ``weight``
  (float8_e4m3fn ``[N, K]``) + ``weight_scale_inv`` (fp32 per 128x128 block); the state-dict names match
  DeepSeek-V3/R1 checkpoints, so ``load_state_dict`` reads them as stored.
* :class:`Mxfp4Linear` — ``weight_blocks`` (uint8 ``[N, K/2]``) + ``weight_scales`` (E8M0 uint8 ``[N, K/32]``).
* :class:`Mxfp4Experts` — GPT-OSS's stacked expert tensors (``gate_up_proj_blocks`` / ``down_proj_blocks`` and
  their ``*_scales``), one ``[E, N, K/2]`` tensor per projection; :meth:`Mxfp4Experts.linear` runs one expert.
* :func:`quantize_linears` — replace ``nn.Linear`` layers in place (``--quantize fp8|mxfp4`` at load time).
* :func:`quantized_bytes` — bytes the quantized tensors of a module tree actually hold.

Quantized buffers follow device moves (``.to("cuda")``) but never dtype casts: ``model.to(torch.bfloat16)``
leaves codes and scales as stored (no upcast, no precision loss in the fp32 scales).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from jalapeno.errors import ConfigError, UnknownNameError
from jalapeno.quant.fp8 import (
    DEFAULT_BLOCK,
    dequantize_fp8_block,
    fp8_block_matmul,
    fp8_scale_shape,
    quantize_fp8_block,
)
from jalapeno.quant.mxfp4 import MX_BLOCK, as_flat_blocks, dequantize_mxfp4, mxfp4_matmul, quantize_mxfp4


class _HoldsQuantized(nn.Module):
    """Base: names the buffers that hold quantized data and protects them from dtype casts."""

    _quantized_buffers: tuple[str, ...] = ()

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> nn.Module:
        held = {name: self._buffers.pop(name) for name in self._quantized_buffers if name in self._buffers}
        try:
            super()._apply(fn, recurse)
        finally:
            for name, t in held.items():
                if t is None:
                    self._buffers[name] = None
                    continue
                device = fn(t.new_empty(0)).device  # where the move goes, without converting the data
                # meta tensors have no data to move (``to_empty`` materialisation): allocate in the stored dtype
                self._buffers[name] = torch.empty_like(t, device=device) if t.is_meta else t.to(device)
        return self

    def quantized_nbytes(self) -> int:
        """Bytes held by this module's quantized codes and scales."""
        return sum(self._buffers[n].nbytes for n in self._quantized_buffers if self._buffers.get(n) is not None)


def _bias_param(bias: torch.Tensor | None) -> nn.Parameter | None:
    return None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)


class Fp8BlockLinear(_HoldsQuantized):
    """``y = x @ (weight · weight_scale_inv)^T + bias`` with FP8 E4M3 codes and per-block fp32 scales."""

    _quantized_buffers = ("weight", "weight_scale_inv")

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = False,
        block: tuple[int, int] = DEFAULT_BLOCK,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features, self.block = in_features, out_features, tuple(block)
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.float8_e4m3fn, device=device))
        grid = fp8_scale_shape((out_features, in_features), self.block)
        self.register_buffer("weight_scale_inv", torch.ones(grid, dtype=torch.float32, device=device))
        self.bias = nn.Parameter(torch.zeros(out_features, device=device), requires_grad=False) if bias else None

    @classmethod
    def from_checkpoint(
        cls,
        weight: torch.Tensor,
        weight_scale_inv: torch.Tensor,
        bias: torch.Tensor | None = None,
        block: tuple[int, int] = DEFAULT_BLOCK,
    ) -> Fp8BlockLinear:
        """Wrap a stored pair (DeepSeek ``*.weight`` E4M3 + ``*.weight_scale_inv`` fp32) without converting it."""
        if weight.dtype != torch.float8_e4m3fn or weight.ndim != 2:
            raise ConfigError(
                f"Fp8BlockLinear: weight must be 2-D float8_e4m3fn, got {weight.dtype} {tuple(weight.shape)}"
            )
        want = fp8_scale_shape(tuple(weight.shape), block)
        if tuple(weight_scale_inv.shape) != want:
            raise ConfigError(
                f"Fp8BlockLinear: weight_scale_inv {tuple(weight_scale_inv.shape)} does not fit weight "
                f"{tuple(weight.shape)} with block {tuple(block)} (expected {want})"
            )
        mod = cls.__new__(cls)
        _HoldsQuantized.__init__(mod)
        mod.out_features, mod.in_features = weight.shape
        mod.block = tuple(block)
        mod.register_buffer("weight", weight.detach())
        mod.register_buffer("weight_scale_inv", weight_scale_inv.detach().to(torch.float32))
        mod.bias = _bias_param(bias)
        return mod

    @classmethod
    def from_float(
        cls, weight: torch.Tensor, bias: torch.Tensor | None = None, block: tuple[int, int] = DEFAULT_BLOCK
    ) -> Fp8BlockLinear:
        """Quantize a float ``[N, K]`` weight (see :func:`jalapeno.quant.quantize_fp8_block`)."""
        q, s = quantize_fp8_block(weight.detach(), block)
        return cls.from_checkpoint(q, s, bias, block)

    @classmethod
    def from_linear(cls, linear: nn.Linear, block: tuple[int, int] = DEFAULT_BLOCK) -> Fp8BlockLinear:
        return cls.from_float(linear.weight, linear.bias, block)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return dequantize_fp8_block(self.weight, self.weight_scale_inv, self.block, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fp8_block_matmul(x, self.weight, self.weight_scale_inv, self.block, bias=self.bias)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[no-untyped-def]
        w = state_dict.get(prefix + "weight")
        if w is not None and w.dtype != torch.float8_e4m3fn:
            raise ConfigError(
                f"{prefix}weight is {w.dtype}, not float8_e4m3fn: load it into nn.Linear and call "
                "quantize_linears(model, 'fp8') to quantize a float checkpoint"
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        bias = self.bias is not None
        return f"in_features={self.in_features}, out_features={self.out_features}, block={self.block}, bias={bias}"


class Mxfp4Linear(_HoldsQuantized):
    """``y = x @ W^T + bias`` with ``W`` in MXFP4 (``weight_blocks`` uint8 [N, K/2], ``weight_scales`` [N, K/32])."""

    _quantized_buffers = ("weight_blocks", "weight_scales")

    def __init__(
        self, in_features: int, out_features: int, bias: bool = False, device: torch.device | str | None = None
    ) -> None:
        super().__init__()
        if in_features % MX_BLOCK:
            raise ConfigError(f"Mxfp4Linear: in_features={in_features} must be a multiple of {MX_BLOCK}")
        self.in_features, self.out_features = in_features, out_features
        blocks = torch.zeros(out_features, in_features // 2, dtype=torch.uint8, device=device)
        self.register_buffer("weight_blocks", blocks)
        self.register_buffer(
            "weight_scales", torch.full((out_features, in_features // MX_BLOCK), 127, dtype=torch.uint8, device=device)
        )
        self.bias = nn.Parameter(torch.zeros(out_features, device=device), requires_grad=False) if bias else None

    @classmethod
    def from_checkpoint(
        cls, blocks: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None
    ) -> Mxfp4Linear:
        """Wrap stored MXFP4 bytes (``[N, K/2]`` or GPT-OSS's ``[N, K/32, 16]``) and E8M0 scales ``[N, K/32]``."""
        flat = as_flat_blocks(blocks, scales, "Mxfp4Linear")
        if flat.ndim != 2:
            raise ConfigError(f"Mxfp4Linear: expected 2-D blocks, got {tuple(blocks.shape)}")
        mod = cls.__new__(cls)
        _HoldsQuantized.__init__(mod)
        mod.out_features, mod.in_features = flat.shape[0], flat.shape[1] * 2
        mod.register_buffer("weight_blocks", flat.detach().contiguous())
        mod.register_buffer("weight_scales", scales.detach().contiguous())
        mod.bias = _bias_param(bias)
        return mod

    @classmethod
    def from_float(cls, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Mxfp4Linear:
        blocks, scales = quantize_mxfp4(weight.detach())
        return cls.from_checkpoint(blocks, scales, bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Mxfp4Linear:
        return cls.from_float(linear.weight, linear.bias)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return dequantize_mxfp4(self.weight_blocks, self.weight_scales, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mxfp4_matmul(x, self.weight_blocks, self.weight_scales, bias=self.bias)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[no-untyped-def]
        key = prefix + "weight_blocks"
        if key in state_dict and state_dict[key].ndim == 3:  # GPT-OSS [N, K/32, 16] -> [N, K/2]
            state_dict[key] = state_dict[key].flatten(-2)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, mxfp4, bias={self.bias is not None}"


class Mxfp4Experts(_HoldsQuantized):
    """Stacked MXFP4 expert weights ``[E, N, K]`` (``nn.Linear`` orientation: N outputs, K inputs per expert).

    GPT-OSS stores ``gate_up_proj_blocks [E, 2I, H/32, 16]`` (N = 2I, K = H) and ``down_proj_blocks
    [E, H, I/32, 16]``; note transformers' *float* GPT-OSS experts are the transpose (``[E, K, N]``).
    """

    _quantized_buffers = ("blocks", "scales")

    def __init__(self, blocks: torch.Tensor, scales: torch.Tensor) -> None:
        super().__init__()
        flat = as_flat_blocks(blocks, scales, "Mxfp4Experts")
        if flat.ndim != 3:
            raise ConfigError(
                f"Mxfp4Experts: expected blocks [E, N, K/2] or [E, N, K/32, 16], got {tuple(blocks.shape)}"
            )
        self.num_experts, self.out_features, self.in_features = flat.shape[0], flat.shape[1], flat.shape[2] * 2
        self.register_buffer("blocks", flat.detach().contiguous())
        self.register_buffer("scales", scales.detach().contiguous())

    @classmethod
    def empty(
        cls, num_experts: int, out_features: int, in_features: int, device: torch.device | str | None = None
    ) -> Mxfp4Experts:
        """Uninitialised experts of the given shape (``device="meta"`` for a model built before loading)."""
        if in_features % MX_BLOCK:
            raise ConfigError(f"Mxfp4Experts: in_features={in_features} must be a multiple of {MX_BLOCK}")
        blocks = torch.empty(num_experts, out_features, in_features // 2, dtype=torch.uint8, device=device)
        scales = torch.empty(num_experts, out_features, in_features // MX_BLOCK, dtype=torch.uint8, device=device)
        return cls(blocks, scales)

    @classmethod
    def from_float(cls, weight: torch.Tensor) -> Mxfp4Experts:
        """Quantize float experts ``[E, N, K]``."""
        if weight.ndim != 3:
            raise ConfigError(f"Mxfp4Experts.from_float: expected [E, N, K], got {tuple(weight.shape)}")
        return cls(*quantize_mxfp4(weight.detach()))

    def linear(self, x: torch.Tensor, expert: int, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x [..., K] @ W_expert^T (+ bias [N])`` -> ``[..., N]`` in x's dtype."""
        if not 0 <= int(expert) < self.num_experts:
            raise ConfigError(f"Mxfp4Experts: expert {expert} out of range [0, {self.num_experts})")
        return mxfp4_matmul(x, self.blocks[expert], self.scales[expert], bias=bias)

    forward = linear

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """All experts as ``[E, N, K]`` in ``dtype``."""
        return dequantize_mxfp4(self.blocks, self.scales, dtype)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[no-untyped-def]
        key = prefix + "blocks"
        if key in state_dict and state_dict[key].ndim == 4:  # GPT-OSS [E, N, K/32, 16] -> [E, N, K/2]
            state_dict[key] = state_dict[key].flatten(-2)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"num_experts={self.num_experts}, in={self.in_features}, out={self.out_features}, mxfp4"


def mxfp4_experts_from_checkpoint(blocks: torch.Tensor, scales: torch.Tensor) -> Mxfp4Experts:
    """GPT-OSS ``*_proj_blocks`` ``[E, N, K/32, 16]`` + ``*_proj_scales`` ``[E, N, K/32]`` -> :class:`Mxfp4Experts`."""
    return Mxfp4Experts(blocks, scales)


@dataclass(frozen=True)
class QuantizeResult:
    """What :func:`quantize_linears` did: qualified names replaced, and layers kept in float with the reason."""

    replaced: tuple[str, ...]
    kept: tuple[tuple[str, str], ...]


QUANTIZE_FORMATS = ("fp8", "mxfp4")


def quantize_linears(
    module: nn.Module,
    fmt: str,
    skip: Iterable[str] = ("lm_head", "gate", "router"),
    block: tuple[int, int] = DEFAULT_BLOCK,
) -> QuantizeResult:
    """Replace every ``nn.Linear`` under ``module`` with :class:`Fp8BlockLinear` / :class:`Mxfp4Linear` in place.

    ``skip``: glob patterns matched against each layer's qualified name and its last component. The default
    keeps ``lm_head`` (as DeepSeek and GPT-OSS ship it; this also keeps tied embeddings tied) and MoE routers
    (``gate``/``router``; ``gate_proj`` is quantized) in float.
    MXFP4 needs ``in_features % 32 == 0``; other layers stay float and are listed in ``kept``.
    """
    if fmt not in QUANTIZE_FORMATS:
        raise UnknownNameError(f"unknown quantization format {fmt!r}; choose one of: {', '.join(QUANTIZE_FORMATS)}")
    patterns = tuple(skip)
    replaced: list[str] = []
    kept: list[tuple[str, str]] = []
    targets = [(name, m) for name, m in module.named_modules() if isinstance(m, nn.Linear) and name]
    for name, linear in targets:
        last = name.rsplit(".", 1)[-1]
        if any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(last, p) for p in patterns):
            kept.append((name, "skipped by pattern"))
            continue
        if fmt == "mxfp4" and linear.in_features % MX_BLOCK:
            kept.append((name, f"in_features={linear.in_features} is not a multiple of {MX_BLOCK}"))
            continue
        new: nn.Module = Fp8BlockLinear.from_linear(linear, block) if fmt == "fp8" else Mxfp4Linear.from_linear(linear)
        module.set_submodule(name, new)
        replaced.append(name)
    return QuantizeResult(tuple(replaced), tuple(kept))


def linear_weight(module: nn.Module, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The ``[N, K]`` float weight of an ``nn.Linear`` or a quantized linear (decoded), for code that reads the
    matrix itself (e.g. MLA's absorbed ``kv_b_proj``). ``dtype`` defaults to the layer's float dtype (fp32 for
    quantized layers)."""
    if isinstance(module, (Fp8BlockLinear, Mxfp4Linear)):
        return module.dequantize(dtype or torch.float32)
    weight = module.weight
    return weight if dtype is None else weight.to(dtype)


def quantized_bytes(module: nn.Module) -> int:
    """Bytes held by quantized codes + scales in ``module``'s tree (float params and biases not counted)."""
    return sum(m.quantized_nbytes() for m in module.modules() if isinstance(m, _HoldsQuantized))
