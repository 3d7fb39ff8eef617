"""Llama 3.x / SmolLM2 / Mistral / Qwen2 (q/k/v biases) / Qwen3 (QK-norm): dense GQA decoder.

Matches ``transformers.models.{llama,qwen2,qwen3}``: pre-norm RMSNorm blocks, rotate-half RoPE (llama3 scaling
when configured), SwiGLU MLP. Qwen3 applies an RMSNorm over ``head_dim`` to q and k before RoPE.
"""

from __future__ import annotations

import torch
from torch import nn

from jalapeno.backends.torch.attention import StepMetadata, paged_attention, write_kv
from jalapeno.backends.torch.elementwise import rope_store
from jalapeno.backends.torch.linear import linear, relayout, run_linear
from jalapeno.backends.torch.models.layers import (
    CausalLM,
    DecoderLayer,
    GatedMLP,
    RMSNorm,
    fusable,
    fuse_linears,
    fused_intact,
)
from jalapeno.backends.torch.rope import apply_rope
from jalapeno.models.arch import ModelArch


class Attention(nn.Module):
    """GQA self-attention over the paged cache. The o_proj bias, sinks and sliding window serve GPT-OSS (and
    any config that sets them)."""

    def __init__(self, cfg: ModelArch, layer: int) -> None:
        super().__init__()
        self.h, self.kvh, self.d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.h * self.d, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kvh * self.d, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kvh * self.d, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.h * self.d, cfg.hidden_size, bias=cfg.attn_o_bias)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(self.d, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.d, cfg.rms_norm_eps)
        self.qk_norm = cfg.qk_norm
        self.sinks = nn.Parameter(torch.zeros(self.h)) if cfg.attention_sinks else None
        self.window = cfg.sliding_window if cfg.is_sliding_layer(layer) else None
        self.scale = self.d**-0.5
        self._qkv: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self._qkv_parts: tuple[nn.Parameter, ...] = ()

    def fuse(self, input_major_layout: bool = False) -> None:
        """After loading: one GEMM for q, k and v (float layers only; quantized ones run separately), in the
        weight layout of :mod:`~jalapeno.backends.torch.linear`. Re-callable to change the layout."""
        if fusable(self.q_proj, self.k_proj, self.v_proj):
            self._qkv = fuse_linears(self.q_proj, self.k_proj, self.v_proj, input_major_layout=input_major_layout)
            self._qkv_parts = (self.q_proj.weight, self.k_proj.weight, self.v_proj.weight)
        relayout(self.o_proj, input_major_layout)

    def forward(self, x: torch.Tensor, cos, sin, meta: StepMetadata, cache: tuple[torch.Tensor, ...]):
        t = x.shape[0]
        h, kvh, d = self.h, self.kvh, self.d
        fused = self._qkv
        k_cache, v_cache = cache
        stored = False
        if fused is not None and fused_intact(fused[0], self, ("q_proj", "k_proj", "v_proj"), self._qkv_parts):
            qkv = linear(x, *fused).view(t, h + 2 * kvh, d)
            # RoPE on q and k in place and the K/V cache write, one C pass (elementwise.py), when it applies
            stored = not self.qk_norm and rope_store(qkv, h, kvh, cos, sin, k_cache, v_cache, meta.slot_mapping)
            if stored:
                q, k = qkv[:, :h], qkv[:, h : h + kvh]
            elif self.qk_norm:
                q, k = self.q_norm(qkv[:, :h]), self.k_norm(qkv[:, h : h + kvh])
                q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            else:  # q and k sit side by side: rotate them in one pass
                qk = apply_rope(qkv[:, : h + kvh], cos, sin)
                q, k = qk[:, :h], qk[:, h:]
            v = qkv[:, h + kvh :]
        else:
            self._qkv = None  # modules were swapped or re-assigned: stop using the fused copy for good
            q = run_linear(self.q_proj, x).view(t, h, d)
            k = run_linear(self.k_proj, x).view(t, kvh, d)
            v = run_linear(self.v_proj, x).view(t, kvh, d)
            if self.qk_norm:
                q, k = self.q_norm(q), self.k_norm(k)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if not stored:
            write_kv(k_cache, meta.slot_mapping, k)
            write_kv(v_cache, meta.slot_mapping, v)
        o = paged_attention(q, k_cache, v_cache, meta, self.scale, self.window, self.sinks, new_kv=(k, v))
        return run_linear(self.o_proj, o.reshape(t, h * d))


def build(cfg: ModelArch) -> CausalLM:
    layers = [
        DecoderLayer(cfg, Attention(cfg, i), GatedMLP(cfg.hidden_size, cfg.intermediate_size))
        for i in range(cfg.num_layers)
    ]
    return CausalLM(cfg, layers, rope_dim=cfg.head_dim)
