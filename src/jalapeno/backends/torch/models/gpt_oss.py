"""GPT-OSS: alternating sliding-window / full attention with learned sinks, and a biased MoE.

Matches ``transformers.models.gpt_oss``:
* attention: q/k/v/o all carry biases; each head has a learned *sink* logit that joins the softmax denominator
  (and is then dropped); layers alternate ``sliding_attention`` (window ``sliding_window``) and full attention;
  YaRN RoPE in rotate-half layout.
* MoE: router ``linear(x) + bias`` -> top-k logits -> softmax over those k. Experts are stored fused:
  ``gate_up_proj [E, H, 2I]`` (gate = even columns, up = odd columns, ``x @ W`` layout) with biases, and the
  clamped SwiGLU ``(clamp(up, -L, L) + 1) * g * sigmoid(alpha * g)``, ``g = clamp(gate, max=L)``.
"""

from __future__ import annotations

import torch
from torch import nn

from jalapeno.backends.torch.config import ModelConfig
from jalapeno.backends.torch.models.common import CausalLM, DecoderLayer
from jalapeno.backends.torch.models.llama import Attention


class Router(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(cfg.num_experts, cfg.hidden_size))
        self.bias = nn.Parameter(torch.zeros(cfg.num_experts))
        self.top_k = cfg.num_experts_per_tok

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = nn.functional.linear(x, self.weight, self.bias)
        top, idx = torch.topk(logits, self.top_k, dim=-1)
        return torch.softmax(top, dim=-1), idx


class Experts(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        e, h, i = cfg.num_experts, cfg.hidden_size, cfg.intermediate_size
        self.gate_up_proj = nn.Parameter(torch.zeros(e, h, 2 * i))
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(e, 2 * i))
        self.down_proj = nn.Parameter(torch.zeros(e, i, h))
        self.down_proj_bias = nn.Parameter(torch.zeros(e, h))
        self.alpha, self.limit = cfg.swiglu_alpha, cfg.swiglu_limit

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        gu = x @ self.gate_up_proj[e] + self.gate_up_proj_bias[e]
        gate = gu[..., ::2].clamp(max=self.limit)
        up = gu[..., 1::2].clamp(min=-self.limit, max=self.limit)
        return ((up + 1) * gate * torch.sigmoid(gate * self.alpha)) @ self.down_proj[e] + self.down_proj_bias[e]

    def forward(self, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for e in torch.unique(idx).tolist():
            tok, slot = torch.nonzero(idx == e, as_tuple=True)
            out.index_add_(0, tok, self.expert(e, x[tok]) * w[tok, slot, None].to(x.dtype))
        return out


class MoE(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.router = Router(cfg)
        self.experts = Experts(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, idx = self.router(x)
        return self.experts(x, idx, w)


def build(cfg: ModelConfig) -> CausalLM:
    layers = [
        DecoderLayer(cfg, Attention(cfg, i, o_bias=cfg.attention_bias, sinks=True), MoE(cfg))
        for i in range(cfg.num_hidden_layers)
    ]
    return CausalLM(cfg, layers, rope_dim=cfg.head_dim)
