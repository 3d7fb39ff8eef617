"""Disaggregated InferenceX layouts -> per-pool scenarios (``jalapeno.calibration.disagg``)."""

import numpy as np
import pytest

from jalapeno.calibration import points
from jalapeno.calibration.disagg import disagg_scenario, pool_fields
from jalapeno.sim.scenario import run_scenario

parse = getattr(points, "parse_disagg_layout", None)
pytestmark = pytest.mark.skipif(parse is None, reason="needs the disaggregated layout parser (calib13's points.py)")

LAYOUT = "disagg P: 1 worker(s) x TP1 EP8 DPattn=True (8 GPUs); D: 2 worker(s) x TP8 EP8 DPattn=False (16 GPUs)"


def test_layout_string_maps_to_the_pools_it_names():
    d = parse(LAYOUT)
    assert pool_fields(d.prefill) == {"prefill_workers": 1, "prefill_chips_per_worker": 8, "prefill_ep": 8,
                                      "prefill_dp_attention": True}
    assert pool_fields(d.decode) == {"decode_workers": 2, "decode_chips_per_worker": 8, "decode_ep": 8,
                                     "decode_dp_attention": False}
    # a recorded TP below the worker's GPUs can only be attention data-parallel over them
    odd = parse("disagg P: 1 worker(s) x TP1 EP8 DPattn=False (8 GPUs); D: 1 worker(s) x TP8 EP1 DPattn=False (8 GPUs)")
    assert pool_fields(odd.prefill)["prefill_dp_attention"] is True
    assert pool_fields(odd.decode)["decode_dp_attention"] is False


def test_disaggregated_point_simulates_with_both_pools():
    spec = points.SimSpec("deepseek-r1", "b200", parse(LAYOUT).decode.layout, "fp4", "bf16", 1024, 64, 8, 0.8,
                          num_prompts_per_concurrency=2, framework="dynamo-sglang", disagg=parse(LAYOUT))
    sc = disagg_scenario(spec)
    assert (sc.framework, sc.num_prompts, sc.pool("prefill").dp_attention, sc.pool("decode").dp_attention) == (
        "dynamo-sglang", 16, True, False)
    m = run_scenario(sc)
    assert m["num_chips"] == 24 and m["completed"] == 16
    # 24 B200s span three HGX nodes: KV crosses the NIC; each prefill GPU sends its own sequences
    assert m["kv_transfer"]["fabric"] == "scale-out" and m["kv_transfer"]["send_lanes"] == 8
    # the stack's profile: SGLang's front end under Dynamo, and Dynamo's fitted handoff on the KV link
    from jalapeno.perf.frameworks import get_framework

    assert m["kv_transfer"]["handoff_ms"] == pytest.approx(get_framework("dynamo-sglang").kv_handoff_ms)
    from jalapeno.perf.frameworks import prefill_token_ns

    assert m["kv_transfer"]["prefill_token_ns"] == pytest.approx(prefill_token_ns("dynamo-sglang", "fp4"))


def test_simulate_disagg_takes_the_stacks_prefill_cost_or_an_override():
    from jalapeno.calibration.disagg import simulate_disagg
    from jalapeno.perf.frameworks import get_framework

    # one request at a time, fixed 1024-token prompts: the stack's per-token prefill cost adds exactly
    # 1024 x prefill_token_ns to TTFT over an override of 0 and replaces B200's front-end time per prompt token
    # (1024 x request_overhead_us_per_token less; hand count), and nothing to TPOT
    spec = points.SimSpec("deepseek-r1", "b200", parse(LAYOUT).decode.layout, "native", "fp8", 1024, 16, 1, 1.0,
                          num_prompts_per_concurrency=2, framework="dynamo-sglang", disagg=parse(LAYOUT))
    stack = simulate_disagg(spec)
    zero = simulate_disagg(spec, prefill_token_ns=0.0)
    ns = dict(get_framework("dynamo-sglang").prefill_token_ns)["native"]
    from jalapeno.hardware import get_chip

    front = get_chip("b200").efficiency.request_overhead_us_per_token
    assert front > 0
    assert stack["median_ttft"] - zero["median_ttft"] == pytest.approx(1024 * (ns * 1e-9 - front * 1e-6), rel=1e-6)
    assert stack["median_tpot"] == pytest.approx(zero["median_tpot"], rel=1e-9)


