"""Disaggregated pools as InferenceX lays them out: per-pool dp-attention, precision and chips per worker; KV over
the fabric that connects the pools (NVLink inside one NVL72, the NIC between nodes) with queued link lanes;
redundant expert slots when ep does not divide the expert count; ``--dp N --dp-attention``."""

import pytest

from jalapeno.errors import ConfigError
from jalapeno.hardware import get_chip
from jalapeno.models import load_model
from jalapeno.perf import CostModel, Parallelism, Precision
from jalapeno.sim.cluster import Cluster, KVLink
from jalapeno.sim.scenario import Scenario, run_scenario
from jalapeno.testing.engine_fakes import FakeCostModel
from jalapeno.perf.shape import StepShape
from jalapeno.sim.backend import SimBackend
from jalapeno.engine import Engine, EngineConfig
from jalapeno.workload import Workload

#: DeepSeek-V3/R1 config.json: kv_lora_rank 512 + qk_rope_head_dim 64 latent per layer, 61 layers
DSR1_KV_BYTES_PER_TOKEN_BF16 = (512 + 64) * 2 * 61


def test_layout_maps_to_pools_with_their_own_dp_attention_and_precision():
    # InferenceX "P: 1 worker(s) x TP1 EP4 DPattn=True (4 GPUs); D: 1 worker(s) x TP8 EP8 DPattn=False (8 GPUs)"
    sc = Scenario(model="deepseek-r1", hardware="b200", precision="fp4", prefill_workers=1, prefill_tp=1,
                  prefill_chips_per_worker=4, prefill_ep=4, prefill_dp_attention=True, prefill_precision="fp8",
                  decode_workers=1, decode_chips_per_worker=8, decode_ep=8, decode_dp_attention=False)
    p, d = sc.pool("prefill"), sc.pool("decode")
    assert (p.tp, p.ep, p.dp_attention, p.precision, p.chips_per_worker) == (4, 4, True, "fp8", 4)
    assert (d.tp, d.ep, d.dp_attention, d.precision, d.chips_per_worker) == (8, 8, False, "fp4", 8)
    # the same fields as scenario CSV columns
    row = Scenario.from_row({"model": "deepseek-r1", "hardware": "b200", "prefill_dp_attention": "true",
                             "decode_dp_attention": "false", "prefill_chips_per_worker": "4",
                             "decode_precision": "fp4", "decode_pp": "2", "decode_chips_per_worker": "8"})
    assert row.pool("prefill").dp_attention and not row.pool("decode").dp_attention
    assert (row.pool("decode").tp, row.pool("decode").pp, row.pool("decode").precision) == (4, 2, "fp4")


def test_decode_dp_attention_alone_changes_the_decode_pool_as_it_should():
    base = dict(model="deepseek-r1", hardware="b200", precision="fp4", isl=1024, osl=32, concurrency=16,
                num_prompts=16, prefill_workers=1, prefill_chips_per_worker=8, prefill_ep=8,
                decode_workers=1, decode_chips_per_worker=8, decode_ep=8)
    off = run_scenario(Scenario(**base, decode_dp_attention=False))
    on = run_scenario(Scenario(**base, decode_dp_attention=True))
    arch = load_model("deepseek-r1")

    def cap(dpa: bool) -> int:
        cm = CostModel(arch, get_chip("b200"), Parallelism(tp=8, ep=8, dp_attention=dpa), Precision(weights="fp4"))
        return cm.memory_plan().kv_capacity_tokens // 16 * 16  # whole 16-token KV blocks

    # MLA's latent is replicated on every tp rank without dp-attention: data-parallel attention holds ~8x the tokens
    assert off["sim"]["kv_capacity_tokens_per_replica"] == cap(False)
    assert on["sim"]["kv_capacity_tokens_per_replica"] == cap(True) > 7 * cap(False)
    # each decode GPU receives its own sequences' KV: 8 receive lanes instead of one
    assert (off["kv_transfer"]["recv_lanes"], on["kv_transfer"]["recv_lanes"]) == (1, 8)
    assert off["kv_transfer"]["send_lanes"] == on["kv_transfer"]["send_lanes"] == 1  # prefill pool unchanged
    assert on["median_tpot_ms"] != off["median_tpot_ms"]


