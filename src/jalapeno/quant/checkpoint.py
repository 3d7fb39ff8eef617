"""Checkpoint-level helpers: write tiny quantized checkpoints, and load quantized ones into a model.

Tensor names follow the published checkpoints:

* DeepSeek-V3/R1 FP8: every quantized linear ``X.weight`` is E4M3 and has a sibling ``X.weight_scale_inv``
  (fp32, one per 128x128 block); embeddings, norms, the router (``mlp.gate.weight``) and ``lm_head`` stay float.
* GPT-OSS MXFP4: experts' ``X.gate_up_proj_blocks [E, 2I, H/32, 16]`` + ``X.gate_up_proj_scales [E, 2I, H/32]``
  and ``X.down_proj_blocks [E, H, I/32, 16]`` + ``X.down_proj_scales``; transformers' float model holds the
  transposes ``gate_up_proj [E, H, 2I]`` / ``down_proj [E, I, H]`` (``x @ W`` layout).

A loader keeps weights quantized with :func:`swap_in_fp8_linears` (before ``load_state_dict``); a loader that
cannot run quantized layers yet can call :func:`dequantize_checkpoint` (what transformers does with
``dequantize=True``), which upcasts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import nn

from jalapeno.quant.fp8 import DEFAULT_BLOCK, dequantize_fp8_block, quantize_fp8_block
from jalapeno.quant.modules import Fp8BlockLinear
from jalapeno.quant.mxfp4 import MX_BLOCK, dequantize_mxfp4, quantize_mxfp4

#: linear weights DeepSeek-V3 ships in FP8 (attention and MLP/expert projections)
DEEPSEEK_FP8_WEIGHTS = re.compile(
    r"\.(q_proj|q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$"
)
_GPT_OSS_EXPERTS = re.compile(r"\.experts\.(gate_up_proj|down_proj)$")


def fp8_checkpoint(
    state: Mapping[str, torch.Tensor],
    pattern: re.Pattern[str] = DEEPSEEK_FP8_WEIGHTS,
    block: tuple[int, int] = DEFAULT_BLOCK,
) -> dict[str, torch.Tensor]:
    """A float state dict -> DeepSeek-style FP8 checkpoint (matching ``*.weight`` -> E4M3 + ``weight_scale_inv``)."""
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if pattern.search(name) and t.ndim == 2 and t.is_floating_point():
            q, s = quantize_fp8_block(t, block)
            out[name] = q
            out[name.removesuffix("weight") + "weight_scale_inv"] = s
        else:
            out[name] = t
    return out


def gpt_oss_mxfp4_checkpoint(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' float GPT-OSS state dict -> the MXFP4 checkpoint layout (experts only, as published)."""
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if _GPT_OSS_EXPERTS.search(name) and t.ndim == 3:
            packed, scales = quantize_mxfp4(t.transpose(1, 2))  # [E, K, N] -> linear layout [E, N, K]
            e, n, k2 = packed.shape
            out[name + "_blocks"] = packed.reshape(e, n, k2 * 2 // MX_BLOCK, MX_BLOCK // 2)
            out[name + "_scales"] = scales
        else:
            out[name] = t
    return out


def dequantize_checkpoint(
    tensors: Mapping[str, torch.Tensor],
    dtype: torch.dtype = torch.float32,
    block: tuple[int, int] = DEFAULT_BLOCK,
) -> dict[str, torch.Tensor]:
    """Decode FP8 (``weight_scale_inv``) and GPT-OSS MXFP4 (``*_blocks``/``*_scales``) tensors to float names."""
    out: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if name.endswith("weight_scale_inv") or (name.endswith("_scales") and name[:-7] + "_blocks" in tensors):
            continue
        if name.endswith(".weight") and name + "_scale_inv" in tensors:
            out[name] = dequantize_fp8_block(t, tensors[name + "_scale_inv"], block, dtype)
        elif name.endswith("_blocks") and name[:-7] + "_scales" in tensors:
            w = dequantize_mxfp4(t, tensors[name[:-7] + "_scales"], dtype)  # [E, N, K]
            out[name[:-7]] = w.transpose(1, 2).contiguous() if w.ndim == 3 else w
        else:
            out[name] = t
    return out


def swap_in_fp8_linears(
    model: nn.Module, tensors: Mapping[str, torch.Tensor], block: tuple[int, int] = DEFAULT_BLOCK
) -> list[str]:
    """Replace each ``nn.Linear`` whose checkpoint has ``<name>.weight_scale_inv`` with an empty
    :class:`Fp8BlockLinear` (same device as the old layer, meta included), ready for ``load_state_dict``.

    Returns the qualified names swapped. The caller must not cast the E4M3 ``weight`` / fp32 scale tensors to
    the model dtype when loading them.
    """
    swapped: list[str] = []
    for name, mod in list(model.named_modules()):
        if isinstance(mod, nn.Linear) and f"{name}.weight_scale_inv" in tensors:
            with torch.device(mod.weight.device):
                new = Fp8BlockLinear(mod.in_features, mod.out_features, bias=mod.bias is not None, block=block)
            model.set_submodule(name, new)
            swapped.append(name)
    return swapped