def _point(ttft: float, tpot: float, c: int, isl: int = 8192, osl: int = 1024, framework: str = "mori-sglang",
           prefill: str = "TP8 EP8 DPattn=False"):
    from jalapeno.calibration.points import Point

    lay = parse(f"disagg P: 1 worker(s) x {prefill} (8 GPUs); D: 2 worker(s) x TP8 EP8 DPattn=False (16 GPUs)")
    spec = points.SimSpec("deepseek-r1", "mi355x", lay.decode.layout, "fp8", "fp8", isl, osl, c, 1.0,
                          framework=framework, disagg=lay)
    key = tuple(f"{ttft}-{c}" if k == "source_url" else "" for k in points._KEY_COLUMNS)
    return Point("T", key, ("T1",), {"median_ttft": ttft, "median_tpot": tpot}), spec


def test_prefill_rate_is_littles_law_against_the_cost_models_full_step():
    from jalapeno.calibration.disagg import fit_prefill_token_ns, prefill_rate
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.factory import cost_model_for

    # fixed lengths (ratio 1): c = 128 requests each in the loop for 20 s TTFT + 1023 x 20 ms = 40.46 s
    p, s = _point(20.0, 0.020, 128)
    r = prefill_rate(p, s)
    rate = 128 / (20.0 + 1023 * 0.020)
    assert r.measured_tok_s == pytest.approx(rate * 8192)  # one prefill worker
    cm = cost_model_for("deepseek-r1", "mi355x", tp=8, ep=8, precision="fp8", kv="fp8", framework="mori-sglang")
    # a full prefill step of the stack's SGLang prefill server: max_prefill_tokens 16384 = two 8192-token prompts
    from jalapeno.calibration.disagg import disagg_scenario, prefill_step_tokens

    assert prefill_step_tokens(disagg_scenario(s)) == 16384
    assert r.model_s_per_tok == pytest.approx(cm.step(StepShape.from_lists([(8192, 0)] * 2)).time_s / 16384)
    assert r.saturated and r.implied_ns == pytest.approx((1 / (rate * 8192) - r.model_s_per_tok) * 1e9)
    # not saturated: a short TTFT, or few requests waiting, or a decode-heavy shape
    assert not prefill_rate(*_point(0.5, 0.020, 128)).saturated
    assert not prefill_rate(*_point(1.5, 0.020, 128)).saturated  # 128/22 req/s x 1.5 s = 9 waiting < 32
    assert not prefill_rate(*_point(20.0, 0.020, 128, isl=1024, osl=1024)).saturated
    # the fit: median over saturated points; fewer than 3 saturated points -> refused (None)
    pts = [_point(t, 0.020, 128) for t in (20.0, 30.0, 40.0)] + [_point(0.3, 0.02, 4)]
    f = fit_prefill_token_ns(pts)["mori-sglang@fp8"]
    mid = prefill_rate(*pts[1]).implied_ns
    assert f["points"] == 3 and f["prefill_token_ns"] == pytest.approx(mid) and not f["pooled"]
    assert fit_prefill_token_ns(pts[:2])["mori-sglang@fp8"]["prefill_token_ns"] is None


