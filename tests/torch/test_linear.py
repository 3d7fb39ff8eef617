"""The CPU weight layout and matmul dispatch of ``jalapeno.backends.torch.linear`` against float64 references,
and the loaded model's weights: same values, input-major storage, fused GEMMs that notice a swapped module."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from jalapeno.backends.torch.linear import input_major, is_input_major, linear, relayout
from jalapeno.backends.torch.loader import load_model
from jalapeno.backends.torch.models.layers import GatedMLP, set_weight_layout
from jalapeno.errors import ConfigError


def _ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> np.ndarray:
    out = x.double().numpy() @ w.double().numpy().T
    return out if b is None else out + b.double().numpy()


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """Run with 1 and 2 intra-op threads: oneDNN serves 2-64 rows only with more than one."""
    old = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(old)


@pytest.mark.parametrize("rows", [1, 2, 7, 70, 300])
@pytest.mark.parametrize("layout", ["row-major", "input-major"])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_matches_float64(rows: int, layout: str, bias: bool, threads: int) -> None:
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(48, 40, generator=g)
    b = torch.randn(48, generator=g) if bias else None
    x = torch.randn(rows, 40, generator=g)
    wl = input_major(w) if layout == "input-major" else w
    assert is_input_major(wl) == (layout == "input-major") and torch.equal(wl, w)
    np.testing.assert_allclose(linear(x, wl, b).numpy(), _ref(x, w, b), rtol=1e-5, atol=1e-5)
    # leading batch dims are kept
    x3 = x.view(1, rows, 40)
    np.testing.assert_allclose(linear(x3, wl, b)[0].numpy(), _ref(x, w, b), rtol=1e-5, atol=1e-5)


def test_linear_other_dtypes_fall_back_to_f_linear() -> None:
    x, w = torch.randn(3, 16, dtype=torch.bfloat16), torch.randn(8, 16, dtype=torch.bfloat16)
    torch.testing.assert_close(linear(x, w), torch.nn.functional.linear(x, w))


def test_relayout_keeps_the_module_working() -> None:
    lin = nn.Linear(24, 30)
    x = torch.randn(5, 24)
    before, w = lin(x).detach(), lin.weight.detach().clone()
    relayout(lin, True)
    assert is_input_major(lin.weight) and torch.equal(lin.weight, w)
    torch.testing.assert_close(lin(x), before)  # nn.Linear.forward reads the transposed storage too
    assert lin.state_dict()["weight"].shape == (30, 24)
    relayout(lin, False)
    assert lin.weight.is_contiguous() and torch.equal(lin.weight, w)
    wide = nn.Linear(24, 24)  # out <= in: row-major is as fast or faster, left as is
    relayout(wide, True)
    assert wide.weight.is_contiguous()


def _assert_checkpoint_values(model: nn.Module, hf: nn.Module) -> None:
    ours = model.state_dict()
    for name, t in hf.state_dict().items():
        if name in ours:
            assert torch.equal(ours[name], t), name


def test_weight_layouts_keep_the_checkpoint_values(tiny_model) -> None:
    hf, path = tiny_model("llama")
    model = load_model(path).model  # "batched": row-major, as loaded
    _assert_checkpoint_values(model, hf)
    assert all(p.is_contiguous() for p in model.parameters())
    model = load_model(path, weight_layout="single").model
    _assert_checkpoint_values(model, hf)
    layer = model.model.layers[0]
    assert is_input_major(layer.self_attn._qkv[0]) and is_input_major(layer.mlp._gate_up)
    assert is_input_major(model.lm_head.weight)
    # o_proj is square and down_proj [hidden, intermediate] wider than tall: both stay row-major
    for lin in (layer.self_attn.o_proj, layer.mlp.down_proj):
        assert lin.weight.is_contiguous() and not is_input_major(lin.weight)
    set_weight_layout(model, "batched")  # and back, in place
    _assert_checkpoint_values(model, hf)
    assert all(p.is_contiguous() for p in model.parameters())
    with pytest.raises(ConfigError, match="weight layout"):
        set_weight_layout(model, "columns")


def test_fused_gemm_is_dropped_when_a_weight_is_reassigned() -> None:
    torch.manual_seed(0)
    mlp = GatedMLP(16, 24)
    plain = GatedMLP(16, 24)
    plain.load_state_dict(mlp.state_dict())
    mlp.fuse(input_major_layout=True)
    x = torch.randn(3, 16)
    torch.testing.assert_close(mlp(x), plain(x))
    new = torch.randn(24, 16)
    mlp.gate_proj.weight = nn.Parameter(new)
    plain.gate_proj.weight = nn.Parameter(new.clone())
    torch.testing.assert_close(mlp(x), plain(x))
    assert mlp._gate_up is None


def test_batched_greedy_on_both_paths_matches_transformers(tiny_model, threads) -> None:
    """Batched decode through oneDNN (2 threads) or MKL (1 thread), both layouts, against transformers."""
    from jalapeno.testing.torch_models import hf_greedy

    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.backends.torch.generate import generate_tokens
    from jalapeno.engine import EngineConfig, SamplingParams

    hf, path = tiny_model("qwen2")
    prompts = [[5, 9, 2], [7, 1, 1, 3, 8, 4, 2]]
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=4)
    greedy = SamplingParams(max_tokens=12, temperature=0.0)
    for layout in ("batched", "single"):
        outs = generate_tokens(TorchBackend(path, weight_layout=layout), prompts, greedy, cfg)
        assert outs == [hf_greedy(hf, p, 12) for p in prompts], layout


@pytest.mark.parametrize("bias", [False, True])
def test_split_gemv_on_two_threads_matches_float64(bias: bool) -> None:
    """One-row GEMVs on wide input-major weights run as two column halves (torch.bmm over a strided view of the
    same buffer) when the runner allows two GEMV threads; the result is the float64 product to fp32 rounding,
    the thread count is restored, and no copy of the weight is made."""
    from jalapeno.backends.torch import linear as lin

    g = torch.Generator().manual_seed(3)
    w = input_major(torch.randn(2 * lin.SPLIT_MIN_OUT, 96, generator=g))
    b = torch.randn(w.shape[0], generator=g) if bias else None
    x = torch.randn(1, 96, generator=g)
    ref = x.double() @ w.double().t() + (b.double() if bias else 0)
    old = torch.get_num_threads()
    calls = []
    real = lin._split_gemv
    try:
        lin._split_gemv = lambda x_, w_: calls.append(w_.data_ptr()) or real(x_, w_)
        torch.set_num_threads(1)
        with lin.gemv_threads(2):
            got = linear(x, w, b)
        assert torch.get_num_threads() == 1
        whole = linear(x, w, b)  # outside the block: one thread, the whole GEMV
    finally:
        lin._split_gemv = real
        torch.set_num_threads(old)
    assert calls == [w.data_ptr()]
    np.testing.assert_allclose(got.double().numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got.numpy(), whole.numpy(), rtol=1e-5, atol=1e-5)