def _single_request_ttft(decode_workers: int) -> dict:
    sc = Scenario(model="deepseek-r1", hardware="gb200", precision="fp4", isl=2000, osl=4, concurrency=1,
                  num_prompts=1, random_range_ratio=1.0, prefill_workers=1, prefill_chips_per_worker=4,
                  prefill_ep=4, prefill_dp_attention=True, decode_workers=decode_workers,
                  decode_chips_per_worker=8, decode_ep=8)
    return run_scenario(sc)


def test_kv_moves_over_nvlink_inside_one_nvl72_and_over_the_nic_across_racks():
    chip = get_chip("gb200")
    inside = _single_request_ttft(8)  # 4 + 64 = 68 GPUs <= 72: one NVLink domain
    across = _single_request_ttft(9)  # 4 + 72 = 76 GPUs: the pools span two racks
    assert (inside["kv_transfer"]["fabric"], across["kv_transfer"]["fabric"]) == ("scale-up", "scale-out")
    # one copy of the latent, sent by the one prefill GPU holding the sequence (dp-attention)
    bw_up = float(chip.scale_up.bandwidth_gbps) * 1e9 * chip.efficiency.scale_up
    bw_out = float(chip.scale_out.bandwidth_gbps) * 1e9 * chip.efficiency.scale_out
    assert inside["kv_transfer"]["gb_per_s"] == pytest.approx(bw_up / 1e9)
    assert across["kv_transfer"]["gb_per_s"] == pytest.approx(bw_out / 1e9)
    nbytes = 2000 * DSR1_KV_BYTES_PER_TOKEN_BF16
    t_up = float(chip.scale_up.latency_us) * 1e-6 + nbytes / bw_up
    t_out = float(chip.scale_out.latency_us) * 1e-6 + nbytes / bw_out
    # one request: the same prefill, only the transfer differs
    assert across["median_ttft_ms"] - inside["median_ttft_ms"] == pytest.approx((t_out - t_up) * 1e3, rel=1e-6)


def _eng():
    return Engine(SimBackend(FakeCostModel()), EngineConfig(max_num_seqs=32, max_num_batched_tokens=4096))


@pytest.mark.parametrize("lanes, decode_workers, serial", [
    ((1, 1), 1, True),  # one lane each side: the second KV waits for the first
    ((2, 1), 1, True),  # the receiver's single lane still serialises them
    ((2, 1), 2, False),  # two receivers: both move at once
    ((2, 2), 1, False),
])
def test_a_busy_link_lane_queues_the_next_transfer(lanes, decode_workers, serial):
    P = 1000
    link = KVLink(1e-3, 1e9, 50_000, send_lanes=lanes[0], recv_lanes=lanes[1])
    c = Cluster([_eng()], [_eng() for _ in range(decode_workers)], link)
    r = c.run(Workload([P, P], [4, 4], concurrency=2))
    prefill = FakeCostModel().step(StepShape.from_lists(prefill=[(P, 0), (P, 0)])).time_s  # one batched step
    busy = P * 50_000 / 1e9
    ttfts = sorted(o.ttft_s for o in r.outcomes)
    assert ttfts[0] == pytest.approx(prefill + 1e-3 + busy, rel=1e-12)
    assert ttfts[1] == pytest.approx(prefill + 1e-3 + (2 if serial else 1) * busy, rel=1e-12)
    assert c.kv_queue_s_mean() == pytest.approx(busy / 2 if serial else 0.0, abs=1e-15)


def test_redundant_expert_slots_when_ep_does_not_divide_the_experts():
    arch = load_model("deepseek-r1")  # 256 routed experts, 58 MoE layers of 3 x 7168 x 2048
    chip = get_chip("gb200")

    def cm(ep: int) -> CostModel:
        return CostModel(arch, chip, Parallelism(tp=48, ep=ep, dp_attention=True), Precision(weights="bf16"))

    wide, even = cm(48), cm(16)
    assert wide.expert_slots == 288 and even.expert_slots == 256  # 256 + 32 redundant copies over EP 48
    # EP 48: 6 whole experts per GPU; EP 16: 16 experts per rank, each split 3 ways = 5 1/3 experts per GPU
    per_expert = 3 * 7168 * 2048 * 2
    extra = (288 / 48 - 256 / 48) * per_expert * 58
    assert wide.weight_bytes_per_chip - even.weight_bytes_per_chip == pytest.approx(extra, rel=1e-9)
    with pytest.raises(ConfigError, match="exceeds num_experts"):
        CostModel(arch, chip, Parallelism(tp=512, ep=512, dp_attention=True), Precision())


