"""Checkpoint layouts: DeepSeek FP8 pairs and GPT-OSS MXFP4 expert blocks, checked against transformers."""

from __future__ import annotations

import numpy as np
import pytest
import quant_spec_ref as ref
import torch

from jalapeno.quant import Fp8BlockLinear, quantized_bytes
from jalapeno.quant.checkpoint import (
    dequantize_checkpoint,
    fp8_checkpoint,
    gpt_oss_mxfp4_checkpoint,
    swap_in_fp8_linears,
)

transformers = pytest.importorskip("transformers")


def _tiny_deepseek() -> torch.nn.Module:
    cfg = transformers.DeepseekV3Config(
        vocab_size=64, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
        topk_group=1, n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, max_position_embeddings=64,
        initializer_range=0.2, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.DeepseekV3ForCausalLM(cfg).eval()


def test_deepseek_fp8_checkpoint_runs_quantized_and_matches_dequantized_float() -> None:
    """A tiny DeepSeek-V3 saved in FP8 (weight + weight_scale_inv) gives the dequantized float model's logits.

    transformers 5 fuses routed experts into stacked tensors, so here only attention, dense and shared-expert
    linears are FP8; DeepSeek's own checkpoints (and Jalapeño's torch backend) keep per-expert ``nn.Linear``s,
    which :func:`swap_in_fp8_linears` covers the same way.
    """
    model = _tiny_deepseek()
    ckpt = fp8_checkpoint(model.state_dict())
    fp8_names = [k for k, v in ckpt.items() if v.dtype == torch.float8_e4m3fn]
    assert any(".self_attn.kv_b_proj." in k for k in fp8_names) and any(".mlp.down_proj." in k for k in fp8_names)
    assert not any("embed_tokens" in k or "lm_head" in k or "norm" in k for k in fp8_names)
    for k in fp8_names:
        assert ckpt[k.removesuffix("weight") + "weight_scale_inv"].dtype == torch.float32

    float_model = _tiny_deepseek()
    float_model.load_state_dict(dequantize_checkpoint(ckpt), strict=True)
    # the decoded weights are the spec decode of the stored codes
    k0 = fp8_names[0]
    want = ref.dequantize_fp8_block(ckpt[k0].view(torch.uint8).numpy(), ckpt[k0 + "_scale_inv"].numpy())
    np.testing.assert_array_equal(float_model.state_dict()[k0].double().numpy(), want.astype(np.float32))

    quant_model = _tiny_deepseek()
    swapped = swap_in_fp8_linears(quant_model, ckpt)
    assert len(swapped) == len(fp8_names)
    quant_model.load_state_dict(ckpt, strict=False)
    assert all(isinstance(quant_model.get_submodule(n), Fp8BlockLinear) for n in swapped)
    held = sum(ckpt[n + ".weight"].nbytes + ckpt[n + ".weight_scale_inv"].nbytes for n in swapped)
    assert quantized_bytes(quant_model) == held

    ids = torch.tensor([[5, 17, 3, 42, 8, 1]])
    with torch.no_grad():
        got, want_logits = quant_model(ids).logits, float_model(ids).logits
    torch.testing.assert_close(got, want_logits, rtol=1e-4, atol=1e-4)
    assert torch.equal(got.argmax(-1), want_logits.argmax(-1))


def test_gpt_oss_mxfp4_checkpoint_layout_matches_transformers_loader() -> None:
    mx = pytest.importorskip("transformers.integrations.mxfp4")
    torch.manual_seed(1)
    e, h, i = 3, 64, 32
    state = {
        "model.layers.0.mlp.experts.gate_up_proj": torch.randn(e, h, 2 * i),
        "model.layers.0.mlp.experts.down_proj": torch.randn(e, i, h),
        "model.layers.0.mlp.experts.down_proj_bias": torch.randn(e, h),
    }
    ckpt = gpt_oss_mxfp4_checkpoint(state)
    blocks = ckpt["model.layers.0.mlp.experts.gate_up_proj_blocks"]
    scales = ckpt["model.layers.0.mlp.experts.gate_up_proj_scales"]
    assert blocks.shape == (e, 2 * i, h // 32, 16) and scales.shape == (e, 2 * i, h // 32)
    assert ckpt["model.layers.0.mlp.experts.down_proj_blocks"].shape == (e, h, i // 32, 16)
    back = dequantize_checkpoint(ckpt)
    assert set(back) == set(state)
    for proj in ("gate_up_proj", "down_proj"):
        name = f"model.layers.0.mlp.experts.{proj}"
        hf = mx.convert_moe_packed_tensors(ckpt[name + "_blocks"], ckpt[name + "_scales"], dtype=torch.float32)
        assert torch.equal(hf, back[name])  # transformers decodes the same [E, K, N] float tensor
        err = (back[name] - state[name]).abs()
        assert float(err.max()) <= float(state[name].abs().max()) / 2  # coarse MX bound; exact ones in mxfp4 tests
