"""The fused elementwise kernels (residual add + RMSNorm, SiLU·up, RoPE + K/V write) against float64 references
and the PyTorch ops they replace, and every model family's PyTorch path with them against transformers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from jalapeno.backends.torch import elementwise
from jalapeno.backends.torch.attention import SeqSlice, fresh_prefill_attention, write_kv
from jalapeno.backends.torch.backend import TorchBackend
from jalapeno.backends.torch.elementwise import (
    add_rms_norm,
    causal_attention,
    elementwise_kernels,
    rope_store,
    silu_mul,
)
from jalapeno.backends.torch.generate import generate_tokens
from jalapeno.backends.torch.rope import apply_rope, rope_cos_sin
from jalapeno.backends.torch.runner import PYTORCH_ONLY
from jalapeno.engine import EngineConfig, SamplingParams
from jalapeno.testing.torch_models import FAMILIES, hf_greedy


@pytest.fixture(scope="module", autouse=True)
def _kernel_built():
    if elementwise._library() is None:
        pytest.skip("no C compiler here: the PyTorch ops run instead (covered by the family tests elsewhere)")


@pytest.mark.parametrize("rows,n", [(1, 7), (3, 576), (200, 1000)])  # serial and parallel, odd widths
@pytest.mark.parametrize("with_residual", [True, False])
def test_add_rms_norm_matches_float64(rows, n, with_residual):
    g = torch.Generator().manual_seed(rows + n)
    x, d, w = torch.randn(rows, n, generator=g), torch.randn(rows, n, generator=g), torch.randn(n, generator=g)
    s, h = add_rms_norm(x, d if with_residual else None, w, 1e-5)
    s64 = x.double() + d.double() if with_residual else x.double()
    ref = w.double() * s64 / torch.sqrt(s64.pow(2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(s, s64.float(), atol=0, rtol=0)  # the sum is one float32 add
    torch.testing.assert_close(h.double(), ref, atol=2e-6, rtol=2e-6)


def test_silu_mul_matches_float64_over_the_exp_range():
    g = torch.Generator().manual_seed(0)
    gu = torch.randn(40, 2 * 777, generator=g) * 6
    gu[0, :8] = torch.tensor([-200.0, -88.0, -87.0, -20.0, 0.0, 20.0, 88.0, 200.0])  # the clamps and beyond
    out = silu_mul(gu)
    gate, up = gu.double().chunk(2, -1)
    ref = gate * torch.sigmoid(gate) * up
    torch.testing.assert_close(out.double(), ref, atol=1e-30, rtol=1e-6)
    torch.testing.assert_close(out, F.silu(gu[:, :777]) * gu[:, 777:], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("t", [1, 5, 300])
def test_rope_store_matches_apply_rope_and_write_kv(t):
    h, kvh, d, blocks, bs = 6, 2, 16, 40, 8
    g = torch.Generator().manual_seed(t)
    qkv = torch.randn(t, h + 2 * kvh, d, generator=g)
    inv_freq = 1.0 / (500.0 ** (torch.arange(0, d, 2).float() / d))
    positions = torch.randint(0, 1000, (t,), generator=g)
    cos, sin = rope_cos_sin(positions, inv_freq, 1.0, torch.float32)
    slots = torch.randperm(blocks * bs, generator=g)[:t]
    k_ref, v_ref = torch.randn(blocks, bs, kvh, d, generator=g), torch.randn(blocks, bs, kvh, d, generator=g)
    k_cache, v_cache = k_ref.clone(), v_ref.clone()
    rotated = apply_rope(qkv[:, : h + kvh].double(), cos.double(), sin.double())
    write_kv(k_ref, slots, rotated[:, h:].float())
    write_kv(v_ref, slots, qkv[:, h + kvh :])
    out = qkv.clone()
    assert rope_store(out, h, kvh, cos, sin, k_cache, v_cache, slots)
    torch.testing.assert_close(out[:, : h + kvh].double(), rotated, atol=1e-6, rtol=1e-6)
    assert torch.equal(out[:, h + kvh :], qkv[:, h + kvh :])  # v untouched
    torch.testing.assert_close(k_cache, k_ref, atol=1e-6, rtol=1e-6)  # the other slots untouched, exactly
    assert torch.equal(v_cache, v_ref)


def test_kernels_refuse_what_they_cannot_run():
    x = torch.randn(4, 8)
    assert add_rms_norm(x.double(), None, torch.ones(8, dtype=torch.float64), 1e-6) is None  # float64
    assert add_rms_norm(x.t(), None, torch.ones(4), 1e-6) is None  # strided
    assert silu_mul(torch.randn(4, 7)) is None  # odd width: no gate/up halves
    with elementwise_kernels(False):
        assert add_rms_norm(x, None, torch.ones(8), 1e-6) is None
    qkv, cache = torch.randn(3, 4, 8), torch.zeros(2, 4, 1, 8)
    cos, sin = torch.ones(3, 1, 8), torch.zeros(3, 1, 8)
    before = qkv.clone()
    for bad in ([0, 1, 8], [-1, 0, 1]):  # slots outside the cache: nothing written, the caller's ops raise
        assert not rope_store(qkv, 2, 1, cos, sin, cache, cache.clone(), torch.tensor(bad))
    assert torch.equal(qkv, before) and not cache.any()


def _causal_reference(q, k, v, b):
    """float64 causal attention of ``b`` equal-length prompts, GQA by repeating each KV head for its queries, the
    mask and the softmax written out (no SDPA)."""
    t, h, d = q.shape
    n, group = t // b, h // k.shape[1]
    out = torch.empty(t, h, v.shape[-1], dtype=torch.float64)
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    for i in range(b):
        rows = slice(i * n, (i + 1) * n)
        for hd in range(h):
            s = (q[rows, hd].double() @ k[rows, hd // group].double().T) * d**-0.5
            p = torch.exp(s.masked_fill(future, float("-inf")) - s.masked_fill(future, float("-inf")).amax(-1, True))
            out[rows, hd] = (p / p.sum(-1, keepdim=True)) @ v[rows, hd // group].double()
    return out


# SmolLM2-135M's prefill; two prompts with odd widths and dv != d; MHA; MQA (16 query heads per KV head: one
# position per micro-tile row block); one token; a prompt longer than a key block (online softmax rescaling)
@pytest.mark.parametrize("b,n,h,kvh,d,dv", [(1, 512, 9, 3, 64, 64), (2, 37, 4, 2, 24, 20), (3, 50, 4, 4, 32, 32),
                                          (1, 70, 16, 1, 16, 16), (1, 1, 2, 1, 8, 8), (1, 300, 2, 1, 8, 40)])
def test_causal_attention_matches_float64(b, n, h, kvh, d, dv):
    g = torch.Generator().manual_seed(n + h)
    if d == dv:  # views of one fused q/k/v output (strided rows), as the model passes them
        qkv = torch.randn(b * n, h + 2 * kvh, d, generator=g) * 2
        q, k, v = qkv[:, :h], qkv[:, h : h + kvh], qkv[:, h + kvh :]
    else:
        q, k = torch.randn(b * n, h, d, generator=g) * 2, torch.randn(b * n, kvh, d, generator=g) * 2
        v = torch.randn(b * n, kvh, dv, generator=g)
    out = causal_attention(q, k, v, b, d**-0.5)
    assert out.shape == (b * n, h, dv) and out.is_contiguous()
    ref = _causal_reference(q, k, v, b)
    # float32 rounding of scores up to ~±10 (q, k scaled by 2): SDPA's float32 flash kernel lands within 1.1e-5 too
    torch.testing.assert_close(out.double(), ref, atol=3e-5, rtol=1e-5)
    with elementwise_kernels(False):
        sdpa = fresh_prefill_attention(q, k, v, b, d**-0.5)
    torch.testing.assert_close(out, sdpa, atol=3e-5, rtol=1e-5)


# a later chunk after one key block and more (online rescaling across the prefix/chunk boundary); two chunks after
# odd prefixes with dv != d; MQA with MLA's latent widths (d 72 = 64 + 8, dv 64); a one-token chunk
@pytest.mark.parametrize("b,n,prefix,h,kvh,d,dv", [(1, 200, 300, 9, 3, 64, 64), (2, 37, 19, 4, 2, 24, 20),
                                                   (1, 40, 130, 4, 1, 72, 64), (1, 1, 9, 2, 1, 8, 8)])
def test_causal_attention_with_a_cached_prefix_matches_float64(b, n, prefix, h, kvh, d, dv):
    """``prefix``: each of ``b`` chunks of ``n`` queries after ``prefix`` cached keys, over its whole context (the
    chunk's own keys last); query i sees keys 0 .. prefix + i. Against float64 with the mask written out."""
    g = torch.Generator().manual_seed(n + prefix)
    ctx = prefix + n
    q = torch.randn(b * n, h, d, generator=g) * 2
    k = torch.randn(b * ctx, kvh, d, generator=g) * 2
    v = torch.randn(b * ctx, kvh, dv, generator=g)
    out = causal_attention(q, k, v, b, d**-0.5, prefix=prefix)
    assert out is not None and out.shape == (b * n, h, dv)
    group = h // kvh
    ref = torch.empty(b * n, h, dv, dtype=torch.float64)
    hidden = torch.arange(ctx)[None, :] > (prefix + torch.arange(n))[:, None]
    for i in range(b):
        qs, ks, vs = q[i * n : (i + 1) * n].double(), k[i * ctx : (i + 1) * ctx].double(), v[i * ctx : (i + 1) * ctx]
        for hd in range(h):
            sc = (qs[:, hd] @ ks[:, hd // group].T * d**-0.5).masked_fill(hidden, float("-inf"))
            pr = torch.softmax(sc, -1)
            ref[i * n : (i + 1) * n, hd] = pr @ vs[:, hd // group].double()
    torch.testing.assert_close(out.double(), ref, atol=3e-5, rtol=1e-5)
    assert causal_attention(q, k[: b * n], v[: b * n], b, d**-0.5, prefix=prefix) is None  # keys != context


def test_causal_attention_refuses_what_it_cannot_run():
    q, k = torch.randn(8, 4, 16), torch.randn(8, 2, 16)
    assert causal_attention(q.double(), k.double(), k.double(), 1, 0.25) is None  # float64: SDPA runs
    assert causal_attention(q.transpose(0, 1).contiguous().transpose(0, 1), k, k, 1, 0.25) is None  # heads strided
    assert causal_attention(torch.randn(8, 3, 16), k, k, 1, 0.25) is None  # 3 query heads over 2 KV heads
    assert causal_attention(q, k, k, 3, 0.25) is None  # 8 rows are not 3 equal prompts
    with elementwise_kernels(False):
        assert causal_attention(q, k, k, 1, 0.25) is None
    assert causal_attention(q, k, k, 2, 0.25) is not None


def _prefill_logits(backend: TorchBackend, prompt: list[int]) -> torch.Tensor:
    """The prompt in two chunks (a fresh prefix, then new tokens after it) over scattered blocks."""
    table = [7, 2, 11, 5, 0]
    first = backend.runner.forward([SeqSlice(0, 10, table)], prompt[:10], list(range(10)))
    rest = backend.runner.forward([SeqSlice(10, len(prompt) - 10, table)], prompt[10:], list(range(len(prompt) - 10)))
    return torch.cat([first, rest])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_pytorch_path_with_kernels_matches_transformers(family, tiny_model):
    """The PyTorch path (fused decode kernel off) with and without the elementwise kernels: prefill logits
    against transformers and each other, and greedy generation of a batch token for token."""
    hf, path = tiny_model(family)
    backend = TorchBackend(path)
    backend.set_decode_policy(PYTORCH_ONLY)
    backend.num_kv_blocks(4)
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, 128, (17,), generator=g).tolist()
    fused = _prefill_logits(backend, prompt)
    with elementwise_kernels(False):
        plain = _prefill_logits(backend, prompt)
    with torch.no_grad():
        ref = hf(torch.tensor([prompt])).logits[0]
    torch.testing.assert_close(fused, ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(fused, plain, atol=2e-5, rtol=2e-5)
    prompts = [torch.randint(0, 128, (n,), generator=g).tolist() for n in (3, 9, 17)]
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=8)
    backend = TorchBackend(path)
    backend.set_decode_policy(PYTORCH_ONLY)
    outs = generate_tokens(backend, prompts, SamplingParams(max_tokens=16, temperature=0.0), cfg)
    for p, out in zip(prompts, outs):
        assert out == hf_greedy(hf, p, 16)


def test_no_compiler_falls_back_to_pytorch_ops(tiny_model, monkeypatch):
    hf, path = tiny_model("llama")
    backend = TorchBackend(path)
    backend.set_decode_policy(PYTORCH_ONLY)
    backend.num_kv_blocks(4)
    prompt = list(range(3, 20))
    fused = _prefill_logits(backend, prompt)
    monkeypatch.setattr(elementwise, "_library", lambda: None)
    assert silu_mul(torch.randn(2, 8)) is None
    torch.testing.assert_close(_prefill_logits(backend, prompt), fused, atol=2e-5, rtol=2e-5)