def test_deepseek_runs_on_an_nvl72_with_288_expert_slots():
    m = run_scenario(Scenario(model="deepseek-r1", hardware="gb200", precision="fp4", tp=72, ep=72, dp=72,
                              dp_attention=True, isl=512, osl=16, concurrency=72, num_prompts=72))
    assert m["num_chips"] == 72 and m["completed"] == 72
    assert CostModel(load_model("deepseek-r1"), get_chip("gb200"), Parallelism(tp=72, ep=72, dp_attention=True),
                     Precision(weights="fp4")).expert_slots == 288


def test_dp_with_dp_attention_is_the_attention_replica_count_or_refused():
    kw = dict(model="deepseek-r1", hardware="b200", precision="fp4", tp=8, ep=8, dp_attention=True, isl=256, osl=8,
              concurrency=8, num_prompts=8)
    one = run_scenario(Scenario(**kw))
    eight = run_scenario(Scenario(**kw, dp=8))  # SGLang --tp 8 --dp 8 --enable-dp-attention: one engine, 8 chips
    assert one["num_chips"] == eight["num_chips"] == 8 and one["median_tpot_ms"] == eight["median_tpot_ms"]
    with pytest.raises(ConfigError, match="--dp 4 with --dp-attention"):
        run_scenario(Scenario(**{**kw, "dp": 4}))
    with pytest.raises(ConfigError, match="does not apply to a disaggregated run"):
        run_scenario(Scenario(**{**kw, "dp_attention": False, "dp": 2, "decode_workers": 2}))


def test_chips_per_worker_and_tp_must_agree():
    sc = Scenario(model="deepseek-r1", hardware="b200", decode_chips_per_worker=8, decode_tp=4, concurrency=1)
    with pytest.raises(ConfigError, match="--decode-tp 4 and --decode-chips-per-worker 8 disagree"):
        sc.pool("decode")
    with pytest.raises(ConfigError, match="not a multiple"):
        Scenario(model="x", decode_chips_per_worker=6, decode_pp=4).pool("decode")


def test_stack_handoff_and_decode_slots_reach_the_scenario():
    # a small disaggregated run: --kv-handoff-ms shifts every TTFT by exactly that much at concurrency 1 (nothing
    # queues); --decode-max-num-seqs 1 at concurrency 4 makes prefilled requests wait for the decode slot
    base = dict(model="llama-3.1-8b", hardware="h200", isl=512, osl=16, prefill_workers=1, decode_workers=1)
    one = dict(base, concurrency=1, num_prompts=3)
    a = run_scenario(Scenario(**one, kv_handoff_ms=0.0))
    b = run_scenario(Scenario(**one, kv_handoff_ms=250.0))
    assert b["kv_transfer"]["handoff_ms"] == 250.0
    assert b["median_ttft_ms"] - a["median_ttft_ms"] == pytest.approx(250.0, rel=1e-6)
    assert b["median_tpot_ms"] == pytest.approx(a["median_tpot_ms"], rel=1e-9)
    # the profile's fitted value is the default for a stack
    from jalapeno.perf.frameworks import get_framework

    c = run_scenario(Scenario(**one, framework="dynamo-trt"))
    assert c["kv_transfer"]["handoff_ms"] == pytest.approx(get_framework("dynamo-trt").kv_handoff_ms)
    four = dict(base, concurrency=4, num_prompts=8)
    free = run_scenario(Scenario(**four))
    held = run_scenario(Scenario(**four, decode_max_num_seqs=1))
    assert free["kv_transfer"]["mean_admission_wait_ms"] == 0.0
    assert held["kv_transfer"]["mean_admission_wait_ms"] > 0
    assert held["median_ttft_ms"] > free["median_ttft_ms"] + held["median_tpot_ms"] * 10
    with pytest.raises(ConfigError):
        run_scenario(Scenario(**four, kv_handoff_ms=-1.0))


