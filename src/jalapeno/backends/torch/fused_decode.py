"""Fused CPU decode step for dense GQA decoders (Llama / SmolLM2 / Mistral / Qwen2 / Qwen3).

A decode step of a few sequences reads every weight once, so its speed is memory bandwidth; run as ~30
PyTorch ops per layer it reached only 38-51 % of the copy-bandwidth roofline at batch 1 on a 2-core AVX2
machine (docs/performance.md). :func:`fused_decode_step` instead makes one call into
``jalapeno/kernels/cpu_decode.c``: the whole step (every layer, final norm and LM head, for every sequence
in it) in one OpenMP region, each weight matrix's rows split over all threads.

It is an optimisation of :meth:`CausalLM.forward` and nothing else: same weights (the model's own tensors, the
``batched`` row-major layout), same paged KV cache, same block table, same outputs to float32 rounding
(tests/torch/test_fused_decode.py compares it with the PyTorch path and with ``transformers``). The model
runner (:mod:`jalapeno.backends.torch.runner`) decides which path a step takes and holds the plan: its
:class:`~jalapeno.backends.torch.runner.DecodePolicy` picks CPU steps of at most its crossover in tokens
(:data:`MAX_BATCH` by default: decode steps, speculative verifications and short prefill chunks alike, one
kernel row per token, :func:`step_rows`), and :func:`plan_for` accepts the model only when everything matches
what the kernel implements: float32, every layer a plain dense GQA block without sliding window or sinks,
float weights fused and row-major. Anything else (longer prefills included), or a machine without a C
compiler, runs the PyTorch path. The model modules never import this file.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch
from torch import nn

from jalapeno.backends.torch.attention import StepMetadata
from jalapeno.backends.torch.models.layers import DecoderLayer, GatedMLP, RMSNorm, fused_intact
from jalapeno.backends.torch.models.llama import Attention
from jalapeno.kernels.cpu_build import KernelUnavailable, load_kernel

_f = ctypes.POINTER(ctypes.c_float)


class _Layer(ctypes.Structure):
    _fields_ = [
        ("in_norm", _f), ("post_norm", _f), ("qkv_w", _f), ("qkv_b", _f), ("q_norm", _f), ("k_norm", _f),
        ("o_w", _f), ("o_b", _f), ("gu_w", _f), ("down_w", _f), ("k_cache", _f), ("v_cache", _f),
        ("eps", ctypes.c_float), ("qk_eps", ctypes.c_float), ("scale", ctypes.c_float), ("_pad", ctypes.c_float),
    ]


class _Model(ctypes.Structure):
    _fields_ = [
        ("hidden", ctypes.c_int64), ("n_heads", ctypes.c_int64), ("n_kv", ctypes.c_int64),
        ("head_dim", ctypes.c_int64), ("inter", ctypes.c_int64), ("vocab", ctypes.c_int64),
        ("block_size", ctypes.c_int64), ("n_layers", ctypes.c_int64),
        ("final_norm", _f), ("lm_head", _f), ("final_eps", ctypes.c_float), ("_pad", ctypes.c_float),
        ("layers", ctypes.POINTER(_Layer)),
    ]


@dataclass
class DecodePlan:
    """The kernel's view of one model + KV cache: raw pointers (and the weight tensors behind them).
    ``signature`` is the addresses of every tensor involved when the plan was made; :func:`plan_for` checks it
    before each use, and rebuilds the plan if anything moved (weights re-laid out, a module swapped or moved,
    a new cache)."""

    model: _Model
    layers: ctypes.Array
    tensors: tuple[torch.Tensor, ...]
    signature: tuple[int, ...]
    fn: object
    vocab: int
    hidden: int
    block_size: int


def _ptr(t: torch.Tensor | None):
    return ctypes.cast(t.data_ptr(), _f) if t is not None else None


def _ok(t: torch.Tensor | None) -> bool:
    return t is not None and t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous()


def _layer_tensors(layer: nn.Module, cache: tuple[torch.Tensor, ...] | None) -> list[torch.Tensor | None] | None:
    """The layer's tensors in :class:`_Layer` order, or None if the kernel does not implement this layer
    (``cache=None``: check the layer alone)."""
    if type(layer) is not DecoderLayer or (cache is not None and len(cache) != 2):
        return None
    attn, mlp = layer.self_attn, getattr(layer, layer.mlp_name)
    if type(attn) is not Attention or type(mlp) is not GatedMLP or attn.window is not None or attn.sinks is not None:
        return None
    if type(layer.input_layernorm) is not RMSNorm or type(layer.post_attention_layernorm) is not RMSNorm:
        return None
    if attn.h % attn.kvh or attn.d % 2:
        return None
    qkv = attn._qkv
    if qkv is None or not fused_intact(qkv[0], attn, ("q_proj", "k_proj", "v_proj"), attn._qkv_parts):
        return None
    if not fused_intact(mlp._gate_up, mlp, ("gate_proj", "up_proj"), mlp._gate_up_parts):
        return None
    o, down = attn.o_proj, mlp.down_proj
    if type(o) is not nn.Linear or type(down) is not nn.Linear or down.bias is not None:
        return None
    q_norm = attn.q_norm.weight if attn.qk_norm else None
    k_norm = attn.k_norm.weight if attn.qk_norm else None
    tensors = [
        layer.input_layernorm.weight, layer.post_attention_layernorm.weight, qkv[0], qkv[1], q_norm, k_norm,
        o.weight, o.bias, mlp._gate_up, down.weight, *(cache if cache is not None else (None, None)),
    ]
    required = [0, 1, 2, 6, 8, 9] + ([10, 11] if cache is not None else [])
    if not all(_ok(tensors[i]) for i in required):
        return None
    if any(t is not None and not _ok(t) for t in tensors):
        return None
    if cache is not None and (cache[0].shape[2:] != (attn.kvh, attn.d) or cache[1].shape != cache[0].shape):
        return None
    return tensors


def supports_fused_decode(model: nn.Module) -> bool:
    """Whether one-token steps of ``model`` (as loaded and laid out now) would run the fused kernel: every layer
    is of a kind it implements, the weights are float32 row-major on CPU, and the kernel builds here."""
    if type(model.model.norm) is not RMSNorm:
        return False
    if type(model.lm_head) is not nn.Linear or not _ok(model.lm_head.weight) or model.lm_head.bias is not None:
        return False
    if any(_layer_tensors(layer, None) is None for layer in model.model.layers):
        return False
    try:
        load_kernel("cpu_decode")
    except KernelUnavailable:
        return False
    return True


def _signature(model: nn.Module, kv_caches: list[tuple[torch.Tensor, ...]]) -> tuple[int, ...] | None:
    """Addresses of every tensor the kernel would read or write, found without any checks (fast: it runs
    every step, so it reads the modules' ``_modules``/``_parameters`` dicts, not ``nn.Module.__getattr__``).
    Equal to a plan's signature = the plan still points at the model's current storage."""
    ptrs: list[int] = []
    add = ptrs.append
    try:
        for layer, cache in zip(model._modules["model"]._modules["layers"], kv_caches):
            mods = layer._modules
            a = mods["self_attn"]
            am = a._modules
            mm = mods[layer.mlp_name]._modules
            qkv = a._qkv
            for t in (
                mods["input_layernorm"]._parameters["weight"], mods["post_attention_layernorm"]._parameters["weight"],
                qkv[0], qkv[1], am["q_proj"]._parameters["weight"], am["k_proj"]._parameters["weight"],
                am["v_proj"]._parameters["weight"], am["o_proj"]._parameters["weight"],
                am["o_proj"]._parameters.get("bias"), mods[layer.mlp_name]._gate_up,
                mm["gate_proj"]._parameters["weight"], mm["up_proj"]._parameters["weight"],
                mm["down_proj"]._parameters["weight"], cache[0], cache[1],
            ):
                add(0 if t is None else t.data_ptr())
            if a.qk_norm:
                add(am["q_norm"]._parameters["weight"].data_ptr())
                add(am["k_norm"]._parameters["weight"].data_ptr())
        add(model._modules["lm_head"]._parameters["weight"].data_ptr())
        add(model._modules["model"]._modules["norm"]._parameters["weight"].data_ptr())
    except (AttributeError, TypeError, KeyError, IndexError):
        return None
    return tuple(ptrs)


def plan_for(
    model: nn.Module, kv_caches: list[tuple[torch.Tensor, ...]], block_size: int, previous: DecodePlan | None = None
) -> DecodePlan | None:
    """A :class:`DecodePlan` for ``model`` and its caches, or None when the kernel does not apply. Raises
    :class:`~jalapeno.kernels.cpu_build.KernelUnavailable` when the kernel cannot be built here. Cheap to call
    every step: ``previous`` (the caller's last plan) comes back while its signature holds (~0.1 ms for
    SmolLM2's 30 layers); a changed model is checked in full again."""
    signature = _signature(model, kv_caches)
    if signature is None:
        return None
    if previous is not None and previous.signature == signature and previous.block_size == block_size:
        return previous
    layers = model.model.layers
    if len(kv_caches) != len(layers) or type(model.model.norm) is not RMSNorm or type(model.lm_head) is not nn.Linear:
        return None
    per_layer = [_layer_tensors(layer, cache) for layer, cache in zip(layers, kv_caches)]
    if any(t is None for t in per_layer):
        return None
    head, final = model.lm_head.weight, model.model.norm.weight
    if not (_ok(head) and _ok(final)) or model.lm_head.bias is not None:
        return None
    a0 = layers[0].self_attn
    m0 = layers[0]._modules[layers[0].mlp_name]
    if any(la.self_attn.h != a0.h or la.self_attn.kvh != a0.kvh or la.self_attn.d != a0.d
           or la._modules[la.mlp_name].down_proj.weight.shape != m0.down_proj.weight.shape for la in layers):
        return None
    # the weights stay referenced by the plan; the caches do not (a replaced cache must be freed at once): a
    # plan is only used after its signature matched, i.e. while every address in it is live storage
    weights = tuple(t for ts in per_layer for t in ts[:10] if t is not None) + (head, final)
    lib, _ = load_kernel("cpu_decode")
    fn = lib.jal_decode_step
    fn.restype = ctypes.c_int
    i64p = ctypes.POINTER(ctypes.c_int64)
    fn.argtypes = [ctypes.POINTER(_Model), ctypes.c_int64, _f, _f, _f, ctypes.POINTER(ctypes.c_int32),
                   ctypes.c_int64, i64p, i64p, ctypes.c_int64, _f, ctypes.c_int, ctypes.c_int64]
    arr = (_Layer * len(layers))()
    for i, (layer, ts) in enumerate(zip(layers, per_layer)):
        attn = layer.self_attn
        arr[i] = _Layer(*[_ptr(t) for t in ts], layer.input_layernorm.eps,
                        attn.q_norm.eps if attn.qk_norm else 0.0, attn.scale, 0.0)
    hidden, inter = m0.down_proj.weight.shape
    cm = _Model(hidden, a0.h, a0.kvh, a0.d, inter, head.shape[0], block_size, len(layers), _ptr(final), _ptr(head),
                model.model.norm.eps, 0.0, arr)
    return DecodePlan(cm, arr, weights, signature, fn, head.shape[0], hidden, block_size)


#: default crossover: most tokens (kernel rows) one fused step takes, for a machine never probed (the runner's
#: DecodePolicy takes the measured one, `jalapeno hardware probe`). Below PANEL_MIN_ROWS rows its GEMMs read each
#: weight row once for every row of the step (bandwidth-bound steps: 2.3-3x PyTorch at 1-8 sequences on the
#: 2-core AVX2 VM); from there, outer-product micro-kernels over activation panels run the compute-bound steps
#: (one thread, CPU time, load ~16: 1.65x the dot-product tiles and 2.1x PyTorch at 32 rows, 1.9x at 64,
#: 1.15x at a 256-token prefill, 0.68x at 512), so prefills of 512 tokens keep MKL (docs/performance.md)
MAX_BATCH = 128


#: default fewest rows (tokens) of a step that run the kernel's outer-product micro-kernels over activation
#: panels instead of its dot-product tiles (the runner's DecodePolicy may set another)
PANEL_MIN_ROWS = 8


def step_rows(meta: StepMetadata) -> tuple[torch.Tensor, torch.Tensor]:
    """Per fed token: its sequence's block table row and its context length (position + 1), the kernel's view
    of a step. A pure decode step is the metadata's own tables; a step feeding several tokens of a sequence (a
    speculative verification, a prefill chunk) repeats the sequence's table once per token."""
    if meta.max_q == 1:
        return meta.block_tables.contiguous(), meta.context_lens.contiguous()
    qlens = torch.tensor(meta.query_lens, dtype=torch.int64)
    tables = meta.block_tables.repeat_interleave(qlens, dim=0).contiguous()
    return tables, (meta.positions + 1).contiguous()


def fused_decode_step(
    plan: DecodePlan, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: StepMetadata,
    logits_index: torch.Tensor, threads: int, panel_min: int = PANEL_MIN_ROWS,
) -> torch.Tensor:
    """Run the step for the embedded tokens ``x [T, H]`` (``meta``'s fed tokens, in order: one per sequence for
    a decode step, or several consecutive ones per sequence); returns float32 logits
    ``[len(logits_index), vocab]`` for the token rows in ``logits_index`` (the LM head runs for those only)."""
    b = x.shape[0]
    h = x.contiguous().clone()
    cos = cos.reshape(b, -1).contiguous()
    sin = sin.reshape(b, -1).contiguous()
    tables, ctx = step_rows(meta)
    n_out = logits_index.numel()  # 0: a prefill chunk that does not reach its prompt's end
    every = n_out == b and (b == 1 or bool((logits_index == torch.arange(b)).all()))
    rows = None if every or n_out == 0 else logits_index.to(torch.int64).contiguous()
    logits = torch.empty(n_out, plan.vocab, dtype=torch.float32)
    i64p = ctypes.POINTER(ctypes.c_int64)
    rc = plan.fn(
        ctypes.byref(plan.model), b, _ptr(h), _ptr(cos), _ptr(sin),
        ctypes.cast(tables.data_ptr(), ctypes.POINTER(ctypes.c_int32)), tables.shape[1],
        ctypes.cast(ctx.data_ptr(), i64p), None if rows is None else ctypes.cast(rows.data_ptr(), i64p), n_out,
        _ptr(logits), threads, panel_min,
    )
    if rc != 0:
        raise MemoryError("fused CPU decode step could not allocate its scratch buffers")
    return logits
