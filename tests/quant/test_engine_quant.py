"""Quantized weights inside the real engine: tiny DeepSeek-V3 (FP8 block) and GPT-OSS (MXFP4) checkpoints run
through TorchBackend + the shared scheduler and generate the same greedy tokens as the same model dequantized
to float32.

The torch backend's loader does not read quantized checkpoints yet, so the quantized models are assembled here
from its float model: DeepSeek with :func:`swap_in_fp8_linears` + the FP8 checkpoint tensors (the hook its
loader needs), GPT-OSS with MXFP4 attention projections (:func:`quantize_linears`) and its experts served from
the checkpoint's ``*_blocks``/``*_scales`` by :class:`Mxfp4Experts` through a small adapter (``_Mxfp4GptOssExperts``
below: the forward the backend's ``Experts`` would need).
"""

from __future__ import annotations

import copy
import re

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
backend_mod = pytest.importorskip("jalapeno.backends.torch.backend")

from torch import nn  # noqa: E402

from jalapeno.backends.torch.generate import generate_tokens  # noqa: E402
from jalapeno.backends.torch.loader import LoadedModel, load_model  # noqa: E402
from jalapeno.engine import EngineConfig, SamplingParams  # noqa: E402
from jalapeno.quant import (  # noqa: E402
    Fp8BlockLinear,
    Mxfp4Experts,
    Mxfp4Linear,
    mxfp4_experts_from_checkpoint,
    quantize_linears,
    quantized_bytes,
)
from jalapeno.quant.checkpoint import (  # noqa: E402
    dequantize_checkpoint,
    fp8_checkpoint,
    gpt_oss_mxfp4_checkpoint,
    swap_in_fp8_linears,
)

BASE = dict(
    vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, initializer_range=0.2, max_position_embeddings=256, bos_token_id=None,
    eos_token_id=None, pad_token_id=None,
)  # fmt: skip
DEEPSEEK = dict(
    num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, kv_lora_rank=16,
    q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_group=4, topk_group=2,
    first_k_dense_replace=1,
)  # fmt: skip
GPT_OSS = dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=8)
_FP8_NO_KV_B = re.compile(r"\.(q_a_proj|q_b_proj|kv_a_proj_with_mqa|o_proj|gate_proj|up_proj|down_proj)\.weight$")
PROMPTS = [[5, 17, 99, 3], [42, 8, 1, 77, 64, 23, 9, 110, 31]]


def _save(tmp_path, cfg_cls: str, model_cls: str, extra: dict) -> LoadedModel:
    cfg = getattr(transformers, cfg_cls)(**{**BASE, **extra})
    torch.manual_seed(0)
    getattr(transformers, model_cls)(cfg).eval().save_pretrained(tmp_path)
    return load_model(tmp_path, "cpu", torch.float32)


def _greedy(loaded: LoadedModel, model: nn.Module) -> list[list[int]]:
    backend = backend_mod.TorchBackend(loaded=LoadedModel(model, loaded.config, loaded.tokenizer_source))
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=4)
    return generate_tokens(backend, PROMPTS, SamplingParams(max_tokens=12, temperature=0.0), cfg)


def test_deepseek_v3_fp8_checkpoint_generates_like_dequantized_float32(tmp_path) -> None:
    loaded = _save(tmp_path, "DeepseekV3Config", "DeepseekV3ForCausalLM", DEEPSEEK)
    # DeepSeek layout: weight (E4M3) + weight_scale_inv. kv_b_proj stays float here: the backend's absorbed MLA
    # reads kv_b_proj.weight as a matrix (hook needed: jalapeno.quant.linear_weight(self.kv_b_proj, dtype)).
    ckpt = fp8_checkpoint(loaded.model.state_dict(), pattern=_FP8_NO_KV_B)

    quant = copy.deepcopy(loaded.model)
    swapped = swap_in_fp8_linears(quant, ckpt)
    quant.load_state_dict(ckpt, strict=True)
    assert any(".mlp.experts.3.down_proj" in n for n in swapped) and any("q_b_proj" in n for n in swapped)
    assert all(isinstance(quant.get_submodule(n), Fp8BlockLinear) for n in swapped)
    assert quantized_bytes(quant) > 0

    reference = copy.deepcopy(loaded.model)
    reference.load_state_dict(dequantize_checkpoint(ckpt), strict=True)
    assert _greedy(loaded, quant) == _greedy(loaded, reference)


class _Mxfp4GptOssExperts(nn.Module):
    """GPT-OSS experts served from MXFP4 (same routing/SwiGLU as the backend's float ``Experts``)."""

    def __init__(self, float_experts: nn.Module, gate_up: Mxfp4Experts, down: Mxfp4Experts) -> None:
        super().__init__()
        self.gate_up, self.down = gate_up, down
        self.gate_up_proj_bias = float_experts.gate_up_proj_bias
        self.down_proj_bias = float_experts.down_proj_bias
        self.alpha, self.limit = float_experts.alpha, float_experts.limit

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        gu = self.gate_up.linear(x, e, self.gate_up_proj_bias[e])
        gate = gu[..., ::2].clamp(max=self.limit)
        up = gu[..., 1::2].clamp(min=-self.limit, max=self.limit)
        return self.down.linear((up + 1) * gate * torch.sigmoid(gate * self.alpha), e, self.down_proj_bias[e])

    def forward(self, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for e in torch.unique(idx).tolist():
            tok, slot = torch.nonzero(idx == e, as_tuple=True)
            out.index_add_(0, tok, self.expert(e, x[tok]) * w[tok, slot, None].to(x.dtype))
        return out


def test_gpt_oss_mxfp4_checkpoint_generates_like_dequantized_float32(tmp_path) -> None:
    loaded = _save(tmp_path, "GptOssConfig", "GptOssForCausalLM", GPT_OSS)
    ckpt = gpt_oss_mxfp4_checkpoint(loaded.model.state_dict())  # experts as *_blocks / *_scales

    quant = copy.deepcopy(loaded.model)
    result = quantize_linears(quant, "mxfp4")  # attention q/k/v/o in MXFP4 too (K = 64 divides by 32)
    assert result.replaced and all(isinstance(quant.get_submodule(n), Mxfp4Linear) for n in result.replaced)
    reference = copy.deepcopy(loaded.model)
    ref_state = reference.state_dict()
    for name in result.replaced:  # the float reference holds exactly the decoded attention weights
        ref_state[name + ".weight"] = quant.get_submodule(name).dequantize(torch.float32)
    ref_state.update(dequantize_checkpoint({k: v for k, v in ckpt.items() if ".experts." in k}))
    reference.load_state_dict(ref_state, strict=True)

    n_layers = 0
    for layer_name, mod in list(quant.named_modules()):
        if layer_name.endswith("mlp.experts"):
            p = layer_name + "."
            gate_up = mxfp4_experts_from_checkpoint(ckpt[p + "gate_up_proj_blocks"], ckpt[p + "gate_up_proj_scales"])
            down = mxfp4_experts_from_checkpoint(ckpt[p + "down_proj_blocks"], ckpt[p + "down_proj_scales"])
            quant.set_submodule(layer_name, _Mxfp4GptOssExperts(mod, gate_up, down))
            n_layers += 1
    assert n_layers == BASE["num_hidden_layers"]
    assert _greedy(loaded, quant) == _greedy(loaded, reference)