def test_prefill_token_ns_prices_each_prompt_token_in_the_prefill_pool_only():
    # concurrency 1, fixed 512-token prompts: one prefill step of 512 tokens, nothing queues. --prefill-token-ns
    # 10000 adds 512 x 10 us = 5.12 ms to that step and replaces the chip's front-end time per prompt token
    # (H200: request_overhead_us_per_token 8.06 since issue #13 step 8 -> 512 x 8.06 us = 4.127 ms less):
    # TTFT + 0.993 ms (hand count); nothing changes in the decode pool
    one = dict(model="llama-3.1-8b", hardware="h200", isl=512, osl=16, random_range_ratio=1.0, concurrency=1,
               num_prompts=3, prefill_workers=1, decode_workers=1, kv_handoff_ms=0.0)
    a = run_scenario(Scenario(**one, prefill_token_ns=0.0))
    b = run_scenario(Scenario(**one, prefill_token_ns=10_000.0))
    assert b["kv_transfer"]["prefill_token_ns"] == 10_000.0
    front_per_token_us = get_chip("h200").efficiency.request_overhead_us_per_token
    assert front_per_token_us == 8.06
    assert b["median_ttft_ms"] - a["median_ttft_ms"] == pytest.approx(512 * (10.0 - front_per_token_us) * 1e-3, rel=1e-6)
    assert b["median_tpot_ms"] == pytest.approx(a["median_tpot_ms"], rel=1e-9)
    # a stack's fitted value is the default; an engine profile has none
    from jalapeno.perf.frameworks import prefill_token_ns

    c = run_scenario(Scenario(**{**one, "hardware": "mi355x"}, framework="mori-sglang"))
    assert prefill_token_ns("mori-sglang", "native") > 0
    assert c["kv_transfer"]["prefill_token_ns"] == pytest.approx(prefill_token_ns("mori-sglang", "native"))
    # fitted on MI355X rows (and chips transferred from it): not carried to another family (H200 here)
    assert run_scenario(Scenario(**one, framework="mori-sglang"))["kv_transfer"]["prefill_token_ns"] == 0.0
    assert run_scenario(Scenario(**{**one, "hardware": "mi300x"}, framework="mori-sglang"))["kv_transfer"][
        "prefill_token_ns"] == pytest.approx(prefill_token_ns("mori-sglang", "native"))
    # per prefill weight precision: B200 dynamo-sglang FP4 has none (its prefill pools never saturated)
    assert prefill_token_ns("dynamo-sglang", "fp4") == 0.0 < prefill_token_ns("dynamo-sglang", "native")
    assert run_scenario(Scenario(**one, framework="sglang"))["kv_transfer"]["prefill_token_ns"] == 0.0
    with pytest.raises(ConfigError, match="prefill-token-ns"):
        run_scenario(Scenario(**one, prefill_token_ns=-1.0))


def test_an_ep_only_prefill_pool_takes_the_stacks_ep_only_prefill_cost():
    # one fixed 256-token prompt on an MI355X mori-sglang TP8 EP8 prefill worker without dp-attention (the
    # recipe's EP-only launch): its per-token prefill cost is the stack's prefill_ep_token_ns (FP8: 37767.8 ns)
    # instead of prefill_token_ns (20649.5 ns), so TTFT is 256 x (37767.8 - 20649.5) ns = 4.382 ms longer than
    # with the base value set explicitly (hand count); TPOT unchanged. With dp-attention, or in FP4 (no EP-only
    # value), the base value stays.
    from jalapeno.perf.frameworks import get_framework, prefill_token_ns

    fw = get_framework("mori-sglang")
    ep_ns, base_ns = dict(fw.prefill_ep_token_ns)["native"], dict(fw.prefill_token_ns)["native"]
    assert (ep_ns, base_ns) == (37767.8, 20649.5)
    assert prefill_token_ns("mori-sglang", "native", ep_only=True) == ep_ns
    assert prefill_token_ns("mori-sglang", "fp4", ep_only=True) == dict(fw.prefill_token_ns)["fp4"]
    assert prefill_token_ns("dynamo-sglang", "native", ep_only=True) == prefill_token_ns("dynamo-sglang", "native")
    one = dict(model="deepseek-r1", hardware="mi355x", isl=256, osl=8, random_range_ratio=1.0, concurrency=1,
               num_prompts=2, prefill_workers=1, prefill_chips_per_worker=8, prefill_ep=8, decode_workers=1,
               decode_chips_per_worker=8, decode_ep=8, framework="mori-sglang", kv_handoff_ms=0.0)
    auto = run_scenario(Scenario(**one))
    base = run_scenario(Scenario(**one, prefill_token_ns=base_ns))
    assert auto["kv_transfer"]["prefill_token_ns"] == ep_ns
    assert auto["median_ttft_ms"] - base["median_ttft_ms"] == pytest.approx(256 * (ep_ns - base_ns) * 1e-6, rel=1e-6)
    assert auto["median_tpot_ms"] == pytest.approx(base["median_tpot_ms"], rel=1e-9)
    dpa = run_scenario(Scenario(**one, prefill_dp_attention=True))
    assert dpa["kv_transfer"]["prefill_token_ns"] == base_ns
    tp = run_scenario(Scenario(**{**one, "prefill_ep": 1}))
    assert tp["kv_transfer"]["prefill_token_ns"] == base_ns
    # not carried to a chip family the stack was not fitted on
    assert run_scenario(Scenario(**{**one, "hardware": "b200"}))["kv_transfer"]["prefill_token_ns"] == 0.0


