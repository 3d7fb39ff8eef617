"""Quantized torch modules: same outputs as float Linear layers holding the dequantized weight; bytes held."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import quant_spec_ref as ref
import torch
from torch import nn

from jalapeno.errors import ConfigError, UnknownNameError
from jalapeno.models.arch import BYTES_PER_ELEMENT
from jalapeno.quant import (
    Fp8BlockLinear,
    Mxfp4Experts,
    Mxfp4Linear,
    formats,
    mxfp4_experts_from_checkpoint,
    quantize_fp8_block,
    quantize_linears,
    quantize_mxfp4,
    quantized_bytes,
)


def _float_copy(model: nn.Module) -> nn.Module:
    """The same model with every quantized layer replaced by nn.Linear holding the float64-decoded weight."""
    out = copy.deepcopy(model)
    for name, m in list(out.named_modules()):
        if isinstance(m, Fp8BlockLinear):
            w = ref.dequantize_fp8_block(m.weight.view(torch.uint8).numpy(), m.weight_scale_inv.numpy(), m.block)
        elif isinstance(m, Mxfp4Linear):
            w = ref.dequantize_mxfp4(m.weight_blocks.numpy(), m.weight_scales.numpy())
        else:
            continue
        lin = nn.Linear(m.in_features, m.out_features, bias=m.bias is not None)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
            if m.bias is not None:
                lin.bias.copy_(m.bias)
        out.set_submodule(name, lin)
    return out


@pytest.mark.parametrize("cls", [Fp8BlockLinear, Mxfp4Linear])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_matches_dequantized_float_linear(cls: type, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    lin = nn.Linear(160, 200, bias=True)
    q = cls.from_linear(lin)
    f = _float_copy(nn.Sequential(q))[0]
    x = torch.randn(3, 5, 160)
    with torch.no_grad():
        y = q(x.to(dtype))
        want = f(x.to(dtype).float())
    assert y.dtype == dtype and y.shape == (3, 5, 200)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(y.float(), want, rtol=tol, atol=tol * float(want.abs().max()))


def test_fp8_linear_from_deepseek_checkpoint_pair_and_state_dict() -> None:
    w = torch.randn(300, 200)
    q, s = quantize_fp8_block(w)
    mod = Fp8BlockLinear.from_checkpoint(q, s)
    sd = mod.state_dict()
    assert set(sd) == {"weight", "weight_scale_inv"}
    assert sd["weight"].dtype == torch.float8_e4m3fn and sd["weight_scale_inv"].shape == (3, 2)
    fresh = Fp8BlockLinear(200, 300)
    fresh.load_state_dict(sd)
    assert torch.equal(fresh.weight.view(torch.uint8), q.view(torch.uint8))
    assert torch.equal(fresh.weight_scale_inv, s)
    with pytest.raises(ConfigError, match="quantize_linears"):
        fresh.load_state_dict({"weight": w.to(torch.bfloat16), "weight_scale_inv": s})
    with pytest.raises(ConfigError, match="expected"):
        Fp8BlockLinear.from_checkpoint(q, s[:2])


def test_dtype_casts_leave_quantized_buffers_alone() -> None:
    model = nn.Sequential(
        Fp8BlockLinear.from_float(torch.randn(64, 64), torch.randn(64)), Mxfp4Linear.from_float(torch.randn(32, 64))
    )
    before = quantized_bytes(model)
    scales = model[0].weight_scale_inv.clone()
    model.to(torch.bfloat16)
    assert model[0].weight.dtype == torch.float8_e4m3fn
    assert model[0].weight_scale_inv.dtype == torch.float32 and torch.equal(model[0].weight_scale_inv, scales)
    assert model[0].bias.dtype == torch.bfloat16  # ordinary float params still follow the cast
    assert model[1].weight_blocks.dtype == torch.uint8
    assert quantized_bytes(model) == before
    model.to("cpu")
    assert model(torch.randn(2, 64, dtype=torch.bfloat16)).dtype == torch.bfloat16
    with torch.device("meta"):
        meta = nn.Sequential(Fp8BlockLinear(64, 64), Mxfp4Linear(64, 32))
    meta.to_empty(device="cpu")  # materialising a meta-built model keeps the stored dtypes
    assert meta[0].weight.device.type == "cpu" and meta[0].weight.dtype == torch.float8_e4m3fn
    assert meta[1].weight_scales.dtype == torch.uint8


@pytest.mark.parametrize(("fmt", "shape"), [("fp8", (256, 384)), ("mxfp4", (64, 2880))])
def test_bytes_held_equal_stored_bytes_and_arch(fmt: str, shape: tuple[int, int]) -> None:
    w = torch.randn(*shape)
    mod = Fp8BlockLinear.from_float(w) if fmt == "fp8" else Mxfp4Linear.from_float(w)
    held = quantized_bytes(mod)
    assert held == formats.stored_bytes(shape, fmt)
    assert held == BYTES_PER_ELEMENT[fmt] * shape[0] * shape[1]


def test_bytes_held_for_padded_fp8_shape() -> None:
    mod = Fp8BlockLinear.from_float(torch.randn(130, 200))
    assert quantized_bytes(mod) == formats.stored_bytes((130, 200), "fp8") == 130 * 200 + 2 * 2 * 4


class _TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 64)
        self.up = nn.Linear(64, 96)
        self.odd = nn.Linear(96, 40, bias=False)  # 40 outputs fine, but next layer has K=40 (not a multiple of 32)
        self.down = nn.Linear(40, 64)
        self.lm_head = nn.Linear(64, 50, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        return self.lm_head(self.down(torch.relu(self.odd(torch.relu(self.up(h))))))


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_quantize_linears_in_place(fmt: str) -> None:
    torch.manual_seed(1)
    model = _TinyLM()
    result = quantize_linears(model, fmt)
    want_replaced = ("up", "odd", "down") if fmt == "fp8" else ("up", "odd")
    assert result.replaced == want_replaced
    assert ("lm_head", "skipped by pattern") in result.kept
    assert isinstance(model.lm_head, nn.Linear) and not isinstance(model.up, nn.Linear)
    ids = torch.tensor([[1, 2, 3, 49]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids), _float_copy(model)(ids), rtol=1e-5, atol=1e-5)
    expect = sum(formats.stored_bytes(tuple(getattr(model, n).dequantize().shape), fmt) for n in want_replaced)
    assert quantized_bytes(model) == expect
    with pytest.raises(UnknownNameError, match="fp8"):
        quantize_linears(model, "int3")


def test_quantize_linears_on_transformers_llama_matches_dequantized_model() -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(2)
    model = transformers.LlamaForCausalLM(cfg).eval()
    result = quantize_linears(model, "mxfp4")
    assert len(result.replaced) == 2 * 7  # q, k, v, o, gate, up, down per layer; lm_head skipped (tied)
    ids = torch.tensor([[3, 14, 15, 92, 65]])
    with torch.no_grad():
        got = model(ids).logits
        want = _float_copy(model)(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_mxfp4_experts_from_gpt_oss_checkpoint_layout() -> None:
    torch.manual_seed(3)
    e, n, k = 3, 48, 64
    w = torch.randn(e, n, k)
    packed, scales = quantize_mxfp4(w)
    experts = mxfp4_experts_from_checkpoint(packed.reshape(e, n, k // 32, 16), scales)
    assert isinstance(experts, Mxfp4Experts) and experts.blocks.shape == (e, n, k // 2)
    x = torch.randn(5, k)
    bias = torch.randn(n)
    wd = ref.dequantize_mxfp4(packed.numpy(), scales.numpy())
    for i in range(e):
        want = x.double().numpy() @ wd[i].T + bias.double().numpy()
        np.testing.assert_allclose(experts.linear(x, i, bias).double().numpy(), want, rtol=1e-5, atol=1e-5)
    held = quantized_bytes(experts)
    assert held == formats.stored_bytes((e, n, k), "mxfp4") == BYTES_PER_ELEMENT["mxfp4"] * w.numel()
    with pytest.raises(ConfigError, match="out of range"):
        experts.linear(x, e)
    with pytest.raises(ConfigError, match="do not match"):
        mxfp4_experts_from_checkpoint(packed, scales[:, :, :1])


def test_linear_weight_decodes_quantized_layers() -> None:
    from jalapeno.quant import linear_weight

    lin = nn.Linear(64, 40)
    assert linear_weight(lin) is lin.weight
    assert linear_weight(lin, torch.bfloat16).dtype == torch.bfloat16
    for q in (Fp8BlockLinear.from_linear(lin), Mxfp4Linear.from_linear(lin)):
        w = linear_weight(q)
        assert w.dtype == torch.float32 and w.shape == (40, 64)
        assert torch.equal(w, _float_copy(nn.Sequential(q))[0].weight.detach())
