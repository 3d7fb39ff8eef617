"""Mixtral and Qwen3-MoE: Llama/Qwen3 attention with a softmax top-k routed mixture of SwiGLU experts.

Routing (HF ``MixtralTopKRouter`` / ``Qwen3MoeTopKRouter``): ``softmax(router_logits)`` in float32, keep the
top-k probabilities, renormalise them to sum to 1 (always for Mixtral; when ``norm_topk_prob`` for Qwen3-MoE).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from jalapeno.backends.torch.models.layers import CausalLM, DecoderLayer, GatedMLP
from jalapeno.backends.torch.models.llama import Attention
from jalapeno.models.arch import ModelArch


def dispatch_experts(x: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor, experts: nn.ModuleList) -> torch.Tensor:
    """``sum_k weights[t, k] * experts[idx[t, k]](x[t])`` for tokens ``x [T, H]``, ``idx/weights [T, k]``."""
    out = torch.zeros_like(x)
    for e in torch.unique(idx).tolist():
        tok, slot = torch.nonzero(idx == e, as_tuple=True)
        y = experts[e](x[tok]) * weights[tok, slot, None].to(x.dtype)
        out.index_add_(0, tok, y)
    return out


class MixtralExpert(nn.Module):
    """Mixtral names its expert projections w1 (gate), w3 (up), w2 (down)."""

    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(hidden, inter, bias=False)
        self.w2 = nn.Linear(inter, hidden, bias=False)
        self.w3 = nn.Linear(hidden, inter, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SoftmaxTopKMoE(nn.Module):
    def __init__(self, cfg: ModelArch, experts: list[nn.Module], renormalize: bool) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = nn.ModuleList(experts)
        self.top_k = cfg.experts_per_token
        self.renormalize = renormalize

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(self.gate(x).float(), dim=-1)
        w, idx = torch.topk(probs, self.top_k, dim=-1)
        if self.renormalize:
            w = w / w.sum(dim=-1, keepdim=True)
        return dispatch_experts(x, idx, w, self.experts)


def build(cfg: ModelArch) -> CausalLM:
    layers = []
    for i in range(cfg.num_layers):
        if cfg.family == "mixtral":
            experts = [MixtralExpert(cfg.hidden_size, cfg.intermediate_size) for _ in range(cfg.num_experts)]
            layers.append(DecoderLayer(cfg, Attention(cfg, i), SoftmaxTopKMoE(cfg, experts, True), "block_sparse_moe"))
            continue
        if cfg.is_moe_layer(i):  # Qwen3-MoE: mlp_only_layers and decoder_sparse_step
            experts = [GatedMLP(cfg.hidden_size, cfg.moe_intermediate_size) for _ in range(cfg.num_experts)]
            mlp: nn.Module = SoftmaxTopKMoE(cfg, experts, cfg.norm_topk_prob)
        else:
            mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size)
        layers.append(DecoderLayer(cfg, Attention(cfg, i), mlp))
    return CausalLM(cfg, layers, rope_dim=cfg.head_dim)
