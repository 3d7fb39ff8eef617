"""The fused one-token CPU decode kernel (jalapeno/kernels/cpu_decode.c via backends/torch/fused_decode.py).

References: the PyTorch path of the same model (the kernel is an optimisation of it) and Hugging Face
transformers' logits for the same token (independent). Covers q/k/v biases (Qwen2), QK-norm (Qwen3),
llama3 RoPE scaling, tied embeddings, dims that are not multiples of the kernel's 8-wide vectors, contexts
over several non-contiguous blocks, 1 and 2 threads, stale plans, and the fallback when no compiler exists.
"""

from __future__ import annotations

import logging

import pytest
import torch
import transformers

from jalapeno.backends.torch import fused_decode as fd
from jalapeno.backends.torch.attention import SeqSlice
from jalapeno.backends.torch.backend import TorchBackend
from jalapeno.backends.torch.generate import generate_tokens
from jalapeno.backends.torch.models.layers import set_weight_layout
from jalapeno.backends.torch.runner import PYTORCH_ONLY, DecodePolicy
from jalapeno.engine import EngineConfig, SamplingParams
from jalapeno.errors import JalapenoError
from jalapeno.kernels import cpu_build

from jalapeno.testing.torch_models import BASE, hf_greedy

DENSE = ("llama", "qwen2", "qwen3")
TABLE = [9, 2, 14, 5, 0, 11, 3]  # non-contiguous blocks, in no order


