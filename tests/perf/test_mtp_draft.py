"""One MTP draft pass priced as what it runs (issue #13 item 4): DeepSeek-R1's MTP module = one MLA + MoE block of
the target's configuration, the enorm/hnorm/eh_proj input and the shared LM head, against hand counts."""

from __future__ import annotations

import numpy as np
import pytest
from perf_refdata import DEEPSEEK_R1, H200, H200_EFF

from jalapeno.hardware.schema import Efficiency
from jalapeno.perf import CostModel, Parallelism, Precision, StepShape
from jalapeno.perf.model import kernel_count
from jalapeno.perf.mtp import mtp_block_arch, mtp_draft_cost_model
from jalapeno.perf.ops import Routing, build_ops, features
from jalapeno.sim.backend import SimBackend, Speculation

B, CTX = 8, 2000
SHAPE = StepShape.from_lists(decode_ctx=[CTX] * B)  # one draft token per sequence
F8 = 1 + 4 / (128 * 128)  # DeepSeek's FP8 with one fp32 scale per 128 x 128 block
H, V, E, K, IM = 7168, 129280, 256, 8, 2048
QL, KVL, ROPE, NOPE, VD, HEADS = 1536, 512, 64, 128, 128, 128 // 8  # query heads per chip at TP8


def _target(**eff):
    return CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8), Precision("native"),
                     efficiency=Efficiency(**{**H200_EFF, **eff}))


def test_draft_pass_kernel_count_is_one_moe_mla_block_its_input_and_the_head():
    # 3 per step (embedding, final norm = shared_head.norm, LM head) + one layer (2 norms + 2 collectives + 9 MLA +
    # 6 MoE + 3 shared expert) + the MTP input (enorm, hnorm, eh_proj + its all-reduce)
    assert kernel_count(mtp_block_arch(DEEPSEEK_R1), tp=8, mtp_draft=True) == 3 + 22 + 4 == 29
    assert mtp_draft_cost_model(_target()).kernels == 29
    assert kernel_count(mtp_block_arch(DEEPSEEK_R1), tp=1, mtp_draft=True) == 3 + 20 + 3


def test_draft_pass_weight_and_kv_bytes_per_chip_by_hand():
    ops = build_ops(mtp_block_arch(DEEPSEEK_R1), tp=8, ep=1, dp_attention=False,
                    wbytes={"attn": F8, "mlp": F8, "experts": F8, "shared": F8, "head": 2.0},
                    wdtype={"attn": "fp8", "mlp": "fp8", "experts": "fp8", "shared": "fp8", "attn_math": "bf16",
                            "bf16": "bf16"},
                    kvb=2.0, actb=2.0, coll={"tp_allreduce": (2e-6, 1e-12, 1.0), "tp_allgather": (2e-6, 1e-12, 1.0)},
                    mtp_draft=True)
    x = np.array(features(SHAPE, Routing.of(E, K, 1)))
    w = sum(float(o.bytes["W"] @ x) for o in ops if "W" in o.bytes)
    kv = sum(float(o.bytes["KV"] @ x) for o in ops if "KV" in o.bytes)
    u = 1 - (1 - K / E) ** B  # share of the routed experts 8 tokens touch
    hand = (B * H * 2 / 8  # embedding rows
            + 2 * H * 2 + 2 * H * H * 2 / 8  # enorm + hnorm, eh_proj (16-bit, row-parallel)
            + H * (QL + KVL + ROPE) * F8 + (QL + KVL) * 2  # fused q_a / kv_a (replicated) + the two LoRA norms
            + QL * HEADS * (NOPE + ROPE) * F8 + KVL * HEADS * (NOPE + VD) * F8 + HEADS * VD * H * F8  # q_b, kv_b, o
            + H * E * 2 + E * 2 + u * E * 3 * H * IM * F8 / 8 + 3 * H * IM * F8 / 8  # router (+ bias), experts, shared
            + 2 * H * 2 + H * 2  # the block's two norms, shared_head.norm
            + V * H * 2 / 8)  # the whole LM head, every pass
    assert w == pytest.approx(hand, rel=1e-12)
    assert kv == pytest.approx((KVL + ROPE) * 2 * (B * CTX + B), rel=1e-12)  # latents read + the new ones written


def test_draft_pass_flops_by_hand():
    c = mtp_draft_cost_model(_target()).step(SHAPE)
    per_chip_per_token = (8 * H + 2 * 2 * H * H / 8  # enorm + hnorm, eh_proj
                          + 2 * H * (QL + KVL + ROPE) + 2 * QL * HEADS * (NOPE + ROPE)  # q_a / kv_a, q_b
                          + 2 * KVL * HEADS * (NOPE + VD) + 2 * HEADS * VD * H  # absorbed W_UK / W_UV, o_proj
                          + 2 * H * E + 2 * 3 * H * IM * K / 8 + 2 * 3 * H * IM / 8  # router, experts, shared
                          + 10 * H + 4 * H  # the block's norms + residuals, final norm
                          + 2 * V * H / 8)  # LM head (one row per sequence)
    attention = 2 * HEADS * (2 * KVL + ROPE) * B * CTX  # absorbed MLA: q·latent + q_rope·k_rope, p·latent
    hand = 8 * (B * per_chip_per_token + attention) + 5 * V * B  # 8 chips; the sampler once
    assert c.flops == pytest.approx(hand, rel=1e-12)


def test_draft_pass_fixed_costs_are_its_kernels_and_one_moe_layer_not_the_step():
    terms = dict(kernel_overhead_us=5.0, layer_overhead_us=7.0, moe_layer_overhead_us=11.0, step_overhead_us=100.0,
                 seq_overhead_us=50.0)
    base, over = mtp_draft_cost_model(_target()), mtp_draft_cost_model(_target(**terms))
    dt = over.step(SHAPE).time_s - base.step(SHAPE).time_s
    assert dt == pytest.approx((29 * 5.0 + 7.0 + 11.0) * 1e-6, rel=1e-9)  # no per-step, no per-sequence term
    # the target's own step pays them all: 1,327 kernels at TP8 (no EP: the same 2 collectives per layer)
    t_dt = _target(**terms).step(SHAPE).time_s - _target().step(SHAPE).time_s
    assert t_dt == pytest.approx((1327 * 5.0 + 61 * 7.0 + 58 * 11.0 + 100.0 + 8 * 50.0) * 1e-6, rel=1e-9)


def test_simulated_mtp_step_adds_the_draft_pass_not_one_layers_share():
    cm = _target(kernel_overhead_us=5.0)
    be = SimBackend(cm, Speculation("mtp", 1, 0.8))
    verify = StepShape.from_lists(decode_ctx=[CTX + 1] * B, decode_tokens_per_seq=2)
    t, _ = be._proposer(verify, 1)
    draft = mtp_draft_cost_model(cm)
    assert t[0] == pytest.approx(draft.step(SHAPE).time_s, rel=1e-9)
    # more than the old 1/61 of a one-token target step: its own 29 kernels and the full LM-head read
    lm_head_s = V * H * 2 / 8 / (4.8e12 * 0.9)
    assert t[0] > cm.step(SHAPE).time_s / 61 + 29 * 5e-6 * 0.5
    assert t[0] > lm_head_s + 29 * 5e-6
