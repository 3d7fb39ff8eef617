"""Layers shared by every model family: RMSNorm, fused linears, the gated MLP, the decoder block and the
causal-LM shell.

Every model maps Hugging Face parameter names one to one (``model.layers.3.self_attn.q_proj.weight``...), so
weights load with a plain ``load_state_dict``. A model's ``forward`` takes the flat tokens of one engine step,
the step's :class:`StepMetadata` and the per-layer KV caches, and returns logits only for the rows in
``logits_index`` (the last fed token of each sequence that samples). How a step runs (this forward or the
fused CPU decode kernel) is the model runner's choice (:mod:`jalapeno.backends.torch.runner`); the model
knows nothing of it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from jalapeno.backends.torch.attention import StepMetadata
from jalapeno.backends.torch.elementwise import add_rms_norm, silu_mul
from jalapeno.backends.torch.linear import (
    WEIGHT_LAYOUTS,
    input_major,
    linear,
    relayout,
    run_linear,
    wants_input_major,
)
from jalapeno.backends.torch.rope import rope_cos_sin, rope_frequencies
from jalapeno.errors import ConfigError
from jalapeno.models.arch import ModelArch


class RMSNorm(nn.Module):
    """``weight * x / sqrt(mean(x^2) + eps)``, normalised in float32 like HF."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            fused = add_rms_norm(x, None, self.weight, self.eps)  # one C pass (elementwise.py), when it applies
            return fused[1] if fused is not None else F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)

    def add_forward(self, x: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x + d, self(x + d))``: the residual add and the norm after it, in one pass where the fused kernel
        applies (:func:`~jalapeno.backends.torch.elementwise.add_rms_norm`)."""
        fused = add_rms_norm(x, d, self.weight, self.eps) if x.dtype == torch.float32 else None
        if fused is not None:
            return fused
        s = x + d
        return s, self(s)


def fusable(*linears: nn.Module) -> bool:
    """True when every layer is a plain float ``nn.Linear`` of one dtype/device with consistent biases.
    Quantized layers (``Fp8BlockLinear``, ``Mxfp4Linear``) are not fused: they keep their own matmul."""
    if any(type(lin) is not nn.Linear for lin in linears):
        return False
    w0 = linears[0].weight
    return all(
        lin.weight.dtype == w0.dtype and lin.weight.device == w0.device
        and (lin.bias is None) == (linears[0].bias is None)
        for lin in linears
    )


def fuse_linears(*linears: nn.Linear, input_major_layout: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Concatenate the weights (and biases) of linears that read the same input into one matrix, and
    re-point each original parameter at its slice, so one GEMM replaces several and no memory is duplicated
    (``state_dict`` still shows the Hugging Face names). ``input_major_layout``: store the fused matrix
    input-major where :mod:`jalapeno.backends.torch.linear` says that is faster; the returned ``[out, in]``
    tensor is then a transposed view. Calling it again on fused linears re-fuses them (e.g. a new layout)."""
    w = torch.cat([lin.weight.detach() for lin in linears])
    if input_major_layout and wants_input_major(w):
        w = input_major(w)
    has_bias = linears[0].bias is not None
    b = torch.cat([lin.bias.detach() for lin in linears]) if has_bias else None
    row = 0
    for lin in linears:
        n = lin.weight.shape[0]
        lin.weight = nn.Parameter(w[row : row + n], requires_grad=False)
        if has_bias:
            lin.bias = nn.Parameter(b[row : row + n], requires_grad=False)
        row += n
    return w, b


def fused_intact(
    fused: torch.Tensor | None, owner: nn.Module, names: tuple[str, ...], parts: tuple[nn.Parameter, ...]
) -> bool:
    """True while each child ``owner.<name>`` is still the plain ``nn.Linear`` whose weight is the Parameter
    :func:`fuse_linears` installed (``parts``) and still a view of ``fused``. A later module swap, e.g. to a
    quantized linear, a re-assigned weight or a moved model switches the caller back to the modules; in-place
    writes reach the fused matrix anyway, as the weights are views of it. Cheap: it runs for every layer of
    every step."""
    if fused is None or not parts or parts[0].data_ptr() != fused.data_ptr():
        return False
    mods = owner._modules
    for name, part in zip(names, parts):
        mod = mods.get(name)
        if type(mod) is not nn.Linear or mod._parameters.get("weight") is not part:
            return False
    return True


def set_weight_layout(model: nn.Module, layout: str) -> None:
    """(Re-)fuse every module of ``model`` in ``layout`` ("batched" | "single", see
    :mod:`jalapeno.backends.torch.linear`); in place, without holding two copies of any fused matrix."""
    if layout not in WEIGHT_LAYOUTS:
        raise ConfigError(f"unknown weight layout {layout!r}; use one of: {', '.join(WEIGHT_LAYOUTS)}")
    for module in model.modules():
        if hasattr(module, "fuse"):
            module.fuse(input_major_layout=layout == "single")