def test_ep_only_prefill_points_give_their_own_value_pooled_over_the_chips_stacks():
    from jalapeno.calibration.disagg import fit_prefill_token_ns, prefill_rate

    # three saturated points of EP-only prefill workers (TP8 EP8 DPattn=False): each stack's base value is the
    # median of all its saturated points; the EP-only value the median of the EP-only ones, pooled over the chip's
    # stacks (2 mori-sglang + 1 sglang-disagg < 3 each) -> the middle of the three for both
    ep = [_point(20.0, 0.020, 128), _point(40.0, 0.020, 128), _point(30.0, 0.020, 128, framework="sglang-disagg")]
    tp = [_point(t, 0.020, 128, prefill="TP8 EP1 DPattn=False") for t in (15.0, 20.0, 25.0)]
    f = fit_prefill_token_ns(ep + tp)
    mid = prefill_rate(*ep[2]).implied_ns
    for st in ("mori-sglang", "sglang-disagg"):
        e = f[f"{st}@fp8/ep-only"]
        assert e["pooled"] == "mi355x" and e["prefill_ep_token_ns"] == pytest.approx(mid)
    assert f["mori-sglang@fp8/ep-only"]["points"] == 2 and f["sglang-disagg@fp8/ep-only"]["points"] == 1
    # TP-only (EP1) and dp-attention prefill points give no EP-only value
    only_tp = fit_prefill_token_ns(tp + [_point(t, 0.020, 128, prefill="TP1 EP8 DPattn=True") for t in (20.0, 30.0)])
    assert not any(k.endswith("/ep-only") for k in only_tp)
    assert only_tp["mori-sglang@fp8"]["points"] == 5
    # fewer than 3 EP-only points on the chip: refused
    assert fit_prefill_token_ns(ep[:2])["mori-sglang@fp8/ep-only"]["prefill_ep_token_ns"] is None


def test_an_ep_only_launch_recorded_as_tp1_gets_the_ep_only_value_though_priced_as_attention_dp():
    # "TP1 EP8 DPattn=False (8 GPUs)": the cost model reads the recorded TP1 as attention-DP over 8 GPUs, but the
    # recipe launched it without DP (EP only): the scenario carries the stack's EP-only FP8 value; recorded
    # DPattn=True keeps the stack's base value (None: resolved by the scenario); FP4 has no EP-only value
    from jalapeno.perf.frameworks import get_framework

    ep_ns = dict(get_framework("mori-sglang").prefill_ep_token_ns)["native"]

    def scen(prefill: str, weights: str = "native"):
        lay = parse(f"disagg P: 1 worker(s) x {prefill} (8 GPUs); D: 2 worker(s) x TP8 EP8 DPattn=False (16 GPUs)")
        spec = points.SimSpec("deepseek-r1", "mi355x", lay.decode.layout, weights, "fp8", 8192, 1024, 64, 0.8,
                              framework="mori-sglang", disagg=lay)
        return disagg_scenario(spec)

    odd = scen("TP1 EP8 DPattn=False")
    assert odd.pool("prefill").dp_attention and odd.prefill_token_ns == ep_ns
    assert scen("TP1 EP8 DPattn=True").prefill_token_ns is None
    assert scen("TP8 EP8 DPattn=False").prefill_token_ns is None  # the scenario resolves it from its own pool
    from jalapeno.sim.scenario import prefill_token_ns

    assert prefill_token_ns(scen("TP8 EP8 DPattn=False")) == ep_ns
    assert scen("TP1 EP8 DPattn=False", "fp4").prefill_token_ns == dict(get_framework("mori-sglang").prefill_token_ns)["fp4"]


