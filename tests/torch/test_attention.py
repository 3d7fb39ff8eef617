"""Paged attention (PyTorch path) against dense float64 numpy attention computed from the unpaged K/V."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from jalapeno.backends.torch.attention import (
    SeqSlice,
    StepMetadata,
    paged_attention,
    paged_attention_ref,
    write_kv,
)


def numpy_attention(q, k, v, q_pos, scale, window=None, sinks=None):
    """q [n, H, D], k/v [L, KVH, D] (positions 0..L-1) -> [n, H, Dv], float64, explicit loops."""
    n, h, _ = q.shape
    group = h // k.shape[1]
    out = np.zeros((n, h, v.shape[-1]))
    for i in range(n):
        for hh in range(h):
            vis = [j for j in range(k.shape[0]) if j <= q_pos[i] and (window is None or q_pos[i] - j < window)]
            logits = np.array([q[i, hh] @ k[j, hh // group] for j in vis]) * scale
            extra = [] if sinks is None else [sinks[hh]]
            allv = np.concatenate([logits, extra])
            p = np.exp(allv - allv.max())
            p = p / p.sum()
            out[i, hh] = p[: len(vis)] @ v[vis, hh // group]
    return out


@pytest.mark.parametrize("attend", [paged_attention_ref, paged_attention], ids=["padded", "grouped"])
@pytest.mark.parametrize("window,sinks", [(None, False), (4, True)])
def test_mixed_prefill_and_decode_batch(window, sinks, attend):
    """Both the padded reference and the dispatcher (which attends group by group: decode rows together, each
    prefill chunk length alone, nothing padded) equal float64 attention on a mixed step."""
    g = torch.Generator().manual_seed(0)
    h, kvh, d, bs, nblocks = 4, 2, 8, 4, 40
    k_cache = torch.zeros(nblocks, bs, kvh, d, dtype=torch.float64)
    v_cache = torch.zeros_like(k_cache)
    perm = torch.randperm(nblocks, generator=g).tolist()
    # (cached tokens, new tokens): decodes, a fresh prefill, prefill chunks after a cached prefix
    plan = [(9, 1), (0, 6), (5, 7), (2, 1), (3, 6)]
    slices, full_k, full_v, qs = [], [], [], []
    for cached, new in plan:
        total = cached + new
        nb = -(-total // bs)
        table, perm = perm[:nb], perm[nb:]
        k = torch.randn(total, kvh, d, generator=g, dtype=torch.float64)
        v = torch.randn(total, kvh, d, generator=g, dtype=torch.float64)
        if cached:  # the prefix is already in the cache from earlier steps
            pre = StepMetadata.build([SeqSlice(0, cached, table)], bs, torch.device("cpu"))
            write_kv(k_cache, pre.slot_mapping, k[:cached])
            write_kv(v_cache, pre.slot_mapping, v[:cached])
        slices.append(SeqSlice(cached, new, table))
        full_k.append(k)
        full_v.append(v)
        qs.append(torch.randn(new, h, d, generator=g, dtype=torch.float64))
    meta = StepMetadata.build(slices, bs, torch.device("cpu"))
    new_k = torch.cat([k[c:] for k, (c, _) in zip(full_k, plan)])
    new_v = torch.cat([v[c:] for v, (c, _) in zip(full_v, plan)])
    write_kv(k_cache, meta.slot_mapping, new_k)
    write_kv(v_cache, meta.slot_mapping, new_v)
    s = torch.randn(h, generator=g, dtype=torch.float64) if sinks else None
    got = attend(torch.cat(qs), k_cache, v_cache, meta, 0.35, window, s)
    row = 0
    for (cached, new), q, k, v in zip(plan, qs, full_k, full_v):
        ref = numpy_attention(
            q.numpy(), k.numpy(), v.numpy(), list(range(cached, cached + new)), 0.35, window,
            None if s is None else s.numpy(),
        )
        np.testing.assert_allclose(got[row : row + new].numpy(), ref, rtol=1e-10, atol=1e-10)
        row += new


def test_groups_of_a_mixed_step_pad_nothing():
    """A 6-token prompt beside three decode rows: two groups, each with one query length and the context of its
    own longest sequence (the decode rows are not padded to the prompt's 6 queries or its keys)."""
    slices = [SeqSlice(9, 1, [0, 1, 2]), SeqSlice(0, 6, [3, 4]), SeqSlice(2, 1, [5]), SeqSlice(4, 1, [6, 7])]
    meta = StepMetadata.build(slices, 4, torch.device("cpu"))
    groups = {sub.max_q: (_rows(rows), sub) for rows, sub in meta.groups()}
    assert sorted(groups) == [1, 6]
    rows, dec = groups[1]
    assert rows == [0, 7, 8] and dec.query_lens == [1, 1, 1] and dec.pad_index is None
    assert dec.contexts == [10, 3, 5] and dec.gather_slots.shape == (3, 10)
    rows, pre = groups[6]
    assert rows == [1, 2, 3, 4, 5, 6] and pre.starts == [0] and pre.gather_slots.shape == (1, 6)
    assert pre.slot_mapping.tolist() == meta.slot_mapping[1:7].tolist()


def _rows(rows) -> list[int]:
    return list(range(rows.start, rows.stop)) if isinstance(rows, slice) else rows.tolist()


def _mixed_step(plan, dtype, seed=0):
    """Random K/V per sequence (``plan``: (cached tokens, new tokens) each), the cached part written to a paged
    cache in shuffled blocks, the new part written as a step would; returns (meta, q, new_k, new_v, caches, per
    sequence (q, full k, full v))."""
    g = torch.Generator().manual_seed(seed)
    h, kvh, d, bs, nblocks = 6, 2, 16, 4, 64
    k_cache = torch.zeros(nblocks, bs, kvh, d, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    perm = torch.randperm(nblocks, generator=g).tolist()
    slices, seqs = [], []
    for cached, new in plan:
        nb = -(-(cached + new) // bs)
        table, perm = perm[:nb], perm[nb:]
        k = torch.randn(cached + new, kvh, d, generator=g, dtype=torch.float64)
        v = torch.randn(cached + new, kvh, d, generator=g, dtype=torch.float64)
        if cached:
            pre = StepMetadata.build([SeqSlice(0, cached, table)], bs, torch.device("cpu"))
            write_kv(k_cache, pre.slot_mapping, k[:cached])
            write_kv(v_cache, pre.slot_mapping, v[:cached])
        slices.append(SeqSlice(cached, new, table))
        seqs.append((torch.randn(new, h, d, generator=g, dtype=torch.float64), k, v))
    meta = StepMetadata.build(slices, bs, torch.device("cpu"))
    new_k = torch.cat([k[c:] for (_, k, _), (c, _) in zip(seqs, plan)]).to(dtype)
    new_v = torch.cat([v[c:] for (_, _, v), (c, _) in zip(seqs, plan)]).to(dtype)
    write_kv(k_cache, meta.slot_mapping, new_k)
    write_kv(v_cache, meta.slot_mapping, new_v)
    q = torch.cat([x for x, _, _ in seqs]).to(dtype)
    return meta, q, new_k, new_v, (k_cache, v_cache), seqs


#: decode rows, fresh prompts of three lengths (two of one length: one group), later chunks (one of a fresh
#: prompt's length: a group of its own) -- the steps a closed loop at concurrency >= 4 produces
MIXED_PLAN = [(9, 1), (0, 6), (5, 6), (0, 9), (2, 1), (0, 6), (3, 7), (0, 3), (12, 1)]


@pytest.mark.parametrize("window,sinks,fresh_calls", [
    (None, False, 3),  # fresh groups 6 (x2), 9, 3: the causal path on their own K/V
    (16, False, 3),  # a window longer than every fresh prompt changes nothing for them
    (5, False, 1),  # the 6- and 9-token prompts outgrow the window: the masked path (only the 3-token one is causal)
    (None, True, 0),  # sinks (GPT-OSS): always the masked path
])
def test_fresh_prompts_in_a_mixed_step_take_the_causal_path_and_equal_float64(window, sinks, fresh_calls,
                                                                              monkeypatch):
    """Fresh prompts beside decode rows and later chunks: each group of fresh prompts runs causally on its own new
    K/V (no gather, no mask), the rest on the paged path, and every row equals float64 attention over the
    sequence's whole unpaged K/V (and the padded reference path)."""
    from jalapeno.backends.torch import attention as att

    calls = []
    real = att.fresh_prefill_attention
    monkeypatch.setattr(att, "fresh_prefill_attention", lambda q, k, v, b, scale: calls.append((q.shape[0], b))
                        or real(q, k, v, b, scale))
    meta, q, nk, nv, (kc, vc), seqs = _mixed_step(MIXED_PLAN, torch.float64)
    s = torch.randn(q.shape[1], generator=torch.Generator().manual_seed(1), dtype=torch.float64) if sinks else None
    got = paged_attention(q, kc, vc, meta, 0.3, window, s, new_kv=(nk, nv))
    assert len(calls) == fresh_calls
    if fresh_calls == 3:
        assert sorted(calls) == [(3, 1), (9, 1), (12, 2)]
    row = 0
    for (cached, new), (qs, k, v) in zip(MIXED_PLAN, seqs):
        ref = numpy_attention(qs.numpy(), k.numpy(), v.numpy(), list(range(cached, cached + new)), 0.3, window,
                              None if s is None else s.numpy())
        np.testing.assert_allclose(got[row : row + new].numpy(), ref, rtol=1e-10, atol=1e-10)
        row += new
    padded = paged_attention_ref(q, kc, vc, meta, 0.3, window, s)
    np.testing.assert_allclose(got.numpy(), padded.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("plan", [MIXED_PLAN, [(5, 6), (0, 6), (9, 6), (5, 6), (4, 1)]], ids=["mixed", "equal"])
def test_fresh_prompts_and_later_chunks_float32_c_kernel(plan, monkeypatch):
    """float32, the engine's CPU dtype: the fresh groups run the C flash kernel on strided K/V rows (views of one
    fused q/k/v output, as the model passes them), each group of later chunks with one prefix the kernel over its
    gathered context (key offset: no mask), decode rows the paged path; equal to float64 attention to float32
    rounding. ``equal``: four 6-token chunks (one fresh, two after 5 cached tokens, one after 9) beside a decode row."""
    from jalapeno.backends.torch import attention as att
    from jalapeno.backends.torch.elementwise import causal_attention

    calls = []
    real = att.later_chunk_attention
    monkeypatch.setattr(att, "later_chunk_attention", lambda q, kc, vc, meta, scale: calls.append(
        (q.shape[0], meta.starts)) or real(q, kc, vc, meta, scale))
    meta, q, nk, nv, (kc, vc), seqs = _mixed_step(plan, torch.float32, seed=2)
    h, kvh, d = q.shape[1], nk.shape[1], q.shape[2]
    fused = torch.cat([q.flatten(1), nk.flatten(1), nv.flatten(1)], dim=1)  # [T, (h + 2 kvh) d]
    qv = fused[:, : h * d].view(-1, h, d)
    kv = fused[:, h * d : (h + kvh) * d].view(-1, kvh, d)
    vv = fused[:, (h + kvh) * d :].view(-1, kvh, d)
    if causal_attention(qv[:6], kv[:6], vv[:6], 1, 0.3) is None:
        pytest.skip("the C kernel is not available here")
    got = paged_attention(qv, kc, vc, meta, 0.3, new_kv=(kv, vv))
    later = sorted((new * plan.count((c, new)), [c] * plan.count((c, new))) for c, new in set(plan) if c and new > 1)
    assert sorted(calls) == later
    row = 0
    for (cached, new), (qs, k, v) in zip(plan, seqs):
        ref = numpy_attention(qs.float().double().numpy(), k.float().double().numpy(), v.float().double().numpy(),
                              list(range(cached, cached + new)), 0.3)
        np.testing.assert_allclose(got[row : row + new].numpy(), ref, rtol=1e-4, atol=1e-5)
        row += new


def test_equal_lengths_fresh_beside_a_later_chunk_are_split():
    """Two 6-token chunks, one fresh and one after 3 cached tokens (no padding, no decode row): two groups, the fresh
    one causal on its own K/V; every row equals float64 attention."""
    plan = [(3, 6), (0, 6)]
    meta, q, nk, nv, (kc, vc), seqs = _mixed_step(plan, torch.float64, seed=4)
    assert meta.pad_index is None and meta.mixed_starts and not meta.is_fresh
    kinds = sorted((sub.starts, _rows(rows)) for rows, sub in meta.groups())
    assert kinds == [([0], list(range(6, 12))), ([3], list(range(6)))]
    got = paged_attention(q, kc, vc, meta, 0.3, new_kv=(nk, nv))
    row = 0
    for (cached, new), (qs, k, v) in zip(plan, seqs):
        ref = numpy_attention(qs.numpy(), k.numpy(), v.numpy(), list(range(cached, cached + new)), 0.3)
        np.testing.assert_allclose(got[row : row + new].numpy(), ref, rtol=1e-10, atol=1e-10)
        row += new


def test_slot_mapping_follows_block_table():
    meta = StepMetadata.build([SeqSlice(3, 3, [7, 2]), SeqSlice(0, 2, [5])], 4, torch.device("cpu"))
    # positions 3,4,5 of seq 0 -> block 7 offset 3, block 2 offsets 0,1; seq 1 -> block 5 offsets 0,1
    assert meta.slot_mapping.tolist() == [7 * 4 + 3, 2 * 4 + 0, 2 * 4 + 1, 5 * 4 + 0, 5 * 4 + 1]
    assert meta.positions.tolist() == [3, 4, 5, 0, 1]


@pytest.mark.parametrize("window", [None, 5])
def test_single_sequence_decode_fast_path(window):
    """One sequence, one new token takes the mask-free path; it must equal float64 attention and the general
    masked path (run by pairing the same sequence with a second one)."""
    g = torch.Generator().manual_seed(3)
    h, kvh, d, bs = 6, 2, 8, 4
    k_cache = torch.randn(12, bs, kvh, d, generator=g, dtype=torch.float64)
    v_cache = torch.randn(12, bs, kvh, d, generator=g, dtype=torch.float64)
    table, ctx = [9, 3, 7], 11  # the new token sits at position 10
    q = torch.randn(1, h, d, generator=g, dtype=torch.float64)
    meta = StepMetadata.build([SeqSlice(ctx - 1, 1, table)], bs, torch.device("cpu"))
    got = paged_attention_ref(q, k_cache, v_cache, meta, 0.4, window)
    slots = [table[p // bs] * bs + p % bs for p in range(ctx)]
    k = k_cache.flatten(0, 1)[slots].numpy()
    v = v_cache.flatten(0, 1)[slots].numpy()
    ref = numpy_attention(q.numpy(), k, v, [ctx - 1], 0.4, window)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10, atol=1e-10)
    pair = StepMetadata.build([SeqSlice(ctx - 1, 1, table), SeqSlice(2, 1, [0])], bs, torch.device("cpu"))
    general = paged_attention_ref(torch.cat([q, q]), k_cache, v_cache, pair, 0.4, window)
    np.testing.assert_allclose(general[:1].numpy(), got.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seqs,window", [(1, None), (2, None), (2, 16), (1, 5)])
def test_fresh_prefill_path(seqs, window):
    """Equal-length prompts from position 0 attend causally over the step's own K/V (no gather, no mask) when
    the window reaches back to position 0; the result must equal float64 attention. A shorter window, a
    cached prefix or unequal lengths take the general path (checked against the same reference)."""
    g = torch.Generator().manual_seed(5)
    h, kvh, d, bs, n = 6, 2, 8, 4, 9
    k_cache = torch.zeros(20, bs, kvh, d, dtype=torch.float64)
    v_cache = torch.zeros_like(k_cache)
    tables = [[3, 11, 7], [0, 19, 4]][:seqs]
    meta = StepMetadata.build([SeqSlice(0, n, t) for t in tables], bs, torch.device("cpu"))
    assert meta.is_fresh
    q = torch.randn(seqs * n, h, d, generator=g, dtype=torch.float64)
    k = torch.randn(seqs * n, kvh, d, generator=g, dtype=torch.float64)
    v = torch.randn(seqs * n, kvh, d, generator=g, dtype=torch.float64)
    write_kv(k_cache, meta.slot_mapping, k)
    write_kv(v_cache, meta.slot_mapping, v)
    got = paged_attention(q, k_cache, v_cache, meta, 0.3, window, new_kv=(k, v))
    for i in range(seqs):
        rows = slice(i * n, (i + 1) * n)
        ref = numpy_attention(q[rows].numpy(), k[rows].numpy(), v[rows].numpy(), list(range(n)), 0.3, window)
        np.testing.assert_allclose(got[rows].numpy(), ref, rtol=1e-10, atol=1e-10)
    general = paged_attention_ref(q, k_cache, v_cache, meta, 0.3, window)
    np.testing.assert_allclose(got.numpy(), general.numpy(), rtol=1e-12, atol=1e-12)
    later = StepMetadata.build([SeqSlice(2, n - 2, tables[0])], bs, torch.device("cpu"))
    uneven = StepMetadata.build([SeqSlice(0, n, tables[0]), SeqSlice(0, n - 1, [9, 8, 6])], bs, torch.device("cpu"))
    assert not later.is_fresh and not uneven.is_fresh


@pytest.mark.parametrize("family", ["llama", "qwen3", "gpt_oss", "deepseek_v3"])
def test_engine_run_with_mixed_steps_matches_transformers(family, tiny_model, monkeypatch):
    """A whole engine run (PyTorch path, float32, small token budget, two sequences at a time) whose steps put fresh
    prompts beside decode rows and later chunks: greedy tokens equal transformers'. The paths were taken: fresh
    prompts inside mixed steps on their own K/V (not GPT-OSS: sinks; not DeepSeek: MLA passes no K/V) and later
    chunks through the kernel with a key offset (not GPT-OSS)."""
    from jalapeno.backends.torch import attention as att
    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.backends.torch.generate import generate_tokens
    from jalapeno.backends.torch.runner import PYTORCH_ONLY
    from jalapeno.engine import EngineConfig, SamplingParams
    from jalapeno.testing.torch_models import hf_greedy

    seen = {"grouped": 0, "fresh_in_mixed": 0, "later": 0}
    real_grouped, real_fresh, real_later = att.grouped_attention, att.fresh_prefill_attention, att.later_chunk_attention

    def grouped(*a, **k):
        seen["grouped"] += 1
        try:
            return real_grouped(*a, **k)
        finally:
            seen["grouped"] -= 1

    def fresh(*a, **k):
        seen["fresh_in_mixed"] += seen["grouped"] > 0
        return real_fresh(*a, **k)

    def later(*a, **k):
        out = real_later(*a, **k)
        seen["later"] += out is not None
        return out

    monkeypatch.setattr(att, "grouped_attention", grouped)
    monkeypatch.setattr(att, "fresh_prefill_attention", fresh)
    monkeypatch.setattr(att, "later_chunk_attention", later)
    hf, path = tiny_model(family)
    backend = TorchBackend(path)
    backend.set_decode_policy(PYTORCH_ONLY)
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 128, (n,), generator=g).tolist() for n in (5, 12, 7, 19, 7)]
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=10, max_num_seqs=3)
    outs = generate_tokens(backend, prompts, SamplingParams(max_tokens=6, temperature=0.0), cfg)
    for p, out in zip(prompts, outs):
        assert out == hf_greedy(hf, p, 6)
    assert (seen["fresh_in_mixed"] > 0) == (family in ("llama", "qwen3"))
    assert (seen["later"] > 0) == (family != "gpt_oss")
