"""DeepSeek-V3 / Kimi K2: multi-head latent attention (MLA) and a sigmoid-routed MoE with shared experts.

MLA caches one *latent* per token: ``c_kv`` (``kv_lora_rank`` dims, after ``kv_a_layernorm``) followed by the
roped shared key ``k_pe`` (``qk_rope_head_dim`` dims), i.e. a single-head cache of ``rank + rope`` dims. We use
the *absorbed* form (every step, prefill and decode): ``kv_b_proj`` splits per head into ``W_UK [nope, rank]``
and ``W_UV [v, rank]``; the query's no-rope part is mapped into latent space (``q_nope @ W_UK``) so scores are
``[q_nope W_UK, q_pe] . [c_kv, k_pe]``, and the attention-weighted latent is mapped out through ``W_UV``. This is
exactly HF's expanded form reassociated, with a cache ``2 * heads * head_dim / (rank + rope)`` times smaller.

Routing (HF ``DeepseekV3TopkRouter``): ``s = sigmoid(x W^T)`` in float32; expert choice uses
``s + e_score_correction_bias``, restricted to the ``topk_group`` groups with the largest sum of their top-2
biased scores; weights are the unbiased ``s`` of the chosen experts, renormalised if ``norm_topk_prob``, times
``routed_scaling_factor``. Shared experts always run. The first ``first_k_dense_replace`` layers are dense.
"""

from __future__ import annotations

import torch
from torch import nn

from jalapeno.backends.torch.attention import StepMetadata, paged_attention, write_kv
from jalapeno.backends.torch.models.layers import CausalLM, DecoderLayer, GatedMLP, RMSNorm
from jalapeno.backends.torch.models.moe import dispatch_experts
from jalapeno.backends.torch.rope import apply_rope, rope_factor, yarn_mscale
from jalapeno.models.arch import ModelArch
from jalapeno.quant.modules import linear_weight


class MLAttention(nn.Module):
    def __init__(self, cfg: ModelArch) -> None:
        super().__init__()
        self.h = cfg.num_heads
        self.nope, self.rope, self.vdim = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        self.rank = cfg.kv_lora_rank
        qk = self.nope + self.rope
        hid, bias = cfg.hidden_size, cfg.attention_bias
        if cfg.q_lora_rank is None:
            self.q_proj = nn.Linear(hid, self.h * qk, bias=False)
        else:
            self.q_a_proj = nn.Linear(hid, cfg.q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(cfg.q_lora_rank)  # HF uses the default eps (1e-6) here
            self.q_b_proj = nn.Linear(cfg.q_lora_rank, self.h * qk, bias=False)
        self.q_lora = cfg.q_lora_rank is not None
        self.kv_a_proj_with_mqa = nn.Linear(hid, self.rank + self.rope, bias=bias)
        self.kv_a_layernorm = RMSNorm(self.rank)
        self.kv_b_proj = nn.Linear(self.rank, self.h * (self.nope + self.vdim), bias=False)
        self.o_proj = nn.Linear(self.h * self.vdim, hid, bias=bias)
        self.interleave = cfg.rope_interleave
        self.scale = qk**-0.5
        rs = cfg.rope_scaling
        if rs.rope_type != "default" and rs.mscale_all_dim:
            self.scale *= yarn_mscale(rope_factor(rs), rs.mscale_all_dim) ** 2

    def forward(self, x: torch.Tensor, cos, sin, meta: StepMetadata, cache: tuple[torch.Tensor, ...]):
        t = x.shape[0]
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))) if self.q_lora else self.q_proj(x)
        q_nope, q_pe = q.view(t, self.h, self.nope + self.rope).split([self.nope, self.rope], dim=-1)
        c_kv, k_pe = self.kv_a_proj_with_mqa(x).split([self.rank, self.rope], dim=-1)
        c_kv = self.kv_a_layernorm(c_kv)
        q_pe = apply_rope(q_pe, cos, sin, self.interleave)
        k_pe = apply_rope(k_pe.view(t, 1, self.rope), cos, sin, self.interleave)
        (latent,) = cache
        write_kv(latent, meta.slot_mapping, torch.cat([c_kv.view(t, 1, self.rank), k_pe], dim=-1))
        w = linear_weight(self.kv_b_proj, x.dtype).view(self.h, self.nope + self.vdim, self.rank)
        w_uk, w_uv = w[:, : self.nope], w[:, self.nope :]
        q_lat = torch.einsum("thn,hnr->thr", q_nope, w_uk)
        o_lat = paged_attention(torch.cat([q_lat, q_pe], dim=-1), latent, latent[..., : self.rank], meta, self.scale)
        o = torch.einsum("thr,hvr->thv", o_lat, w_uv)
        return self.o_proj(o.reshape(t, self.h * self.vdim))


class Gate(nn.Module):
    def __init__(self, cfg: ModelArch) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(cfg.num_experts, cfg.hidden_size))
        self.register_buffer("e_score_correction_bias", torch.zeros(cfg.num_experts))
        self.cfg = cfg

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.cfg
        s = torch.sigmoid(nn.functional.linear(x.float(), self.weight.float()))
        biased = s + self.e_score_correction_bias.float()
        grouped = biased.view(-1, c.n_group, c.num_experts // c.n_group)
        group_score = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(-1)
        keep = torch.zeros_like(group_score).scatter_(1, group_score.topk(c.topk_group, dim=-1).indices, 1.0)
        keep = keep.bool()[:, :, None].expand_as(grouped).reshape(-1, c.num_experts)
        idx = biased.masked_fill(~keep, float("-inf")).topk(c.experts_per_token, dim=-1).indices
        w = s.gather(1, idx)
        if c.norm_topk_prob:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return w * c.routed_scaling_factor, idx


class DeepseekMoE(nn.Module):
    def __init__(self, cfg: ModelArch) -> None:
        super().__init__()
        self.gate = Gate(cfg)
        self.experts = nn.ModuleList(
            GatedMLP(cfg.hidden_size, cfg.moe_intermediate_size) for _ in range(cfg.num_experts)
        )
        shared = cfg.shared_expert_intermediate_size or cfg.moe_intermediate_size
        self.shared_experts = GatedMLP(cfg.hidden_size, shared * cfg.num_shared_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, idx = self.gate(x)
        return dispatch_experts(x, idx, w, self.experts) + self.shared_experts(x)


def build(cfg: ModelArch) -> CausalLM:
    layers = []
    for i in range(cfg.num_layers):
        mlp = DeepseekMoE(cfg) if cfg.is_moe_layer(i) else GatedMLP(cfg.hidden_size, cfg.intermediate_size)
        layers.append(DecoderLayer(cfg, MLAttention(cfg), mlp))
    return CausalLM(cfg, layers, rope_dim=cfg.qk_rope_head_dim)