def _counting(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = fd.fused_decode_step

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr("jalapeno.backends.torch.runner.fused_decode_step", spy)
    return calls


def _decode_logits(backend: TorchBackend, prompt: list[int], fused: bool, threads: int = 1) -> torch.Tensor:
    """Prefill ``prompt[:-1]`` over TABLE (block size 4), then the last token as a one-token decode step."""
    runner = backend.runner
    runner.policy = DecodePolicy() if fused else PYTORCH_ONLY
    n = len(prompt) - 1
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        runner.forward([SeqSlice(0, n, TABLE)], prompt[:n], [n - 1])
        return runner.forward([SeqSlice(n, 1, TABLE)], prompt[n:], [0])
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("family", DENSE)
@pytest.mark.parametrize("threads", [1, 2])
def test_fused_step_matches_pytorch_path_and_transformers(family, threads, tiny_model, monkeypatch):
    hf, path = tiny_model(family)
    backend = TorchBackend(path, num_blocks=16)
    backend.num_kv_blocks(4)
    prompt = torch.randint(0, 128, (23,), generator=torch.Generator().manual_seed(5)).tolist()  # 6 blocks
    calls = _counting(monkeypatch)
    fused = _decode_logits(backend, prompt, fused=True, threads=threads)
    assert len(calls) == 2  # the 22-token prefill (one row per token) and the decode step ran the kernel
    ref = _decode_logits(backend, prompt, fused=False, threads=threads)
    assert len(calls) == 2
    torch.testing.assert_close(fused, ref, atol=2e-5, rtol=2e-5)
    with torch.no_grad():
        hf_logits = hf(torch.tensor([prompt])).logits[0, -1:]
    torch.testing.assert_close(fused, hf_logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", DENSE)
def test_batched_decode_step_matches_pytorch_path_and_transformers(family, tiny_model, monkeypatch):
    """13 sequences of different lengths (tiles of 8, 4 and 1 rows in the kernel's GEMM), each over its own
    scattered blocks, decode one token each in one step."""
    hf, path = tiny_model(family)
    backend = TorchBackend(path, num_blocks=104)
    backend.num_kv_blocks(4)
    runner, model = backend.runner, backend.model
    g = torch.Generator().manual_seed(9)
    lens = [5, 17, 9, 30, 3, 12, 25, 7, 19, 4, 28, 11, 6]
    prompts = [torch.randint(0, 128, (n,), generator=g).tolist() for n in lens]
    perm = torch.randperm(104, generator=g).tolist()
    tables = [perm[8 * i : 8 * i + 8] for i in range(len(lens))]
    calls = _counting(monkeypatch)
    out = {}
    for fused in (True, False):
        runner.policy = DecodePolicy() if fused else PYTORCH_ONLY
        for p, t in zip(prompts, tables):
            runner.forward([SeqSlice(0, len(p) - 1, t)], p[:-1], [len(p) - 2])
        slices = [SeqSlice(len(p) - 1, 1, t) for p, t in zip(prompts, tables)]
        out[fused] = runner.forward(slices, [p[-1] for p in prompts], list(range(len(prompts))))
    assert len(calls) == len(prompts) + 1  # the prefills (several tokens, one sequence) and the decode step
    torch.testing.assert_close(out[True], out[False], atol=2e-5, rtol=2e-5)
    for i, p in enumerate(prompts):
        with torch.no_grad():
            ref = hf(torch.tensor([p])).logits[0, -1]
        torch.testing.assert_close(out[True][i], ref, atol=1e-4, rtol=1e-4)
    # a subset of rows asked for, in another order
    runner.policy = DecodePolicy()
    for p, t in zip(prompts, tables):
        runner.forward([SeqSlice(0, len(p) - 1, t)], p[:-1], [len(p) - 2])
    sub = runner.forward(slices, [p[-1] for p in prompts], [3, 0])
    torch.testing.assert_close(sub, out[False][[3, 0]], atol=2e-5, rtol=2e-5)


def test_decode_batches_above_the_cap_take_the_pytorch_path(tiny_model, monkeypatch):
    _, path = tiny_model("llama")
    backend = TorchBackend(path, num_blocks=fd.MAX_BATCH + 8)
    backend.num_kv_blocks(4)
    calls = _counting(monkeypatch)
    n = fd.MAX_BATCH + 1
    slices = [SeqSlice(0, 1, [i]) for i in range(n)]
    ids = [i % 100 for i in range(n)]
    backend.runner.forward(slices, ids, list(range(n)))
    assert not calls
    backend.runner.forward(slices[: fd.MAX_BATCH], ids[: fd.MAX_BATCH], list(range(fd.MAX_BATCH)))
    assert len(calls) == 1


@pytest.mark.parametrize("cap", [0, 3, 5])
def test_runner_choice_follows_the_policy_crossover(cap, tiny_model, monkeypatch):
    """The runner sends a pure decode step to the kernel exactly when it has at most ``fused_max_batch``
    sequences; both paths give the same logits."""
    _, path = tiny_model("llama")
    backend = TorchBackend(path, num_blocks=16, decode_policy=DecodePolicy(fused_max_batch=cap))
    backend.num_kv_blocks(4)
    calls = _counting(monkeypatch)
    for n in (1, 3, 4, 5, 6):
        slices = [SeqSlice(0, 1, [i]) for i in range(n)]
        before = len(calls)
        out = backend.runner.forward(slices, list(range(n)), list(range(n)))
        assert (len(calls) > before) == (n <= cap), n
        backend.runner.policy = PYTORCH_ONLY
        ref = backend.runner.forward(slices, list(range(n)), list(range(n)))
        backend.runner.policy = DecodePolicy(fused_max_batch=cap)
        torch.testing.assert_close(out, ref, atol=2e-5, rtol=2e-5)


def test_decode_policy_takes_only_pure_cpu_decode_steps():
    policy = DecodePolicy(fused_max_batch=8)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert policy.wants_fused(cpu, 8, 1) and policy.wants_fused(cpu, 1, 1)
    assert not policy.wants_fused(cpu, 9, 1)  # past the crossover
    assert policy.wants_fused(cpu, 8, 2)  # a verification or short prefill step: one kernel row per token
    assert not policy.wants_fused(cpu, 9, 3)
    assert not policy.wants_fused(cuda, 1, 1)
    assert not PYTORCH_ONLY.wants_fused(cpu, 1, 1)
    assert DecodePolicy().fused_max_batch == fd.MAX_BATCH  # the measured default
    with pytest.raises(JalapenoError, match="fused_max_batch"):
        DecodePolicy(fused_max_batch=-1)
    with pytest.raises(JalapenoError, match="panel_min_rows"):
        DecodePolicy(panel_min_rows=0)


def test_odd_dimensions(tmp_path, monkeypatch):
    """Hidden 40, head_dim 10, intermediate 52, vocab 131: every vector loop has a scalar tail. Non-zero
    q/k/v biases (HF initialises them to zero, which would hide a dropped bias)."""
    cfg = transformers.Qwen2Config(**{**BASE, "vocab_size": 131, "hidden_size": 40, "intermediate_size": 52,
                                      "num_attention_heads": 4, "num_key_value_heads": 2})
    torch.manual_seed(3)
    hf = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in hf.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    hf.save_pretrained(tmp_path)
    backend = TorchBackend(tmp_path, num_blocks=24)
    backend.num_kv_blocks(4)
    prompt = torch.randint(0, 131, (18,), generator=torch.Generator().manual_seed(1)).tolist()
    calls = _counting(monkeypatch)
    fused = _decode_logits(backend, prompt, fused=True, threads=2)
    assert calls
    with torch.no_grad():
        ref = hf(torch.tensor([prompt])).logits[0, -1:]
    torch.testing.assert_close(fused, ref, atol=1e-4, rtol=1e-4)
    # 11 sequences (the kernel's pairs-of-rows path, odd row counts, a remainder of 3 sequences)
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(0, 131, (int(n),), generator=g).tolist() for n in torch.randint(2, 9, (11,), generator=g)]
    slices = []
    for i, p in enumerate(prompts):
        table = [2 * i, 2 * i + 1]  # block size 4: up to 8 tokens in two blocks of its own
        backend.runner.forward([SeqSlice(0, len(p) - 1, table)], p[:-1], [len(p) - 2])
        slices.append(SeqSlice(len(p) - 1, 1, table))
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = backend.runner.forward(slices, [p[-1] for p in prompts], list(range(len(prompts))))
    finally:
        torch.set_num_threads(old)
    for i, p in enumerate(prompts):
        with torch.no_grad():
            torch.testing.assert_close(out[i], hf(torch.tensor([p])).logits[0, -1], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", DENSE)
def test_single_sequence_generation_uses_kernel_and_matches_transformers(family, tiny_model, monkeypatch):
    hf, path = tiny_model(family)
    backend = TorchBackend(path)  # "batched" layout: row-major weights, the kernel's layout
    calls = _counting(monkeypatch)
    prompt = [3, 17, 99, 4, 56, 8, 21]
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=1)
    (out,) = generate_tokens(backend, [prompt], SamplingParams(max_tokens=24, temperature=0.0), cfg)
    assert len(calls) == 24  # the 7-token prefill and every decode step after it
    assert out == hf_greedy(hf, prompt, 24)


def _scattered_prompts(n: int, seed: int) -> tuple[list[list[int]], list[list[int]]]:
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 128, (int(k),), generator=g).tolist() for k in torch.randint(3, 20, (n,), generator=g)]
    perm = torch.randperm(8 * n, generator=g).tolist()
    return prompts, [perm[8 * i : 8 * i + 8] for i in range(n)]


