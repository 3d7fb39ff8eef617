"""Disaggregated InferenceX layouts -> per-pool scenarios (``jalapeno.calibration.disagg``)."""

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