def test_dpa_decode_moe_layer_us_adds_to_each_decode_step_of_a_dp_attention_ep_pool_only():
    # one request, fixed lengths: every decode step of the dp-attention + EP8 decode worker gets 58 MoE layers
    # (DeepSeek-R1: 61 layers, the first 3 dense) x 200 us = 11.6 ms more (hand count), so TPOT does; TTFT not
    from jalapeno.models import load_model

    moe = sum(1 for i in range(61) if load_model("deepseek-r1").is_moe_layer(i))
    assert moe == 58
    one = dict(model="deepseek-r1", hardware="b200", precision="fp4", isl=256, osl=8, random_range_ratio=1.0,
               concurrency=1, num_prompts=2, prefill_workers=1, prefill_chips_per_worker=8, prefill_ep=8,
               decode_workers=1, decode_chips_per_worker=8, decode_ep=8, decode_dp_attention=True,
               kv_handoff_ms=0.0, prefill_token_ns=0.0)
    a = run_scenario(Scenario(**one, dpa_decode_moe_layer_us=0.0))
    b = run_scenario(Scenario(**one, dpa_decode_moe_layer_us=200.0))
    assert b["kv_transfer"]["dpa_decode_moe_layer_us"] == 200.0
    assert b["median_tpot_ms"] - a["median_tpot_ms"] == pytest.approx(moe * 200.0 * 1e-3, rel=1e-6)
    assert b["median_ttft_ms"] == pytest.approx(a["median_ttft_ms"], rel=1e-9)
    # a decode pool without dp-attention is untouched
    plain = {**one, "decode_dp_attention": False}
    c = run_scenario(Scenario(**plain, dpa_decode_moe_layer_us=0.0))
    d = run_scenario(Scenario(**plain, dpa_decode_moe_layer_us=200.0))
    assert d["kv_transfer"]["dpa_decode_moe_layer_us"] == 0.0
    assert d["median_tpot_ms"] == pytest.approx(c["median_tpot_ms"], rel=1e-9)
    with pytest.raises(ConfigError, match="dpa-decode-moe-layer-us"):
        run_scenario(Scenario(**one, dpa_decode_moe_layer_us=-1.0))


