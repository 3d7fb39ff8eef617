"""Cost model for the 2026 attention variants, against hand counts written out from the configs:
Gated DeltaNet linear attention (Qwen3.5-397B-A17B: a constant per-sequence state, no KV growth), DeepSeek
sparse attention (GLM-5: an indexer over every key, attention over the top-k only), gated attention and
MiniMax's per-layer q/k norms; and a simulate of each new model."""

from __future__ import annotations

import json

import pytest
from perf_refdata import H200, chip

from jalapeno.cli import main
from jalapeno.errors import ConfigError
from jalapeno.models import load_model
from jalapeno.perf import CostModel, Parallelism, Precision, StepShape

BIG = chip("big", {"bf16": 1000, "fp8": 2000}, [{"name": "hbm", "kind": "hbm", "gb": 1e6, "tbps": 5}], 450, 2.0, 0,
           700)

# --- Qwen3.5-397B-A17B text_config numbers -----------------------------------------------------------
Q_H, Q_LIN, Q_FULL = 4096, 45, 15  # hidden; 3 of every 4 layers are Gated DeltaNet
NK, NV, DK, DV, KERN = 16, 64, 128, 128, 4
CONV = 2 * NK * DK + NV * DV  # 12288 conv channels (q, k, v)
VDIM = NV * DV  # 8192
STATE = NV * DK * DV * 4 + (KERN - 1) * CONV * 2  # fp32 delta-rule state + bf16 conv window, per layer
SMALL_W = (CONV * KERN + 2 * NV + DV) * 2  # conv weights, A_log, dt_bias, gated-norm weight


@pytest.fixture(scope="module")
def qwen35():
    return CostModel(load_model("qwen3.5-397b-a17b"), BIG)


def test_linear_attention_decode_hand_count(qwen35):
    B = 4
    for ctx in (100, 30_000):  # the recurrent state does not grow with the context
        op = qwen35.breakdown(StepShape.from_lists(decode_ctx=[ctx] * B)).op("linear_attention")
        flops = Q_LIN * (B * (2 * CONV * KERN + 10 * VDIM) + B * NV * 7 * DK * DV)
        state_rw = Q_LIN * B * 2 * STATE  # read + write the whole state once per sequence
        act = Q_LIN * B * (CONV + 2 * VDIM + 2 * NV) * 2
        assert op.flops == pytest.approx(flops, rel=1e-12)
        assert op.total_bytes == pytest.approx(state_rw + act + Q_LIN * SMALL_W, rel=1e-12)
    assert STATE == 4_268_032


def test_linear_attention_prefill_chunk_hand_count(qwen35):
    chunk = 1000
    bd = qwen35.breakdown(StepShape.from_lists(prefill=[(chunk, 3000)]))
    op = bd.op("linear_attention")
    per_head = 6 * DK * DV + 4 * 64 * (DK + DV)  # chunked form: inter-chunk state products + intra-chunk (c = 64)
    flops = Q_LIN * (chunk * (2 * CONV * KERN + 10 * VDIM) + chunk * NV * per_head)
    assert op.flops == pytest.approx(flops, rel=1e-12)
    act = Q_LIN * chunk * (CONV + 2 * VDIM + 2 * NV) * 2
    assert op.total_bytes == pytest.approx(Q_LIN * 2 * STATE + act + Q_LIN * SMALL_W, rel=1e-12)  # one sequence
    # projections: in (qkv + z + b + a) and out, on the 45 linear layers only
    assert bd.op("linear_in_proj").flops == pytest.approx(Q_LIN * 2 * chunk * Q_H * (CONV + VDIM + 2 * NV))
    assert bd.op("linear_out_proj").flops == pytest.approx(Q_LIN * 2 * chunk * VDIM * Q_H)
    # full attention only on the 15 full layers: 32 heads of 256, K and V of 2 kv heads
    att = bd.op("attention")
    pairs = chunk * 3000 + chunk * (chunk + 1) / 2
    assert att.layers == Q_FULL
    assert att.flops == pytest.approx(Q_FULL * 4 * 256 * 32 * pairs, rel=1e-12)