@pytest.mark.parametrize("family", DENSE)
@pytest.mark.parametrize("rows", [21, 40])
def test_panel_and_dot_product_gemms_agree(family, rows, tiny_model):
    """A decode step of ``rows`` sequences (21: one panel of 16 and a rest of 5 with 8-wide vectors; 40: two
    panels and a rest of 8) through the kernel's outer-product panel GEMMs and through its dot-product tiles:
    the same logits, equal to the PyTorch path and to transformers."""
    hf, path = tiny_model(family)
    backend = TorchBackend(path, num_blocks=8 * rows)
    backend.num_kv_blocks(4)
    runner = backend.runner
    prompts, tables = _scattered_prompts(rows, rows)
    out = {}
    for name, policy in (("panels", DecodePolicy(fused_max_batch=64, panel_min_rows=1)),
                         ("dot", DecodePolicy(fused_max_batch=64, panel_min_rows=1000)), ("torch", PYTORCH_ONLY)):
        runner.policy = policy
        for p, t in zip(prompts, tables):
            runner.forward([SeqSlice(0, len(p) - 1, t)], p[:-1], [len(p) - 2])
        slices = [SeqSlice(len(p) - 1, 1, t) for p, t in zip(prompts, tables)]
        out[name] = runner.forward(slices, [p[-1] for p in prompts], list(range(rows)))
    torch.testing.assert_close(out["panels"], out["dot"], atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(out["panels"], out["torch"], atol=2e-5, rtol=2e-5)
    for i in (0, 7, rows - 1):
        with torch.no_grad():
            ref = hf(torch.tensor([prompts[i]])).logits[0, -1]
        torch.testing.assert_close(out["panels"][i], ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", DENSE)
@pytest.mark.parametrize("panel_min", [1, 1000])
def test_verification_step_matches_transformers(family, panel_min, tiny_model, monkeypatch):
    """A speculative verification step: 5 sequences feed 5 tokens each (25 kernel rows, each attending to its
    sequence's earlier rows of the same step), logits for every position; a subset of rows asked for."""
    hf, path = tiny_model(family)
    backend = TorchBackend(path, num_blocks=40)
    backend.num_kv_blocks(4)
    runner = backend.runner
    prompts, tables = _scattered_prompts(5, 11)
    calls = _counting(monkeypatch)
    out = {}
    for fused in (True, False):
        runner.policy = DecodePolicy(fused_max_batch=32, panel_min_rows=panel_min) if fused else PYTORCH_ONLY
        slices, fed = [], []
        for p, t in zip(prompts, tables):
            runner.forward([SeqSlice(0, len(p) - 5, t)], p[:-5], [len(p) - 6])
            slices.append(SeqSlice(len(p) - 5, 5, t))
            fed += p[-5:]
        out[fused] = runner.forward(slices, fed, list(range(25)))
    assert len(calls) == 6  # five prefills and the verification step
    torch.testing.assert_close(out[True], out[False], atol=2e-5, rtol=2e-5)
    for i, p in enumerate(prompts):
        with torch.no_grad():
            ref = hf(torch.tensor([p])).logits[0, -5:]
        torch.testing.assert_close(out[True][5 * i : 5 * i + 5], ref, atol=1e-4, rtol=1e-4)
    runner.policy = DecodePolicy(fused_max_batch=32, panel_min_rows=panel_min)
    sub = runner.forward(slices, fed, [24, 3, 10])
    torch.testing.assert_close(sub, out[False][[24, 3, 10]], atol=2e-5, rtol=2e-5)
    assert runner.forward(slices, fed, []).shape == (0, sub.shape[1])  # a chunk short of its prompt's end


@pytest.mark.parametrize("family", ["gpt_oss", "mixtral", "qwen3_moe", "deepseek_v3"])
def test_other_families_keep_the_pytorch_path(family, tiny_model):
    _, path = tiny_model(family)
    backend = TorchBackend(path)
    backend.num_kv_blocks(4)
    assert not fd.supports_fused_decode(backend.model)
    assert fd.plan_for(backend.model, backend.runner.kv_cache, 4) is None


def test_plan_follows_the_model(tiny_model):
    """A re-laid-out, re-loaded or swapped model never runs on a stale plan."""
    hf, path = tiny_model("llama")
    backend = TorchBackend(path, num_blocks=16)
    backend.num_kv_blocks(4)
    model, caches = backend.model, backend.runner.kv_cache
    plan = fd.plan_for(model, caches, 4)
    assert plan is not None and fd.plan_for(model, caches, 4, plan) is plan  # reused while nothing changed
    assert fd.plan_for(model, caches, 8, plan) is None or fd.plan_for(model, caches, 8, plan) is not plan
    set_weight_layout(model, "single")  # input-major weights: not the kernel's layout
    assert fd.plan_for(model, caches, 4, plan) is None and not fd.supports_fused_decode(model)
    set_weight_layout(model, "batched")
    fresh = fd.plan_for(model, caches, 4, plan)
    assert fresh is not None and fresh is not plan
    # in-place weight writes reach the kernel (the plan points at the model's storage)
    prompt = list(range(1, 12))
    before = _decode_logits(backend, prompt, fused=True)
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.mul_(0.5)
    after = _decode_logits(backend, prompt, fused=True)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, _decode_logits(backend, prompt, fused=False), atol=2e-5, rtol=2e-5)
    # a swapped module (here a plain Linear with new weights, un-fusing q/k/v) drops the plan for that model
    attn = model.model.layers[0].self_attn
    new = torch.nn.Linear(attn.q_proj.in_features, attn.q_proj.out_features, bias=False)
    attn.q_proj = new
    assert fd.plan_for(model, caches, 4, fresh) is None
    torch.testing.assert_close(
        _decode_logits(backend, prompt, fused=True), _decode_logits(backend, prompt, fused=False)
    )


def test_no_compiler_falls_back_with_a_warning(tiny_model, tmp_path, monkeypatch, caplog):
    hf, path = tiny_model("qwen3")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("JALAPENO_CACHE", str(tmp_path / "cache"))
    cpu_build.load_kernel.cache_clear()
    try:
        with pytest.raises(cpu_build.KernelUnavailable, match="no C compiler"):
            cpu_build.load_kernel("cpu_decode")
        backend = TorchBackend(path)
        calls = _counting(monkeypatch)
        prompt = [5, 6, 7, 8, 9]
        cfg = EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=1)
        with caplog.at_level(logging.WARNING):
            (out,) = generate_tokens(backend, [prompt], SamplingParams(max_tokens=8, temperature=0.0), cfg)
        assert not calls and "kernel unavailable" in caplog.text
        assert out == hf_greedy(hf, prompt, 8)
    finally:
        cpu_build.load_kernel.cache_clear()


def test_kernel_build_is_cached_on_disk(tmp_path, monkeypatch):
    if cpu_build.find_compiler() is None:
        pytest.skip("no C compiler on this machine")
    monkeypatch.setenv("JALAPENO_CACHE", str(tmp_path))
    cpu_build.load_kernel.cache_clear()
    try:
        cpu_build.load_kernel("cpu_decode")
        built = sorted((tmp_path / "kernels").glob("cpu_decode-*.so"))
        assert len(built) == 1
        stamp = built[0].stat().st_mtime_ns
        cpu_build.load_kernel.cache_clear()
        cpu_build.load_kernel("cpu_decode")  # a new process would load, not rebuild
        assert sorted((tmp_path / "kernels").glob("cpu_decode-*.so")) == built
        assert built[0].stat().st_mtime_ns == stamp
    finally:
        cpu_build.load_kernel.cache_clear()
