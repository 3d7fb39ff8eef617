"""Topology: hop counts against the seeds, all-to-all contention against hand counts, and what they do to MoE TPOT."""

import math

import pytest

from jalapeno.hardware import get_chip
from jalapeno.hardware.schema import Fact, NetworkLink
from jalapeno.perf.network import alltoall_contention, collective, hops, mean_hops
from jalapeno.perf.shape import StepShape
from jalapeno.sim.client import run_workload
from jalapeno.sim.factory import build_sim_engine, cost_model_for
from jalapeno.workload import inferencex_workload

ONE = Fact(value=1, source="test", status="inferred")


def link(topology: str) -> NetworkLink:
    return NetworkLink(bandwidth_gbps=ONE, latency_us=ONE, topology=topology)


def test_seed_diameters_on_1024_chips():
    # the seeds: BoardFly "max 7 hops vs 3D Torus's 16" on TPU 8i's 1,024-chip pod
    assert hops(link("boardfly"), 1024) == 7
    assert hops(link("torus3d"), 1024) == 16  # 8 x 8 x 16: 4 + 4 + 8
    assert hops(link("boardfly"), 4) == 1 and hops(link("boardfly"), 32) == 3  # one board; one group


def test_alltoall_contention_hand_counts():
    # 3D torus 8x8x16: mean distance per ring of d is (d*d/4)/d over all d positions (self included)
    assert mean_hops(link("torus3d"), 1024) == pytest.approx((2 + 2 + 4) * 1024 / 1023)
    # bisection: half the bytes cross the cut through the 16-long dimension, 2*1024/16 links of bw/6 each
    assert alltoall_contention(link("torus3d"), 1024) == pytest.approx((1024 * 1 / 4) / (2 * 1024 / 16 / 6))
    # BoardFly: 3 chips on the board (1 hop), 28 in the group (2 * 3/4 + 1), 992 elsewhere (4 * 3/4 + 2 * 7/8 + 1)
    bf = (3 * 1 + 28 * 2.5 + 992 * 5.75) / 1023
    assert mean_hops(link("boardfly"), 1024) == pytest.approx(bf)
    assert alltoall_contention(link("boardfly"), 1024) == pytest.approx(bf)
    assert alltoall_contention(link("switch"), 72) == 1.0  # non-blocking up to its radix
    assert alltoall_contention(link("ring"), 8) == pytest.approx(8 * 8 / 4 / 7)  # mean distance 16/7 > n/4 = 2


def _variants():
    base = get_chip("tpu-8i").model_copy(update={"collective_engine": None})
    torus = base.model_copy(update={"scale_up": base.scale_up.model_copy(update={"topology": "torus3d", "max_hops": None})})
    return base, torus


def test_alltoall_slower_on_a_torus_through_latency_and_bandwidth():
    bf_chip, torus_chip = _variants()
    eff = bf_chip.efficiency
    bf, to = collective(bf_chip, eff, 1024, "alltoall"), collective(torus_chip, eff, 1024, "alltoall")
    lat, bw = 1e-6, 1200e9 * eff.scale_up
    assert bf.latency_s == pytest.approx(7 * lat) and to.latency_s == pytest.approx(16 * lat)
    assert bf.s_per_byte == pytest.approx(5.6466 / bw, rel=1e-4) and to.s_per_byte == pytest.approx(12 / bw)


def test_moe_tpot_shows_the_torus_contention():
    """DeepSeek-R1 over 1,024 TPU 8i chips (tp 1024, ep 256, dp-attention): a decode step's extra time on a
    3D torus is the hand-counted difference: 9 more hops on every collective plus the dispatch and combine
    bandwidth term stretched from BoardFly's 5.65 to the torus bisection's 12."""
    bf_chip, torus_chip = _variants()
    kw = dict(tp=1024, ep=256, dp_attention=True, precision="fp8", kv="fp8")
    cm_bf, cm_to = cost_model_for("deepseek-r1", bf_chip, **kw), cost_model_for("deepseek-r1", torus_chip, **kw)
    m = cm_bf.model
    moe_layers = sum(m.is_moe_layer(i) for i in range(m.num_layers))
    bw = 1200e9 * bf_chip.efficiency.scale_up

    def extra(batch: int) -> tuple[float, float]:
        shape = StepShape(decode_seqs=batch, decode_tokens=batch, decode_ctx_sum=batch * 1000,
                          decode_ctx_sum_window=batch * 1000)
        msg = batch * m.experts_per_token * m.hidden_size * 2 / 1024 * (1 - 1 / 256) * (1024 / 256)
        # every collective crosses 16 - 7 more hops: dispatch + combine per MoE layer, the dense layers' ring
        # all-reduce (two phases; its bandwidth term is contention-free on both) and the logits gather
        hand_lat = (2 * moe_layers + 2 * (m.num_layers - moe_layers) + 1) * (16 - 7) * 1e-6
        hand_bw = 2 * moe_layers * msg * (12 - 5.6466) / bw
        return cm_to.step(shape).time_s - cm_bf.step(shape).time_s, hand_lat + hand_bw, hand_bw

    for batch in (256, 8192):
        got, want, bw_part = extra(batch)
        assert got == pytest.approx(want, rel=1e-3)
        assert bw_part > 0
    assert extra(8192)[2] > 10 * extra(256)[2]  # the bandwidth part grows with the batch, the latency part not

    wl = inferencex_workload(1024, 256, concurrency=256, num_prompts=512, seed=3)
    tpot = {}
    for name, cm in (("boardfly", cm_bf), ("torus", cm_to)):
        tpot[name] = run_workload(build_sim_engine(cm), wl).metrics()["median_tpot_ms"]
    d_step = extra(256)[1] * 1e3
    assert tpot["torus"] > tpot["boardfly"]
    assert tpot["torus"] - tpot["boardfly"] == pytest.approx(d_step, rel=0.25)


