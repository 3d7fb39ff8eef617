"""KV tiers (issue 17 items 1 and 5): an on-chip SRAM tier (Jalapeño, TPU 8i) and an offload tier (host DRAM /
SSD) change KV capacity, decode time and TTFT as their capacity and bandwidth predict, by hand counts."""

import pytest

from jalapeno.errors import ConfigError
from jalapeno.hardware import get_chip
from jalapeno.perf import CostModel, KVTier, StepShape
from jalapeno.perf.model import OFFLOAD_LINK_EFFICIENCY
from jalapeno.sim import cost_model_for
from jalapeno.sim.scenario import Scenario, run_scenario

#: llama-3.1-70b: 80 layers, 8 KV heads of 128; per chip at tp=4 two KV heads: K and V, fp8 (1 B) / bf16 (2 B)
L70_FP8_TP4 = 80 * 2 * (8 // 4) * 128 * 1
L70_BF16_TP2 = 80 * 2 * (8 // 2) * 128 * 2


def _eff_bw(chip, level: str) -> float:
    lv = chip.level(level)
    return float(lv.bandwidth_tbps) * 1e12 * chip.efficiency.memory.get(level, chip.efficiency.memory_default)


def _tiered(chip, gb: float) -> tuple[CostModel, CostModel]:
    base = cost_model_for("llama-3.1-70b", chip, tp=4, kv="fp8")
    return base, CostModel(base.model, base.chip, base.parallel, base.precision, kv_sram_gb=gb)


def test_sram_tier_adds_capacity_and_prices_decode_kv_at_sram_bandwidth():
    chip = get_chip("tpu-8i")  # 384 MB SRAM, kv_resident (seed: 'more SRAM capacity' for KV)
    base, cm = _tiered(chip, 0.384)
    s_tok = int(0.384e9 // L70_FP8_TP4)  # 9,375 tokens
    assert cm.kv_sram_tokens == s_tok == 9375
    assert cm.memory_plan().kv_capacity_tokens - base.memory_plan().kv_capacity_tokens == s_tok
    # a memory-bound decode step whose whole context fits the tier: its KV read moves from HBM to SRAM
    per_byte = 1 / _eff_bw(chip, "hbm") - 1 / _eff_bw(chip, "sram")
    for ctx in (s_tok // 8, s_tok):
        shape = StepShape.from_lists(decode_ctx=[ctx // 4] * 4)
        saved = base.step(shape).time_s - cm.step(shape).time_s
        assert saved == pytest.approx(shape.decode_ctx_sum * L70_FP8_TP4 * per_byte, rel=1e-6)
    # past the tier's capacity only S tokens are read from SRAM: the saving stops growing
    big = StepShape.from_lists(decode_ctx=[4 * s_tok] * 4)
    assert base.step(big).time_s - cm.step(big).time_s == pytest.approx(s_tok * L70_FP8_TP4 * per_byte, rel=1e-6)


def test_tpu_8i_more_sram_is_more_kv_in_sram():
    """TPU 8i's SRAM (384 MB) against the same chip with 8t's 128 MB: 3x the tokens in SRAM, 3x the saving."""
    chip = get_chip("tpu-8i")
    lv = chip.level("sram")
    small_chip = chip.model_copy(update={"memory": [
        lv.model_copy(update={"capacity_gb": lv.capacity_gb.model_copy(update={"value": 0.128})}),
        chip.level("hbm")]})
    base, big = _tiered(chip, 0.384)
    _, small = _tiered(small_chip, 0.128)
    assert big.kv_sram_tokens == 3 * small.kv_sram_tokens
    shape = StepShape.from_lists(decode_ctx=[20_000] * 4)  # more than either tier holds
    gain_big = base.step(shape).time_s - big.step(shape).time_s
    gain_small = base.step(shape).time_s - small.step(shape).time_s
    assert gain_big == pytest.approx(3 * gain_small, rel=1e-6) and gain_small > 0


def test_decode_steps_closed_form_matches_step_by_step_across_the_tier_edge():
    from jalapeno.perf import advance_decode

    for model, chip, tp in (("gpt-oss-120b", "jalapeno", 8), ("llama-3.1-70b", "tpu-8i", 4)):
        base = cost_model_for(model, chip, tp=tp, kv="fp8")
        cm = CostModel(base.model, base.chip, base.parallel, base.precision, kv_sram_gb=0.3)
        w = base.model.attention_window
        for ctx in (cm.kv_sram_tokens // 16, cm.kv_sram_tokens // 8 - 3, cm.kv_sram_tokens):
            shape = StepShape.from_lists(decode_ctx=[ctx] * 8, window=w)
            t, e = cm.decode_steps(shape, 40)
            ref = [cm.step(advance_decode(shape, i, w)) for i in range(40)]
            assert t.tolist() == pytest.approx([r.time_s for r in ref], rel=1e-12)
            assert e.tolist() == pytest.approx([r.energy_j for r in ref], rel=1e-12)


def test_sram_tier_user_errors():
    for chip, gb, msg in (("gb300", 0.1, "no SRAM level"), ("groq-lp30", 0.1, "already"),
                          ("tpu-8i", 1.0, "exceeds")):
        with pytest.raises(ConfigError, match=msg):
            cost_model_for("llama-3.1-8b", chip, kv_sram_gb=gb)
    for text in ("dram:10", "host", "host:x", "ssd:100", "host:0"):
        with pytest.raises(ConfigError, match="--kv-offload"):
            KVTier.parse(text, None if text == "host" else 63.0)


def _long(**kw) -> dict:
    # every request at t=0 (closed loop, concurrency = requests): the schedule does not depend on time, so two
    # runs that differ only in the tier's bandwidth take the same steps and load the same tokens
    sc = Scenario(model="llama-3.1-70b", hardware="h200", tp=2, isl=32_000, osl=300, concurrency=16,
                  num_prompts=16, random_range_ratio=1.0, **kw)
    return run_scenario(sc)


def test_offload_tier_replaces_recompute_and_its_bandwidth_sets_the_time():
    recompute = _long()
    fast = _long(kv_offload="host:200")  # the H200's PCIe Gen5 x16 link (63 GB/s per direction)
    slow = _long(kv_offload="host:200:6.3")  # a tier 10x slower
    s_f, s_s = fast["sim"], slow["sim"]
    assert recompute["sim"]["preemptions"] > 0  # 16 x 32K tokens overflow the 2-chip replica's KV cache
    assert s_f["kv_offload_capacity_tokens_per_replica"] == int(200e9 // L70_BF16_TP2) // 16 * 16
    assert s_f["kv_offloads"] > 0 and s_f["kv_loaded_tokens"] > 0
    assert (s_f["steps"], s_f["kv_loaded_tokens"]) == (s_s["steps"], s_s["kv_loaded_tokens"])
    per_token = L70_BF16_TP2 / OFFLOAD_LINK_EFFICIENCY  # bytes each chip brings back per token, at 85% of the link
    extra = s_f["kv_loaded_tokens"] * per_token * (1 / 6.3e9 - 1 / 63e9)
    assert slow["duration"] - fast["duration"] == pytest.approx(extra, rel=1e-6)
    # no recompute of 32K-token prompts: TTFT and E2E drop; a slower tier gives some of it back
    assert fast["mean_ttft_ms"] < slow["mean_ttft_ms"] < recompute["mean_ttft_ms"]
    assert fast["total_output_tokens"] == recompute["total_output_tokens"]


def test_jalapeno_features_off_add_the_host_work_the_seeds_say_they_remove():
    """Jalapeño's verify unit and on-chip KV page table (chip feature fields, seed-quoted): switched off
    (``--chip-features off``) a verify step pays one host round trip (VERIFY_HOST_US) and every step pays
    PAGING_NS_PER_BLOCK per 16-token context block of its block tables; other chips are untouched."""
    from jalapeno.perf.model import PAGING_BLOCK_TOKENS, PAGING_NS_PER_BLOCK, VERIFY_HOST_US

    on = cost_model_for("gpt-oss-120b", "jalapeno", tp=8, kv="fp8")
    off = cost_model_for("gpt-oss-120b", "jalapeno", tp=8, kv="fp8", chip_features=False)
    assert on.chip.features.spec_verify_unit and on.chip.features.kv_page_table
    plain = StepShape.from_lists(decode_ctx=[128_000] * 4, window=on.model.attention_window)
    verify = StepShape.from_lists(decode_ctx=[128_000] * 4, window=on.model.attention_window,
                                  decode_tokens_per_seq=3)  # 2 draft tokens verified per sequence
    paging = plain.decode_ctx_sum / PAGING_BLOCK_TOKENS * PAGING_NS_PER_BLOCK * 1e-9
    assert off.step(plain).time_s - on.step(plain).time_s == pytest.approx(paging, rel=1e-6)
    paging_v = verify.decode_ctx_sum / PAGING_BLOCK_TOKENS * PAGING_NS_PER_BLOCK * 1e-9
    assert off.step(verify).time_s - on.step(verify).time_s == pytest.approx(paging_v + VERIFY_HOST_US * 1e-6,
                                                                            rel=1e-6)
    from jalapeno.perf import advance_decode

    t_off, _ = off.decode_steps(verify, 5)  # the closed form carries both terms too
    w = on.model.attention_window
    assert t_off.tolist() == pytest.approx([off.step(advance_decode(verify, i, w)).time_s for i in range(5)],
                                           rel=1e-12)
    # a chip without the features (GB300: its calibrated overheads already hold its host work) is unchanged
    g_on = cost_model_for("gpt-oss-120b", "gb300", tp=8, kv="fp8")
    g_off = cost_model_for("gpt-oss-120b", "gb300", tp=8, kv="fp8", chip_features=False)
    assert g_on.step(verify).time_s == g_off.step(verify).time_s


def test_chain_reuses_its_prefix_from_the_offload_tier():
    """LMCache-style prefix reuse across requests: a chain's second call (prompt = first prompt + output + 4,000
    new tokens) loads the first call's KV from host memory and prefills only the new tokens; TTFT by hand."""
    kw = dict(model="llama-3.1-8b", hardware="h200", isl=4000, osl=100, chain_calls=2, concurrency=1,
              num_prompts=1, random_range_ratio=1.0)
    m0, r0 = run_scenario(Scenario(**kw), return_result=True)
    m1, r1 = run_scenario(Scenario(**kw, kv_offload="host:100"), return_result=True)
    cm = cost_model_for("llama-3.1-8b", "h200", kv_offload="host:100")  # H200: PCIe Gen5 x16
    reused = 4000 + 100 - 1  # the first call's KV: its prompt and all but its last output token
    assert m1["sim"]["kv_reused_tokens"] == reused and m0["sim"].get("kv_reused_tokens") is None
    second = [o for o in r1.outcomes if o.prompt_tokens == 8100]
    second0 = [o for o in r0.outcomes if o.prompt_tokens == 8100]
    assert len(second) == len(second0) == 1
    full = cm.step(StepShape.from_lists(prefill=[(8100, 0)])).time_s
    reuse = cm.kv_load_time_s(reused) + cm.step(StepShape.from_lists(prefill=[(8100 - reused, reused)])).time_s
    assert second0[0].ttft_s - second[0].ttft_s == pytest.approx(full - reuse, rel=1e-9)
    assert reuse < full
