"""Cost model vs hand counts from the published configs (FLOPs, bytes, KV, scales, collectives)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from perf_refdata import B200, DEEPSEEK_R1, GPT_OSS_120B, H200, H200_EFF, LLAMA_8B, LLAMA_70B, LLAMA_405B, chip

from jalapeno.hardware.schema import Efficiency
from jalapeno.perf import CostModel, Parallelism, Precision, StepShape

# --- Llama-3.1-8B config numbers (config.json) -------------------------------------------------
H, L, NH, NKV, D, I, V = 4096, 32, 32, 8, 128, 14336, 128256
LINEAR_PER_LAYER = H * (NH + 2 * NKV) * D + NH * D * H + 3 * H * I  # q,k,v,o + gate,up,down
NORMS = 2 * H * L + H
EMBED = V * H
LM_HEAD = V * H
TOTAL = L * LINEAR_PER_LAYER + NORMS + EMBED + LM_HEAD

BIG = chip("big", {"bf16": 1000}, [{"name": "hbm", "kind": "hbm", "gb": 1e6, "tbps": 5}], 450, 2.0, 0, 700)


def test_hand_count_matches_published_llama_8b():
    assert TOTAL == pytest.approx(8.03e9, rel=2e-3)


@pytest.mark.parametrize(
    "model,published",
    [(LLAMA_8B, 8.03e9), (LLAMA_70B, 70.6e9), (LLAMA_405B, 405.9e9), (DEEPSEEK_R1, 671e9), (GPT_OSS_120B, 116.8e9)],
)
def test_stored_bf16_weights_match_published_parameter_counts(model, published):
    cm = CostModel(model, BIG, precision=Precision("bf16"))
    assert cm.memory_plan().weight_bytes_per_chip / 2 == pytest.approx(published, rel=3e-3)


def test_llama8b_decode_batch1_is_weight_streaming():
    cm = CostModel(LLAMA_8B, H200, precision=Precision("bf16"))
    cost = cm.step(StepShape.from_lists(decode_ctx=[1]))
    # one token: 2 FLOPs per weight of every matmul (the embedding table is a lookup, not a matmul)
    flops_hand = 2 * (L * LINEAR_PER_LAYER + LM_HEAD)
    assert cost.flops == pytest.approx(flops_hand, rel=0.02)
    assert cost.flops == pytest.approx(2 * 8.03e9, rel=0.07)  # ~2 x params; the 0.53B-row embedding is not read
    # bytes: every weight once except the embedding table (one row is gathered)
    bytes_hand = 2 * (TOTAL - EMBED)
    assert cost.bytes == pytest.approx(bytes_hand, rel=0.01)
    assert cost.flops / cost.bytes == pytest.approx(1.0, abs=0.03)  # 2/b with b = 2 bytes
    # time: bytes at achievable HBM bandwidth (no overheads in this chip's efficiency)
    t_hand = bytes_hand / (4.8e12 * H200_EFF["memory"]["hbm"])
    assert cost.time_s == pytest.approx(t_hand, rel=0.01)
    bd = cm.breakdown(StepShape.from_lists(decode_ctx=[1]))
    for name in ("qkv_proj", "o_proj", "mlp", "lm_head"):
        assert bd.op(name).bound == "memory"
    assert sum(o.share for o in bd.ops) == pytest.approx(1.0)
    assert bd.time_s == pytest.approx(cost.time_s)
    assert bd.flops == pytest.approx(cost.flops)
    assert bd.total_bytes == pytest.approx(cost.bytes)


def test_overheads_add_exactly():
    eff = Efficiency(**{**H200_EFF, "step_overhead_us": 100.0, "layer_overhead_us": 5.0})
    base = CostModel(LLAMA_8B, H200, precision=Precision("bf16"))
    over = CostModel(LLAMA_8B, H200, precision=Precision("bf16"), efficiency=eff)
    s = StepShape.from_lists(decode_ctx=[100] * 4)
    assert over.step(s).time_s - base.step(s).time_s == pytest.approx(100e-6 + L * 5e-6, rel=1e-9)


@pytest.mark.parametrize(
    "wdtype,b", [("bf16", 2.0), ("fp8", 1 + 4 / 16384), ("mxfp4", 0.5 + 1 / 32), ("int4", 0.5 + 2 / 128)]
)
def test_low_batch_decode_intensity_is_two_over_b(wdtype, b):
    cm = CostModel(LLAMA_8B, H200, precision=Precision(wdtype))
    mlp = cm.breakdown(StepShape.from_lists(decode_ctx=[1])).op("mlp")
    assert mlp.intensity == pytest.approx(2 / b, rel=0.01)
    assert mlp.bound == "memory"


def test_decode_intensity_grows_linearly_until_the_compute_roof():
    cm = CostModel(LLAMA_8B, H200, precision=Precision("bf16"))
    prev = None
    for batch in (1, 2, 4, 8, 16, 32, 64):
        mlp = cm.breakdown(StepShape.from_lists(decode_ctx=[1] * batch)).op("mlp")
        assert mlp.intensity == pytest.approx(batch, rel=0.05)
        assert mlp.bound == "memory"
        if prev is not None:
            assert mlp.intensity / prev == pytest.approx(2.0, rel=0.03)
        prev = mlp.intensity
    # ridge point: 989e12*0.8 / (4.8e12*0.9) ~ 183 FLOP/B -> batch ~ 183
    assert cm.breakdown(StepShape.from_lists(decode_ctx=[1] * 128)).op("mlp").bound == "memory"
    assert cm.breakdown(StepShape.from_lists(decode_ctx=[1] * 256)).op("mlp").bound == "compute"


def test_prefill_4k_is_compute_bound():
    cm = CostModel(LLAMA_8B, H200, precision=Precision("bf16"))
    shape = StepShape.from_lists(prefill=[(4096, 0)])
    bd = cm.breakdown(shape)
    for name in ("qkv_proj", "o_proj", "mlp", "attention"):
        assert bd.op(name).bound == "compute", name
    # attention FLOPs: 4 * head_dim * heads * causal pairs per layer
    pairs = 4096 * 4097 / 2
    assert bd.op("attention").flops == pytest.approx(L * 4 * D * NH * pairs, rel=1e-9)
    gemm = 2 * 4096 * L * LINEAR_PER_LAYER + 2 * H * V  # one sampled row through the LM head
    assert bd.flops == pytest.approx(gemm + L * 4 * D * NH * pairs, rel=0.01)
    assert bd.time_s == pytest.approx(bd.flops / (989e12 * 0.8), rel=0.05)


def test_moe_expected_experts_matches_monte_carlo():
    rng = np.random.default_rng(0)
    E, k = DEEPSEEK_R1.num_experts, DEEPSEEK_R1.experts_per_token
    cm = CostModel(DEEPSEEK_R1, BIG, precision=Precision("bf16"))
    e_bytes = 3 * DEEPSEEK_R1.hidden_size * DEEPSEEK_R1.moe_intermediate_size * 2
    n_moe = DEEPSEEK_R1.num_layers - DEEPSEEK_R1.first_dense_layers
    for T in (1, 4, 32, 200):
        distinct = np.mean(
            [len(np.unique(np.concatenate([rng.choice(E, k, replace=False) for _ in range(T)]))) for _ in range(400)]
        )
        op = cm.breakdown(StepShape.from_lists(decode_ctx=[10] * T)).op("moe_experts")
        act = T * k * 2 * (2 * DEEPSEEK_R1.hidden_size + 6 * DEEPSEEK_R1.moe_intermediate_size) * n_moe
        touched = (op.total_bytes - act) / (e_bytes * n_moe)
        assert touched == pytest.approx(distinct, rel=0.02), T
        assert op.flops == pytest.approx(n_moe * T * k * 2 * e_bytes / 2, rel=1e-9)


def test_mla_kv_bytes_hand_count():
    latent = (512 + 64) * 2  # kv_lora_rank + rope dims, bf16
    one = CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8, dp_attention=True)).memory_plan()
    assert one.kv_bytes_per_token == 61 * latent
    tp = CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8)).memory_plan()
    assert tp.kv_bytes_per_token == 8 * 61 * latent  # the latent is replicated on every tp rank
    fp8 = CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8, dp_attention=True), Precision(kv="fp8")).memory_plan()
    assert fp8.kv_bytes_per_token == 61 * (512 + 64)
    # decode attention reads the latent of every context token once per layer (tp=1)
    cm = CostModel(DEEPSEEK_R1, BIG)
    B, ctx = 4, 3000
    op = cm.breakdown(StepShape.from_lists(decode_ctx=[ctx] * B)).op("attention")
    kv = 61 * (B * ctx + B) * latent  # read contexts + write the new token
    act = 61 * B * 128 * (192 + 128) * 2  # q in, o out
    assert op.total_bytes == pytest.approx(kv + act, rel=1e-9)
    assert op.flops == pytest.approx(61 * B * ctx * 2 * 128 * (2 * 512 + 64), rel=1e-9)  # absorbed: over the latent


def test_gqa_kv_bytes_split_then_replicated():
    per_head = 2 * 128 * 2  # k and v, head_dim 128, bf16
    tp8 = CostModel(LLAMA_70B, H200, Parallelism(tp=8), Precision("fp8")).memory_plan()
    assert tp8.kv_bytes_per_token == 80 * 8 * per_head
    big16 = chip("b16", {"bf16": 1000}, [{"name": "hbm", "kind": "hbm", "gb": 100, "tbps": 5}], 450, 2.0, 16, 700)
    tp16 = CostModel(LLAMA_70B, big16, Parallelism(tp=16), Precision("fp8")).memory_plan()
    assert tp16.kv_bytes_per_token == 80 * 16 * per_head  # 8 kv heads replicated twice


def test_sliding_window_attention_is_capped_at_the_window():
    cm = CostModel(GPT_OSS_120B, B200)
    per_tok = 2 * 8 * 64 * 2
    n_slide = n_full = 18
    sinks = 64 * 2  # one bf16 sink logit per head, read once per layer
    act = lambda B: 2 * 64 * 64 * 2 * B + sinks  # noqa: E731 - q in, o out per layer

    def ops(ctx, B=4):
        bd = cm.breakdown(StepShape.from_lists(decode_ctx=[ctx] * B, window=128))
        return bd.op("attention_sliding").total_bytes, bd.op("attention").total_bytes

    s_long, f_long = ops(10_000)
    assert s_long == pytest.approx(n_slide * ((4 * 128 + 4) * per_tok + act(4)), rel=1e-9)
    assert f_long == pytest.approx(n_full * ((4 * 10_000 + 4) * per_tok + act(4)), rel=1e-9)
    assert ops(500)[0] == pytest.approx(s_long)  # beyond the window nothing changes
    s_short, f_short = ops(100)
    assert s_short == pytest.approx(f_short)  # below the window both see the whole context
    pre = cm.breakdown(StepShape.from_lists(prefill=[(1000, 0)], window=128))
    assert pre.op("attention_sliding").flops < pre.op("attention").flops / 3


def test_quantized_weight_bytes_include_scales():
    fp8 = CostModel(LLAMA_8B, BIG, precision=Precision("fp8")).memory_plan().weight_bytes_per_chip
    linear = L * LINEAR_PER_LAYER
    assert fp8 == pytest.approx(linear * (1 + 4 / 128**2) + (NORMS + EMBED + LM_HEAD) * 2, rel=1e-12)
    mx = CostModel(LLAMA_8B, BIG, precision=Precision("mxfp4")).memory_plan().weight_bytes_per_chip
    assert mx == pytest.approx(linear * (0.5 + 1 / 32) + (NORMS + EMBED + LM_HEAD) * 2, rel=1e-12)
    # GPT-OSS native: only the routed experts are MXFP4 (their biases, attention, router, embeddings bf16)
    g = GPT_OSS_120B
    h, E, im, Lg = g.hidden_size, g.num_experts, g.moe_intermediate_size, g.num_layers
    experts = Lg * E * 3 * h * im
    other = g.vocab_size * h * 2 + Lg * (
        h * (64 + 2 * 8) * 64 + (64 + 2 * 8) * 64 + 64 * 64 * h + h  # qkv (+bias), o (+bias)
        + 64  # sinks
        + h * E + E  # router (+bias)
        + E * (2 * im + h)  # expert biases
        + 2 * h  # norms
    ) + h
    native = CostModel(g, BIG).memory_plan().weight_bytes_per_chip
    assert native == pytest.approx(experts * (0.5 + 1 / 32) + other * 2, rel=1e-12)


def test_tp_allreduce_bytes_and_time_hand_counted():
    eff = H200.efficiency
    cm = CostModel(LLAMA_8B, H200, Parallelism(tp=8), Precision("bf16"))
    T = 16
    bd = cm.breakdown(StepShape.from_lists(decode_ctx=[50] * T))
    ar = bd.op("attn_allreduce")
    msg = T * H * 2
    assert ar.net_bytes == pytest.approx(L * 8 * 2 * 7 / 8 * msg, rel=1e-12)
    t_one = 2 * 1 * 2.0e-6 + 2 * 7 / 8 * msg / (450e9 * eff.scale_up)  # 2 phases x 1 switch hop x 2 us
    assert ar.time_s == pytest.approx(L * t_one, rel=1e-9)
    assert bd.op("mlp_allreduce").net_bytes == pytest.approx(ar.net_bytes)
    # the weights are sharded: each chip streams 1/8 of them
    tp1 = CostModel(LLAMA_8B, H200, Parallelism(tp=1), Precision("bf16"))
    s = StepShape.from_lists(decode_ctx=[50] * T)
    assert bd.op("mlp").total_bytes == pytest.approx(tp1.breakdown(s).op("mlp").total_bytes, rel=0.01)
    assert bd.op("mlp").time_s == pytest.approx(tp1.breakdown(s).op("mlp").time_s / 8, rel=0.01)


def test_groups_beyond_the_scale_up_domain_use_scale_out():
    cm8 = CostModel(LLAMA_405B, H200, Parallelism(tp=8), Precision("fp8"))
    cm16 = CostModel(LLAMA_405B, H200, Parallelism(tp=16), Precision("fp8"))
    s = StepShape.from_lists(decode_ctx=[100] * 32)
    a8, a16 = cm8.breakdown(s).op("attn_allreduce"), cm16.breakdown(s).op("attn_allreduce")
    assert a16.time_s > 2 * a8.time_s  # the cross-node part runs at 50 GB/s instead of 450


def test_fp4_compute_rate_depends_on_the_chip():
    s = StepShape.from_lists(prefill=[(2048, 0)])
    b200 = CostModel(GPT_OSS_120B, B200).breakdown(s)
    h200 = CostModel(GPT_OSS_120B, H200).breakdown(s)
    assert b200.op("moe_experts").dtype == "fp4"
    assert h200.op("moe_experts").dtype == "bf16"  # no fp4 units: W4A16 kernels at the bf16 rate
    assert b200.op("qkv_proj").dtype == "bf16"
    assert CostModel(DEEPSEEK_R1, B200, Parallelism(tp=8, ep=8), Precision("fp4")).weight_dtypes == {
        "attn": "fp8", "mlp": "fp8", "experts": "mxfp4", "shared": "fp8"}


def test_pipeline_sums_stages_and_hands_off():
    s = StepShape.from_lists(decode_ctx=[100] * 8)
    one = CostModel(LLAMA_70B, H200, Parallelism(tp=8), Precision("fp8"))
    two = CostModel(LLAMA_70B, H200, Parallelism(tp=4, pp=2), Precision("fp8"))
    bd = two.breakdown(s)
    ho = bd.op("pp_handoff")
    assert ho.net_bytes == pytest.approx(4 * 8 * 8192 * 2)  # 4 ranks forward T x hidden bf16 once
    assert ho.time_s == pytest.approx(2e-6 + 8 * 8192 * 2 / (450e9 * H200.efficiency.scale_up))
    assert bd.stage_time_s < bd.time_s
    assert two.memory_plan().weight_bytes_per_chip == pytest.approx(one.memory_plan().weight_bytes_per_chip, rel=0.05)
    assert math.isclose(two.num_chips, 8)


@pytest.mark.parametrize(
    "topology,n,max_hops,expected",
    [("switch", 8, None, 1), ("ring", 8, None, 4), ("chain", 5, None, 3), ("torus3d", 64, None, 6),
     ("torus3d", 8, None, 3), ("torus2d", 16, None, 4), ("mesh", 8, None, 4), ("torus3d", 4096, 7, 7),
     ("boardfly", 1024, None, 7), ("boardfly", 32, None, 3), ("torus3d", 1024, None, 16), ("switch", 1, None, 0)],
)
def test_topology_hops(topology, n, max_hops, expected):
    from jalapeno.hardware.schema import NetworkLink
    from jalapeno.perf.network import hops

    f = {"value": 100.0, "source": "test", "status": "seed"}
    link = NetworkLink(bandwidth_gbps=f, latency_us=f, topology=topology, max_hops=max_hops)
    assert hops(link, n) == expected


def test_dp_attention_all_to_all_bytes_hand_counted():
    cm = CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8, dp_attention=True))
    T = 64
    bd = cm.breakdown(StepShape.from_lists(decode_ctx=[500] * T))
    per_rank = T / 8 * 8 * 7168 * 2 * (1 - 1 / 8)  # its tokens x top-8 copies x hidden bf16, off-rank share
    d = bd.op("moe_dispatch")
    assert d.net_bytes == pytest.approx(58 * 8 * per_rank, rel=1e-12)
    assert d.time_s == pytest.approx(58 * (2.0e-6 + per_rank / (450e9 * H200.efficiency.scale_up)), rel=1e-9)
    assert bd.op("moe_combine").net_bytes == pytest.approx(d.net_bytes)
    # attention is split over the ranks: each chip reads only its sequences' latents
    assert bd.op("attention").bytes["hbm"] == pytest.approx(
        61 * ((T * 500 + T) * 576 * 2 + T * 128 * (192 + 128) * 2), rel=1e-12)