def test_collective_engine_hides_decode_collectives():
    chip = get_chip("tpu-8i")
    off = chip.model_copy(update={"collective_engine": None})
    kw = dict(tp=64, ep=64, dp_attention=True, precision="fp8", kv="fp8")
    on_cm, off_cm = cost_model_for("deepseek-r1", chip, **kw), cost_model_for("deepseek-r1", off, **kw)
    shape = StepShape(decode_seqs=512, decode_tokens=512, decode_ctx_sum=512 * 2000, decode_ctx_sum_window=512 * 2000)
    t_on = {o.name: o.time_s for o in on_cm.breakdown(shape).ops}
    t_off = {o.name: o.time_s for o in off_cm.breakdown(shape).ops}
    lat = 2 * 58 * hops(chip.scale_up, 64) * 1e-6 / 2  # one of the two collectives' latency over the 58 MoE layers
    hide = float(chip.collective_engine.overlap)
    assert t_on["moe_dispatch"] - lat == pytest.approx((t_off["moe_dispatch"] - lat) * (1 - hide))
    assert math.isclose(t_on["moe_dispatch"] + t_on["moe_combine"] - 2 * lat,
                        (1 - hide) * (t_off["moe_dispatch"] + t_off["moe_combine"] - 2 * lat), rel_tol=1e-9)


def test_lp30_rack_is_a_dragonfly_of_trays():
    """LP30's 96 C2C links per chip: 8-chip trays fully connected, the rack one group: at most 3 hops across a
    rack (a 4-port 16x16 mesh would need 30)."""
    up = get_chip("groq-lp30").scale_up
    assert (up.topology, up.board_size, up.group_size) == ("dragonfly", 8, 256)
    assert [hops(up, n) for n in (8, 128, 256)] == [1, 3, 3]
    # 7 tray-mates at 1 hop; the other 120 chips: tray hop (7 of 8 times) + inter-tray link + tray hop
    assert mean_hops(up, 128) == pytest.approx((7 + 120 * (2 * 7 / 8 + 1)) / 127)
    assert hops(link("mesh"), 256) == 30


def test_a_cross_node_all_reduce_of_32_kib_costs_what_nccl_measures_on_hopper_nics():
    # published: NCCL all_reduce over 4 nodes x 8 B200 with a 400 Gb/s NIC per GPU (stas00/ml-engineering
    # network/README.md @744d01e, AWS P6-B200, EFA v4): busbw 1.2 GB/s at 32 KiB. busbw = algbw x 2(n-1)/n, so one
    # all-reduce of 32 KiB over n = 32 takes 32768 / (1.2e9 / (2 x 31 / 32)) = 52.9 us. B200 is the measured chip;
    # H100/H200 and MI355X carry the same 400 Gb/s-per-GPU NIC class: their cost model's 32-rank all-reduce must
    # land within 10% of it (the previous 5 us per NIC message gave 12 us, a quarter)
    from jalapeno.hardware import get_chip
    from jalapeno.perf.network import collective

    measured_s = 32768 / (1.2e9 / (2 * 31 / 32))
    assert measured_s == pytest.approx(52.9e-6, rel=1e-3)
    for key in ("h100", "h200", "b200", "mi355x"):
        chip = get_chip(key)
        c = collective(chip, chip.efficiency, 32, "allreduce")
        assert c.latency_s + 32768 * c.s_per_byte == pytest.approx(measured_s, rel=0.10)
        # inside one 8-GPU node nothing changes: NVLink only
        inside = collective(chip, chip.efficiency, 8, "allreduce")
        assert inside.latency_s < 5e-6