def test_decode_step_is_the_measured_tpot_against_the_modelled_step_at_the_littles_law_batch():
    from jalapeno.calibration.disagg import decode_step, fit_dpa_decode_moe_layer_us
    from jalapeno.calibration.points import Point
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.factory import cost_model_for

    lay = parse("disagg P: 1 worker(s) x TP8 EP8 DPattn=False (8 GPUs); D: 2 worker(s) x TP8 EP8 DPattn=True (16 GPUs)")

    def pt(ttft, tpot, c, chip="mi355x", stack="sglang-disagg", mtp=0):
        spec = points.SimSpec("deepseek-r1", chip, lay.decode.layout, "fp8", "fp8", 1024, 1024, c, 1.0,
                              spec_tokens=mtp, framework=stack, disagg=lay)
        key = tuple(f"{ttft}-{tpot}-{c}-{chip}" if k == "source_url" else "" for k in points._KEY_COLUMNS)
        return Point("T", key, ("T1",), {"median_ttft": ttft, "median_tpot": tpot}), spec

    # c = 512, TTFT 0.5 s, TPOT 40 ms: 512 / (0.5 + 1023 x 0.04) req/s x 1023 x 0.04 s = 505.8 in decode,
    # 253 per decode worker, each at 1024 + 512 tokens of context
    d = decode_step(*pt(0.5, 0.040, 512))
    rate = 512 / (0.5 + 1023 * 0.040)
    b = round(rate * 1023 * 0.040 / 2)
    assert b == 253
    cm = cost_model_for("deepseek-r1", "mi355x", tp=8, ep=8, dp_attention=True, precision="fp8", kv="fp8",
                        framework="sglang-disagg")
    t = cm.step(StepShape.from_lists(decode_ctx=[1536] * b)).time_s
    assert d.model_s == pytest.approx(t) and d.moe_layers == 58
    assert d.implied_us == pytest.approx((0.040 - t) / 58 * 1e6)
    assert decode_step(*pt(0.5, 0.040, 512, mtp=1)) is None  # MTP: tokens per step unknown
    # per stack, median; a stack with too few points pools its chip's
    pts = [pt(0.5, x, 512) for x in (0.04, 0.05, 0.06)] + [pt(0.5, 0.05, 512, stack="mori-sglang")]
    f = fit_dpa_decode_moe_layer_us(pts)
    assert f["sglang-disagg"]["dpa_decode_moe_layer_us"] == pytest.approx(decode_step(*pts[1]).implied_us)
    assert f["mori-sglang"]["pooled"] == "mi355x" and f["mori-sglang"]["points"] == 1
    assert f["mori-sglang"]["dpa_decode_moe_layer_us"] == pytest.approx(
        float(np.median([decode_step(*q).implied_us for q in pts])))


def test_recipe_decode_slots_by_layout_hand_counted():
    from jalapeno.perf.frameworks import MI355X_SGLANG_DISAGG_SLOTS as slots
    from jalapeno.perf.frameworks import decode_max_running_requests

    # billishyahao/sglang_disagg: 160 per attention-DP rank x 8 ranks; 256 with EP; 128 plain TP
    assert slots.cap(8, 8, True) == 1280 and slots.cap(8, 8, False) == 256 and slots.cap(8, 1, False) == 128
    assert decode_max_running_requests("mori-sglang", 16, 16, True) == 2560
    assert decode_max_running_requests("sglang-disagg", 8, 1, False) == 128
    # stacks without a published recipe value, and engines: the engine default
    assert decode_max_running_requests("dynamo-sglang", 8, 8, True) is None
    assert decode_max_running_requests("sglang", 8, 1, False) is None


def test_recipe_decode_slots_hold_the_second_half_of_the_loop_until_the_first_finishes():
    from dataclasses import replace

    lay = parse("disagg P: 1 worker(s) x TP8 EP1 DPattn=False (8 GPUs); D: 1 worker(s) x TP8 EP1 DPattn=False (8 GPUs)")
    spec = points.SimSpec("deepseek-r1", "mi355x", lay.decode.layout, "native", "fp8", 256, 256, 256, 1.0,
                          num_prompts_per_concurrency=1, framework="mori-sglang", disagg=lay)
    sc = disagg_scenario(spec)
    m, res = run_scenario(sc, return_result=True)
    assert m["kv_transfer"]["decode_max_num_seqs"] == 128  # the recipe's TP8 (no EP) decode worker
    # 256 requests at once, 128 slots: the 128 requests that got no slot wait until one of the first 128 has
    # finished its 256 tokens, so the 129th-smallest TTFT is at least the smallest end-to-end latency
    ttft = sorted(o.ttft_s for o in res.outcomes)
    assert ttft[128] >= min(o.e2el_s for o in res.outcomes) - 1e-9
    assert m["kv_transfer"]["mean_admission_wait_ms"] > 0
    # --decode-max-num-seqs overrides the recipe: with 256 slots nobody waits for one
    free, res = run_scenario(replace(sc, decode_max_num_seqs=256), return_result=True)
    assert free["kv_transfer"]["decode_max_num_seqs"] == 256
    assert free["kv_transfer"]["mean_admission_wait_ms"] == 0
    assert sorted(o.ttft_s for o in res.outcomes)[128] < min(o.e2el_s for o in res.outcomes)