def test_an_sglang_stack_prefill_pool_batches_prompts_under_max_prefill_tokens():
    # two 6000-token prompts at once on a disaggregated SGLang stack: its prefill server batches prompts up to
    # SGLang's max_prefill_tokens (16384), so both prefill in ONE step of 12000 tokens and the first KV leaves
    # after it; the engine scheduler's default budget (8192 per step) would split the second prompt over two
    # steps. Hand count from the pool's own cost model and KV link
    from jalapeno.sim import scenario as S

    one = dict(model="llama-3.1-8b", hardware="h200", isl=6000, osl=2, random_range_ratio=1.0, concurrency=2,
               num_prompts=2, prefill_workers=1, decode_workers=1, framework="sglang-disagg")
    sc = Scenario(**one)
    lim = S.prefill_limits(sc, S.SimLimits())
    assert lim.scheduling.separate_prefill and lim.scheduling.max_prefill_tokens == 16384
    assert S.prefill_limits(Scenario(**{**one, "framework": None}), S.SimLimits()).scheduling is None
    m, r = run_scenario(sc, return_result=True)
    arch = load_model("llama-3.1-8b")
    cm_p = S._prefill_pool_model(sc, arch, sc.pool("prefill"))
    cm_d = S._decode_pool_model(sc, arch, sc.pool("decode"))
    link = S._kv_link(cm_p, cm_d, 1, 1, S.handoff_ms(sc) * 1e-3)
    front = cm_p.eff.request_overhead_ms * 1e-3 + cm_p.eff.request_overhead_us_per_token * 6000 * 1e-6
    both = cm_p.step(StepShape.from_lists([(6000, 0), (6000, 0)])).time_s
    ttft = sorted(o.ttft_s for o in r.outcomes)
    assert ttft[0] == pytest.approx(front + both + link.transfer_s(6000), rel=1e-9)
    # the second KV queues behind the first one's bytes on the worker's one link lane
    assert ttft[1] == pytest.approx(ttft[0] + link.busy_s(6000), rel=1e-9)


def test_routing_is_least_loaded_unless_the_flag_says_random_and_bad_values_are_one_line():
    # the MI355X stacks' recipe launches SGLang's PD router with --decode-policy random (billishyahao/sglang_disagg):
    # recorded, and what --routing random runs; every stack's default stays least-loaded (the random router
    # made the held-out TPOT worse, docs/fidelity.md); --routing overrides it
    from jalapeno.perf.frameworks import MI355X_SGLANG_DISAGG_ROUTER, router_policy

    assert MI355X_SGLANG_DISAGG_ROUTER == "random"
    assert {router_policy(f) for f in ("mori-sglang", "sglang-disagg", "dynamo-sglang", "sglang", None)} == {
        "least-loaded"}
    one = dict(model="llama-3.1-8b", hardware="mi355x", isl=256, osl=8, concurrency=2, num_prompts=4,
               prefill_workers=1, decode_workers=2)
    assert run_scenario(Scenario(**one, framework="mori-sglang"))["kv_transfer"]["routing"] == "least-loaded"
    assert run_scenario(Scenario(**one, framework="mori-sglang", routing=MI355X_SGLANG_DISAGG_ROUTER))[
        "kv_transfer"]["routing"] == "random"
    with pytest.raises(ConfigError, match="--routing 'rr' must be one of least-loaded, random"):
        run_scenario(Scenario(**one, routing="rr"))
    with pytest.raises(ConfigError, match="--routing applies to a disaggregated run"):
        run_scenario(Scenario(model="llama-3.1-8b", hardware="h200", concurrency=1, num_prompts=1, routing="random"))