class GatedMLP(nn.Module):
    """SwiGLU feed-forward: ``down(silu(gate(x)) * up(x))`` with HF names gate_proj/up_proj/down_proj."""

    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self._gate_up: torch.Tensor | None = None
        self._gate_up_parts: tuple[nn.Parameter, ...] = ()

    def fuse(self, input_major_layout: bool = False) -> None:
        """After loading: one GEMM for gate and up (float layers only; quantized ones run separately), in the
        weight layout of :mod:`~jalapeno.backends.torch.linear`. Re-callable to change the layout."""
        if fusable(self.gate_proj, self.up_proj):
            self._gate_up, _ = fuse_linears(self.gate_proj, self.up_proj, input_major_layout=input_major_layout)
            self._gate_up_parts = (self.gate_proj.weight, self.up_proj.weight)
        relayout(self.down_proj, input_major_layout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if fused_intact(self._gate_up, self, ("gate_proj", "up_proj"), self._gate_up_parts):
            gate_up = linear(x, self._gate_up)
            act = silu_mul(gate_up)  # one C pass (elementwise.py), when it applies
            if act is None:
                gate, up = gate_up.chunk(2, dim=-1)
                act = F.silu(gate).mul_(up)
            return run_linear(self.down_proj, act)
        self._gate_up = None  # modules were swapped or re-assigned: stop using the fused copy for good
        return run_linear(self.down_proj, F.silu(run_linear(self.gate_proj, x)) * run_linear(self.up_proj, x))


class DecoderLayer(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``. ``mlp_name`` keeps HF naming."""

    def __init__(self, cfg: ModelArch, attn: nn.Module, mlp: nn.Module, mlp_name: str = "mlp") -> None:
        super().__init__()
        self.self_attn = attn
        self.mlp_name = mlp_name
        setattr(self, mlp_name, mlp)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, meta, cache, keep: torch.Tensor | None = None):
        """``keep``: the rows whose output is wanted (the model's last layer: the rows the LM head reads). Attention
        still runs over every row (their K/V go to the cache); the residual, the norm and the MLP only for ``keep``
        (a 512-token prompt that samples one token skips 511 rows of the last layer's MLP, ≈ 2 % of its prefill)."""
        a = self.self_attn(self.input_layernorm(x), cos, sin, meta, cache)
        if keep is not None:
            x, a = x[keep], a[keep]
            if keep.numel() == 0:  # a prefill chunk short of its prompt's end: nothing reaches the LM head
                return x
        x, h = self.post_attention_layernorm.add_forward(x, a)
        return x + getattr(self, self.mlp_name)(h)


class Backbone(nn.Module):
    """``model.*``: embeddings, decoder layers, final norm."""

    def __init__(self, cfg: ModelArch, layers: list[nn.Module]) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class CausalLM(nn.Module):
    """The causal-LM shell every family uses: ``model`` (a :class:`Backbone`) and ``lm_head``."""

    def __init__(self, cfg: ModelArch, layers: list[nn.Module], rope_dim: int) -> None:
        super().__init__()
        self.config = cfg
        self.model = Backbone(cfg, layers)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        inv_freq, self.rope_attention_factor = rope_frequencies(cfg.rope_theta, cfg.rope_scaling, rope_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def fuse(self, input_major_layout: bool = False) -> None:
        """After loading: the LM head (and the embedding tied to it) in the weight layout of
        :mod:`~jalapeno.backends.torch.linear`; input-major, a token's embedding row is a strided read, which
        costs nothing next to streaming the head."""
        relayout(self.lm_head, input_major_layout)
        if self.config.tie_word_embeddings and type(self.lm_head) is nn.Linear:
            self.model.embed_tokens.weight = self.lm_head.weight

    def embed(
        self, input_ids: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The step's input: token embeddings ``x [T, H]`` and the rotary tables ``cos, sin`` every layer
        shares (also what the fused decode kernel takes)."""
        x = self.model.embed_tokens(input_ids)
        cos, sin = rope_cos_sin(positions, self.inv_freq, self.rope_attention_factor, x.dtype)
        return x, cos, sin

    def forward(
        self,
        input_ids: torch.Tensor,
        meta: StepMetadata,
        kv_caches: list[tuple[torch.Tensor, ...]],
        logits_index: torch.Tensor,
    ) -> torch.Tensor:
        """Run one step over ``input_ids [T]``; returns float32 logits ``[len(logits_index), vocab]``."""
        x, cos, sin = self.embed(input_ids, meta.positions)
        # rows the LM head does not read stop before the last layer's MLP (a prefill samples only its last row)
        last = min(len(self.model.layers), len(kv_caches)) - 1
        keep = logits_index if logits_index.numel() < input_ids.numel() and last >= 0 else None
        for i, (layer, cache) in enumerate(zip(self.model.layers, kv_caches)):
            x = layer(x, cos, sin, meta, cache, keep if i == last else None)
        x = self.model.norm(x if keep is not None else x[logits_index])
        return run_linear(self.lm_head, x).float()
