"""GPT-OSS: alternating sliding-window / full attention with learned sinks, and a biased MoE.

Matches ``transformers.models.gpt_oss``:
* attention: q/k/v/o all carry biases; each head has a learned *sink* logit that joins the softmax denominator
  (and is then dropped); layers alternate ``sliding_attention`` (window ``sliding_window``) and full attention;
  YaRN RoPE in rotate-half layout.
* MoE: router ``linear(x) + bias`` -> top-k logits -> softmax over those k. Experts are stored fused:
  ``gate_up_proj [E, H, 2I]`` (gate = even columns, up = odd columns, ``x @ W`` layout) with biases, and the
  clamped SwiGLU ``(clamp(up, -L, L) + 1) * g * sigmoid(alpha * g)``, ``g = clamp(gate, max=L)``.
* MXFP4 checkpoints (as published): the loader swaps in :class:`Mxfp4GptOssExperts`, which keeps the experts'
  ``*_blocks``/``*_scales`` as stored and multiplies with them directly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import nn

from jalapeno.backends.torch.models.layers import CausalLM, DecoderLayer
from jalapeno.backends.torch.models.llama import Attention
from jalapeno.models.arch import ModelArch
from jalapeno.quant.modules import Mxfp4Experts


#: the clamped SwiGLU's sigmoid slope: a constant in transformers' GptOssExperts, not a config field
SWIGLU_ALPHA = 1.702


class Router(nn.Module):
    def __init__(self, cfg: ModelArch) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(cfg.num_experts, cfg.hidden_size))
        self.bias = nn.Parameter(torch.zeros(cfg.num_experts))
        self.top_k = cfg.experts_per_token

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = nn.functional.linear(x, self.weight, self.bias)
        top, idx = torch.topk(logits, self.top_k, dim=-1)
        return torch.softmax(top, dim=-1), idx


class _RoutedExperts(nn.Module):
    """Routing loop shared by the float and MXFP4 experts; subclasses define ``expert(e, x)``."""

    alpha: float
    limit: float

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _swiglu(self, gu: torch.Tensor) -> torch.Tensor:
        gate = gu[..., ::2].clamp(max=self.limit)
        up = gu[..., 1::2].clamp(min=-self.limit, max=self.limit)
        return (up + 1) * gate * torch.sigmoid(gate * self.alpha)

    def forward(self, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for e in torch.unique(idx).tolist():
            tok, slot = torch.nonzero(idx == e, as_tuple=True)
            out.index_add_(0, tok, self.expert(e, x[tok]) * w[tok, slot, None].to(x.dtype))
        return out


class Experts(_RoutedExperts):
    """Float experts in transformers' layout: ``gate_up_proj [E, H, 2I]``, ``down_proj [E, I, H]`` (``x @ W``)."""

    def __init__(self, cfg: ModelArch) -> None:
        super().__init__()
        e, h, i = cfg.num_experts, cfg.hidden_size, cfg.intermediate_size
        self.gate_up_proj = nn.Parameter(torch.zeros(e, h, 2 * i))
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(e, 2 * i))
        self.down_proj = nn.Parameter(torch.zeros(e, i, h))
        self.down_proj_bias = nn.Parameter(torch.zeros(e, h))
        self.alpha = SWIGLU_ALPHA
        self.limit = cfg.swiglu_limit if cfg.swiglu_limit is not None else float("inf")

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        gu = x @ self.gate_up_proj[e] + self.gate_up_proj_bias[e]
        return self._swiglu(gu) @ self.down_proj[e] + self.down_proj_bias[e]


class Mxfp4GptOssExperts(_RoutedExperts):
    """Experts served from the checkpoint's MXFP4 tensors as stored (no upcast at rest).

    ``gate_up_proj`` / ``down_proj`` are :class:`~jalapeno.quant.Mxfp4Experts` in ``nn.Linear`` orientation
    (``[E, 2I, H]`` / ``[E, H, I]``, the checkpoint's ``*_blocks`` + ``*_scales``); the biases stay float. Each
    expert runs ``Mxfp4Experts.linear(x, e, bias)`` (Triton kernel on CUDA, decode-and-matmul elsewhere).
    """

    def __init__(self, gate_up: Mxfp4Experts, down: Mxfp4Experts, alpha: float, limit: float) -> None:
        super().__init__()
        e, two_i, h = gate_up.num_experts, gate_up.out_features, gate_up.in_features
        self.gate_up_proj, self.down_proj = gate_up, down
        device = gate_up.blocks.device
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(e, two_i, device=device), requires_grad=False)
        self.down_proj_bias = nn.Parameter(torch.zeros(e, h, device=device), requires_grad=False)
        self.alpha, self.limit = alpha, limit

    @classmethod
    def like(cls, experts: Experts) -> Mxfp4GptOssExperts:
        """Empty MXFP4 experts with the shapes of float ``experts`` (on its device: meta before loading)."""
        e, h, two_i = experts.gate_up_proj.shape
        device = experts.gate_up_proj.device
        gate_up = Mxfp4Experts.empty(e, two_i, h, device=device)
        down = Mxfp4Experts.empty(e, h, two_i // 2, device=device)
        return cls(gate_up, down, experts.alpha, experts.limit)

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        gu = self.gate_up_proj.linear(x, e, self.gate_up_proj_bias[e])
        return self.down_proj.linear(self._swiglu(gu), e, self.down_proj_bias[e])


_MXFP4_TENSOR = re.compile(r"(\.experts\.(?:gate_up_proj|down_proj))_(blocks|scales)$")


def mxfp4_state_name(name: str) -> str:
    """Checkpoint name -> this model's state-dict name: ``X.experts.gate_up_proj_blocks`` ->
    ``X.experts.gate_up_proj.blocks`` (other names unchanged)."""
    return _MXFP4_TENSOR.sub(r"\1.\2", name)


def swap_in_mxfp4_experts(model: nn.Module, tensors: Mapping[str, torch.Tensor]) -> list[str]:
    """Replace each float :class:`Experts` whose checkpoint holds ``<name>.gate_up_proj_blocks`` with empty
    :class:`Mxfp4GptOssExperts` (same device, meta included), ready for ``load_state_dict`` with names mapped
    by :func:`mxfp4_state_name`. Returns the qualified names swapped."""
    swapped = []
    for name, mod in list(model.named_modules()):
        if isinstance(mod, Experts) and f"{name}.gate_up_proj_blocks" in tensors:
            model.set_submodule(name, Mxfp4GptOssExperts.like(mod))
            swapped.append(name)
    return swapped


class MoE(nn.Module):
    def __init__(self, cfg: ModelArch) -> None:
        super().__init__()
        self.router = Router(cfg)
        self.experts = Experts(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, idx = self.router(x)
        return self.experts(x, idx, w)


def build(cfg: ModelArch) -> CausalLM:
    layers = [
        DecoderLayer(cfg, Attention(cfg, i), MoE(cfg))
        for i in range(cfg.num_layers)
    ]
    return CausalLM(cfg, layers, rope_dim=cfg.head_dim)