def test_gated_attention_qkv_weights(qwen35):
    op = qwen35.breakdown(StepShape.from_lists(decode_ctx=[10])).op("qkv_proj")
    # q_proj emits q and the output gate (2 x 32 x 256), k and v 2 x 256 each; q/k norms one head wide
    w = Q_H * (2 * 32 + 2 * 2) * 256 * 2 + 2 * 256 * 2
    act = (Q_H + (2 * 32 + 2 * 2) * 256) * 2
    assert op.layers == Q_FULL
    assert op.total_bytes == pytest.approx(Q_FULL * (w + act), rel=1e-12)


def test_linear_attention_memory_plan_state_per_sequence():
    cm = CostModel(load_model("qwen3.5-397b-a17b"), H200, Parallelism(tp=8, ep=8))
    p0, p64 = cm.memory_plan(max_seqs=0), cm.memory_plan(max_seqs=64)
    # KV only for the 15 full layers: K + V of 2 kv heads (replicated: 1 per rank) x 256, bf16, on 8 ranks
    kv_chip_token = Q_FULL * 2 * 1 * 256 * 2
    assert p64.kv_bytes_per_token == 8 * kv_chip_token
    assert p64.state_bytes_per_sequence == pytest.approx(Q_LIN * STATE)  # summed over the 8 ranks
    assert p64.state_reserve_bytes_per_chip == pytest.approx(64 * Q_LIN * STATE / 8)
    lost = p0.kv_capacity_tokens - p64.kv_capacity_tokens
    assert lost == pytest.approx(64 * Q_LIN * STATE / 8 / kv_chip_token, abs=1)


def test_linear_heads_must_divide_tp():
    with pytest.raises(ConfigError, match="linear_num_key_heads"):
        CostModel(load_model("qwen3.5-397b-a17b"), BIG, Parallelism(tp=32))


# --- GLM-5 (MLA + DSA) ---------------------------------------------------------------------------
G_L, G_H, G_NH, QL, KVL, ROPE, NOPE, VD = 78, 6144, 64, 2048, 512, 64, 192, 256
IH, IDIM, TOPK = 32, 128, 2048
LATENT = (KVL + ROPE) * 2  # bf16
IDX_KEY = IDIM + 4  # fp8 indexer key + fp32 scale


@pytest.fixture(scope="module")
def glm5():
    return CostModel(load_model("glm-5"), BIG)


def test_sparse_attention_decode_reads_top_k(glm5):
    B = 4
    for ctx, keys in ((10_000, TOPK), (1000, 1000)):  # capped at index_topk, dense below it
        bd = glm5.breakdown(StepShape.from_lists(decode_ctx=[ctx] * B, window=TOPK))
        att = bd.op("attention")
        assert att.flops == pytest.approx(G_L * B * keys * 2 * G_NH * (2 * KVL + ROPE), rel=1e-12)
        act = G_L * B * G_NH * (NOPE + ROPE + VD) * 2
        assert att.total_bytes == pytest.approx(G_L * (B * keys + B) * LATENT + act, rel=1e-12)
        # the indexer scores EVERY key: projections + 2 x heads x head_dim per (query, key) pair
        idx = bd.op("indexer")
        proj = 2 * (QL * IH * IDIM + G_H * IDIM + G_H * IH)
        assert idx.flops == pytest.approx(G_L * (B * proj + B * ctx * 2 * IH * IDIM), rel=1e-12)
        w = (QL * IH * IDIM + G_H * IDIM) * 2 + (G_H * IH + 2 * IDIM) * 2
        idx_act = B * (G_H + QL + IH * IDIM + IDIM + IH) * 2
        assert idx.total_bytes == pytest.approx(G_L * (w + (B * ctx + B) * IDX_KEY + idx_act), rel=1e-12)


def test_sparse_attention_prefill_pairs_capped_at_top_k(glm5):
    chunk = 4096
    bd = glm5.breakdown(StepShape.from_lists(prefill=[(chunk, 0)], window=TOPK))
    capped = TOPK * (TOPK + 1) / 2 + (chunk - TOPK) * TOPK  # query p sees min(p + 1, 2048) keys
    assert bd.op("attention").flops == pytest.approx(G_L * 2 * G_NH * (NOPE + ROPE + VD) * capped, rel=1e-12)
    full = chunk * (chunk + 1) / 2
    proj = 2 * (QL * IH * IDIM + G_H * IDIM + G_H * IH)
    assert bd.op("indexer").flops == pytest.approx(G_L * (chunk * proj + 2 * IH * IDIM * full), rel=1e-12)