def test_decode_first_token_steps_reach_the_scenario_from_the_stack_and_bad_values_are_one_line():
    # the SGLang stacks carry 3 decode-loop iterations (counted from the source, FIRST_TOKEN_STEPS_SOURCE); TRT-LLM's
    # and the engines' 0; the flag overrides it. At concurrency 4 the decode worker is busy when KV lands, so each
    # held iteration costs a decode step: the TTFT grows by at least one step per iteration, TPOT barely moves
    from jalapeno.perf.frameworks import SGLANG_FIRST_TOKEN_STEPS, first_token_steps

    assert SGLANG_FIRST_TOKEN_STEPS == 3.0
    assert [first_token_steps(f) for f in ("mori-sglang", "sglang-disagg", "dynamo-sglang")] == [3.0] * 3
    assert [first_token_steps(f) for f in ("dynamo-trt", "sglang", None)] == [0.0] * 3
    four = dict(model="llama-3.1-8b", hardware="h200", isl=512, osl=64, concurrency=4, num_prompts=16,
                prefill_workers=1, decode_workers=1)
    base = run_scenario(Scenario(**four, decode_first_token_steps=0))
    held = run_scenario(Scenario(**four, decode_first_token_steps=3))
    assert base["kv_transfer"]["first_token_steps"] == 0.0 and held["kv_transfer"]["first_token_steps"] == 3.0
    assert run_scenario(Scenario(**four, framework="sglang-disagg"))["kv_transfer"]["first_token_steps"] == 3.0
    # each transfer that lands on a busy worker waits 3 of its steps more (the first wave's first one lands on an
    # idle worker: none), so the mean wait grows by nearly 3 TPOTs and never more
    tpot = base["median_tpot_ms"]
    extra = held["kv_transfer"]["mean_decode_step_wait_ms"] - base["kv_transfer"]["mean_decode_step_wait_ms"]
    assert 2.5 * tpot < extra < 3 * tpot * 1.02
    # the median of a closed loop's TTFTs moves by less than the mean wait (the loop's arrivals re-phase against
    # the decode steps), but by more than one step
    assert held["median_ttft_ms"] > base["median_ttft_ms"] + tpot
    assert held["median_tpot_ms"] == pytest.approx(base["median_tpot_ms"], rel=0.1)
    with pytest.raises(ConfigError, match="--decode-first-token-steps must be >= 0 decode steps"):
        run_scenario(Scenario(**four, decode_first_token_steps=-1))
    with pytest.raises(ConfigError, match="--decode-first-token-steps applies to a disaggregated run"):
        run_scenario(Scenario(model="llama-3.1-8b", hardware="h200", concurrency=1, num_prompts=1,
                              decode_first_token_steps=2))


def test_the_nvidia_stacks_decode_all_to_all_term_reaches_hopper_but_their_prefill_term_does_not():
    # the dp-attention decode all-to-all (DeepEP low-latency dispatch + combine) is the vendor's library's: the
    # B200-fitted value prices H100 / H200 decode pools too; the B200 prefill term stays B200's; AMD chips and
    # non-dp-attention pools get neither. Each decode step of a dp-attention EP8 worker costs 58 MoE layers x the
    # stack's value more than the same scenario with the term forced to 0 (hand count), TTFT unchanged
    from jalapeno.perf.frameworks import get_framework
    from jalapeno.sim.scenario import dpa_decode_moe_layer_us, prefill_token_ns

    def sc(chip, stack, dpa=True, **kw):
        return Scenario(model="deepseek-r1", hardware=chip, precision="native", isl=256, osl=8,
                        random_range_ratio=1.0, concurrency=1, num_prompts=2, framework=stack, prefill_workers=1, prefill_chips_per_worker=8,
                        prefill_ep=1, decode_workers=1, decode_chips_per_worker=8, decode_ep=8,
                        decode_dp_attention=dpa, kv_handoff_ms=0.0, **kw)

    for stack in ("dynamo-sglang", "dynamo-trt"):
        us = get_framework(stack).dpa_decode_moe_layer_us
        assert us == 190.0
        for chip in ("h200", "h100", "b200", "gb200"):
            assert dpa_decode_moe_layer_us(sc(chip, stack)) == us, (chip, stack)
        assert dpa_decode_moe_layer_us(sc("mi355x", stack)) == 0.0  # AMD: not DeepEP
        assert dpa_decode_moe_layer_us(sc("mi300x", stack)) == 0.0
    assert prefill_token_ns(sc("h200", "dynamo-sglang")) == 0.0  # the prefill term: B200 only
    assert prefill_token_ns(sc("b200", "dynamo-sglang")) > 0.0
    assert dpa_decode_moe_layer_us(sc("h200", "mori-sglang")) == 0.0  # MoRI's value stays on MI355X's family
    a = run_scenario(sc("h200", "dynamo-sglang", prefill_token_ns=0.0, dpa_decode_moe_layer_us=0.0))
    b = run_scenario(sc("h200", "dynamo-sglang", prefill_token_ns=0.0))
    assert b["kv_transfer"]["dpa_decode_moe_layer_us"] == 190.0
    assert b["median_tpot_ms"] - a["median_tpot_ms"] == pytest.approx(58 * 190.0 * 1e-3, rel=1e-6)
    assert b["median_ttft_ms"] == pytest.approx(a["median_ttft_ms"], rel=1e-9)
    c = run_scenario(sc("h200", "dynamo-sglang", dpa=False, prefill_token_ns=0.0))
    assert c["kv_transfer"]["dpa_decode_moe_layer_us"] == 0.0