def test_weighted_median_ttft_weights_the_first_wave_as_a_ten_per_slot_run_would():
    from jalapeno.calibration.disagg import weighted_median_ttft
    from jalapeno.errors import ConfigError

    # concurrency 2: a first wave of two 10 s TTFTs (sent at t=0), then six later requests of 1..6 s.
    # 10 per slot: the first wave weighs 1/10 (0.05 each), the rest 9/10 (0.15 each): cumulative 0.15, 0.30,
    # 0.45, 0.60 reaches half at the 4 s request (the plain median of these 8 would be 4.5 s)
    start = [0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    ttft = [10.0, 10.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert weighted_median_ttft(start, ttft, 2) == 4.0
    # 2 per slot as the run itself (first wave = half): 0.25 each for the first wave, 1/12 for the rest:
    # 1..6 s sum to 0.5 at the 6 s request
    assert weighted_median_ttft(start, ttft, 2, per_slot=2) == 6.0
    # a run with only the first wave: its plain median
    assert weighted_median_ttft([0.0, 0.0], [1.0, 3.0], 2) == 2.0
    with pytest.raises(ConfigError, match="concurrency and per_slot must be >= 1"):
        weighted_median_ttft(start, ttft, 0)
    with pytest.raises(ConfigError, match="one start time per TTFT"):
        weighted_median_ttft([0.0], ttft, 2)


def test_recipe_decode_slots_follow_the_recorded_launch_flags():
    from jalapeno.calibration.disagg import recipe_decode_slots

    # "TP1 EP8 DPattn=False (8 GPUs)": the cost model reads attention-DP over the 8 GPUs, but the launcher saw
    # DP off and EP on, so --max-running-requests 256 (not 160 x 8)
    lay = parse("disagg P: 1 worker(s) x TP8 EP1 DPattn=False (8 GPUs); D: 2 worker(s) x TP1 EP8 DPattn=False (16 GPUs)")
    assert pool_fields(lay.decode)["decode_dp_attention"] is True
    assert recipe_decode_slots("mori-sglang", lay.decode) == 256
    spec = points.SimSpec("deepseek-r1", "mi355x", lay.decode.layout, "native", "fp8", 1024, 1024, 1024, 0.8,
                          framework="mori-sglang", disagg=lay)
    assert disagg_scenario(spec).decode_max_num_seqs == 256
    dpa = parse("disagg P: 1 worker(s) x TP1 EP8 DPattn=True (8 GPUs); D: 1 worker(s) x TP1 EP16 DPattn=True (16 GPUs)")
    assert recipe_decode_slots("sglang-disagg", dpa.decode) == 160 * 16
    assert recipe_decode_slots("dynamo-sglang", dpa.decode) is None  # no published B200 recipe value


def test_decode_occupancy_is_littles_law_against_the_recipe_slots_hand_counted():
    from dataclasses import replace
    from types import SimpleNamespace

    from jalapeno.calibration.disagg import decode_occupancy

    # 500 output tok/s per decode GPU x 16 decode GPUs / 1000-token outputs = 8 requests/s; decoding at once
    # 8 x 999 x 20 ms = 159.84; waiting for a first token 8 x 2 s = 16; the recipe's TP8 (no EP) decode worker
    # holds 128, two of them 256
    lay = parse("disagg P: 1 worker(s) x TP8 EP1 DPattn=False (8 GPUs); D: 2 worker(s) x TP8 EP1 DPattn=False (16 GPUs)")
    spec = points.SimSpec("deepseek-r1", "mi355x", lay.decode.layout, "native", "fp8", 1000, 1000, 176, 1.0,
                          framework="mori-sglang", disagg=lay)
    p = SimpleNamespace(label="hand", metrics={"output_tput_per_gpu": 500.0, "median_tpot": 0.020, "median_ttft": 2.0})
    o = decode_occupancy(p, spec)
    assert o.decoding == pytest.approx(159.84, rel=1e-12) and o.waiting == pytest.approx(16.0, rel=1e-12)
    assert (o.workers, o.slots) == (2, 128) and o.slot_share == pytest.approx(159.84 / 256, rel=1e-12)
    # a stack without published slots has no share
    assert decode_occupancy(p, replace(spec, framework="dynamo-sglang")).slot_share is None


def test_prefill_load_is_littles_law_on_the_prefill_side_at_the_pools_price():
    from jalapeno.calibration.disagg import prefill_load
    from jalapeno.errors import ConfigError
    from jalapeno.models import load_model
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim import scenario as S

    # fixed lengths: 16 decode GPUs at 160 tok/s each over 1024-token outputs = 2.5 requests/s; the prefill worker
    # (TP8 EP8, EP-only: the stack's EP-only per-token price) runs one 8192-token prompt alone, or two per
    # 16384-token SGLang batch; 20 s TTFT less front end + KV handoff and wire -> requests in prefill
    from dataclasses import replace

    p, s = _point(20.0, 0.020, 128)
    s = replace(s, weights="native")  # InferenceX's label for DeepSeek-R1's own FP8 weights
    p.metrics["output_tput_per_gpu"] = 160.0
    ld = prefill_load(p, s, sim_tput_per_gpu=320.0)
    assert ld.rate == pytest.approx(160.0 * 16 / 1024) and ld.sim_rate == pytest.approx(5.0)
    sc = disagg_scenario(s)
    cm = S._prefill_pool_model(sc, load_model("deepseek-r1"), sc.pool("prefill"))
    assert S.prefill_token_ns(sc) == 37767.8
    assert ld.one_s == pytest.approx(cm.step(StepShape.from_lists([(8192, 0)])).time_s)
    assert ld.batch_s == pytest.approx(cm.step(StepShape.from_lists([(8192, 0)] * 2)).time_s / 2)
    assert ld.rho_batch == pytest.approx(2.5 * ld.batch_s) and ld.sim_rho == pytest.approx(5.0 * ld.batch_s)
    assert ld.rho_one > ld.rho_batch
    assert 2.5 * 19.5 < ld.in_prefill < 2.5 * 20.0  # the fixed path (front end 41 ms + handoff 78.5 ms + wire) is < 0.5 s
    with pytest.raises(ConfigError, match="not a closed-loop"):
        prefill_load(p, points.SimSpec("deepseek-r1", "mi355x", s.layout, "fp8", "fp8", 8192, 1024, 128, 1.0))


def test_decode_gap_is_the_measured_tpot_against_the_decode_pools_step_at_the_littles_law_batch():
    from jalapeno.calibration.disagg import decode_gap
    from jalapeno.calibration.points import Point
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.factory import cost_model_for

    lay = parse("disagg P: 1 worker(s) x TP8 EP1 DPattn=False (8 GPUs); D: 3 worker(s) x TP8 EP1 DPattn=False (24 GPUs)")

    def pt(ttft, tpot, c, mtp=0):
        spec = points.SimSpec("deepseek-r1", "h200", lay.decode.layout, "fp8", "bf16", 8192, 1024, c, 1.0,
                              spec_tokens=mtp, framework="dynamo-sglang", disagg=lay)
        key = tuple(f"{ttft}-{tpot}-{c}" if k == "source_url" else "" for k in points._KEY_COLUMNS)
        return Point("T", key, ("T1",), {"median_ttft": ttft, "median_tpot": tpot}), spec

    # c = 32, TTFT 0.76 s, TPOT 15.7 ms: 32 / (0.76 + 1023 x 0.0157) req/s x 1023 x 0.0157 s = 30.6 in decode,
    # 10 per decode worker (3), each at 8192 + 512 tokens of context
    g = decode_gap(*pt(0.76, 0.0157, 32))
    assert g.batch == round(32 / (0.76 + 1023 * 0.0157) * 1023 * 0.0157 / 3) == 10
    cm = cost_model_for("deepseek-r1", "h200", tp=8, ep=1, dp_attention=False, precision="fp8", kv="bf16",
                        framework="dynamo-sglang")
    t = cm.step(StepShape.from_lists(decode_ctx=[8704] * 10)).time_s
    assert g.model_s == pytest.approx(t, rel=1e-9)
    assert g.gap_ms == pytest.approx((0.0157 - t) * 1e3) and g.layout == "TP8 EP1 x3"
    assert decode_gap(*pt(0.76, 0.0157, 32, mtp=1)) is None  # MTP: tokens per step unknown