def test_sparse_attention_kv_per_token_counts_the_indexer_cache():
    plan = CostModel(load_model("glm-5-fp8"), H200, Parallelism(tp=8, ep=8)).memory_plan()
    assert plan.kv_bytes_per_token == 8 * G_L * (LATENT + IDX_KEY)  # latent + indexer key, on every rank
    assert plan.state_bytes_per_sequence == 0


def test_decode_steps_equal_repeated_steps_across_the_top_k_cap(glm5):
    from jalapeno.perf import advance_decode

    shape = StepShape.from_lists(decode_ctx=[2000, 2040, 100], window=TOPK)
    t, _ = glm5.decode_steps(shape, 64)
    for i in (0, 20, 63):
        assert t[i] == pytest.approx(glm5.step(advance_decode(shape, i, TOPK)).time_s, rel=1e-12)


def test_minimax_per_layer_qk_norm_and_fp8_weights():
    cm = CostModel(load_model("minimax-m2.5"), BIG)
    op = cm.breakdown(StepShape.from_lists(decode_ctx=[10])).op("qkv_proj")
    fp8 = 1 + 4 / 128**2  # 128x128 block scales
    w = 3072 * (48 + 2 * 8) * 128 * fp8 + (48 + 8) * 128 * 2  # q, k, v; q_norm over 48 heads, k_norm over 8
    act = (3072 + (48 + 2 * 8) * 128) * 2
    assert op.total_bytes == pytest.approx(62 * (w + act), rel=1e-12)


# --- the simulator runs each new model ------------------------------------------------------------
@pytest.mark.parametrize("model,par", [
    ("qwen3.5-397b-a17b", ["--tp", "8", "--ep", "8"]),
    ("glm-5-fp8", ["--tp", "8", "--ep", "8"]),
    ("minimax-m2.5", ["--tp", "8", "--ep", "8"]),
    ("qwen3-32b", ["--tp", "8"]),
])
def test_simulate_new_models(capsys, model, par):
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--model", model, "--hardware", "h200", *par, "--isl", "1024", "--osl", "256",
              "--concurrency", "8", "--num-prompts", "16", "--json"])
        raise SystemExit(0)
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    m = json.loads(out.out)
    assert m["completed"] == 16 and m["num_chips"] == 8
    assert 0 < m["median_tpot_ms"] < 100 and m["median_ttft_ms"] > 0


def test_disaggregated_transfer_carries_the_linear_attention_state():
    from jalapeno.sim.cluster import KVLink
    from jalapeno.sim.scenario import _kv_link

    cm = CostModel(load_model("qwen3.5-397b-a17b"), H200, Parallelism(tp=8, ep=8))
    link = _kv_link(cm, cm, 1, 1)
    # one copy of the KV moves: 2 KV heads (replicated 4x over tp 8 on the chips, sent once) x (K, V) x 256 x bf16
    assert link.bytes_per_token == 2 * Q_FULL * 2 * 256 * 2
    assert link.state_bytes == pytest.approx(Q_LIN * STATE)  # 192 MB per request, whatever the prompt length
    bare = KVLink(link.latency_s, link.bytes_per_s, link.bytes_per_token)
    assert link.transfer_s(1000) - bare.transfer_s(1000) == pytest.approx(Q_LIN * STATE / link.bytes_per_s)


def test_roofline_cli_caps_dsa_attention_at_top_k(capsys):
    def attention_flops(context):
        with pytest.raises(SystemExit) as e:
            main(["roofline", "--model", "glm-5-fp8", "--hardware", "h200", "--tp", "8", "--ep", "8", "--phase",
                  "decode", "--batch", "8", "--context", str(context), "--json"])
            raise SystemExit(0)
        out = capsys.readouterr()
        assert e.value.code == 0, out.err
        ops = {o["name"]: o for o in json.loads(out.out)["ops"]}
        return ops["attention"]["flops"], ops["indexer"]["flops"]

    att_10k, idx_10k = attention_flops(10_000)
    att_40k, idx_40k = attention_flops(40_000)
    assert att_40k == pytest.approx(att_10k)  # both read the 2048 top-k keys
    # the indexer's scores grow with the context (8 sequences x 30,000 more keys, on each of the 8 ranks)
    assert idx_40k - idx_10k == pytest.approx(8 * G_L * 8 * 30_000 * 2 * IH * IDIM, rel=1e-9)
