"""Cost-model behaviour: the seeds' roofline argument, capacity/config errors, energy, multi-step decode."""

from __future__ import annotations

import numpy as np
import pytest
from perf_refdata import (
    DEEPSEEK_R1, GPT_OSS_120B, GROQ_LP30, GROQ_LPU, H100, H200, LLAMA_8B, LLAMA_70B, LLAMA_405B, chip,
)

from jalapeno.errors import CapacityError, ConfigError
from jalapeno.perf import CostModel, Parallelism, Precision, StepShape, advance_decode


def per_token_latency(cm: CostModel, batch: int, ctx: int = 1000) -> float:
    return cm.step(StepShape.from_lists(decode_ctx=[ctx] * batch)).time_s


@pytest.mark.parametrize("groq,par", [(GROQ_LP30, Parallelism(tp=8, pp=32)), (GROQ_LPU, Parallelism(tp=16, pp=36))])
def test_sram_resident_group_wins_batch1_latency_and_loses_per_chip_throughput(groq, par):
    sram = CostModel(LLAMA_70B, groq, par, Precision("fp8"))
    hbm = CostModel(LLAMA_70B, H200, Parallelism(tp=8), Precision("fp8"))
    assert sram.memory_plan(256).weights_in_sram and sram.memory_plan(256).weight_location == "sram"
    assert not hbm.memory_plan().weights_in_sram
    assert per_token_latency(sram, 1) < per_token_latency(hbm, 1) / 2

    def per_chip_tput(cm, b):
        return b / per_token_latency(cm, b) / cm.num_chips

    ratios = [per_chip_tput(sram, b) / per_chip_tput(hbm, b) for b in (1, 8, 64, 256)]
    assert all(a > b for a, b in zip(ratios, ratios[1:]))
    assert ratios[-1] < ratios[0] / 5
    # H200 stays weight-bound (flat) at small batch; the SRAM group is compute-bound almost at once
    assert per_token_latency(hbm, 8) < 1.2 * per_token_latency(hbm, 1)
    assert per_token_latency(sram, 64) > 4 * per_token_latency(sram, 1)


def test_capacity_error_when_weights_do_not_fit():
    with pytest.raises(CapacityError, match="does not fit"):
        CostModel(LLAMA_405B, H100, Parallelism(tp=1), Precision("bf16"))
    with pytest.raises(CapacityError, match="does not fit.*SRAM"):
        CostModel(LLAMA_70B, GROQ_LPU, Parallelism(tp=8), Precision("fp8"))
    # fits with enough chips
    CostModel(LLAMA_405B, H200, Parallelism(tp=8), Precision("fp8"))


def test_capacity_error_when_no_room_for_kv():
    tight = chip("tight", {"bf16": 1000}, [{"name": "hbm", "kind": "hbm", "gb": 18.5, "tbps": 3}], 450, 2, 8, 700)
    cm = CostModel(LLAMA_8B, tight, precision=Precision("bf16"))  # 16.06 GB of weights fit in 16.65 GB usable
    with pytest.raises(CapacityError, match="no room for the KV cache"):
        cm.memory_plan(max_batch_tokens=8192)


@pytest.mark.parametrize(
    "model,par,prec,msg",
    [
        (LLAMA_8B, Parallelism(tp=3), Precision(), "num_heads"),
        (LLAMA_8B, Parallelism(tp=2, ep=2), Precision(), "dense model"),
        (DEEPSEEK_R1, Parallelism(tp=512, ep=512, dp_attention=True), Precision(), "num_experts"),  # ep > E (ep=6 is fine: redundant slots)
        (LLAMA_8B, Parallelism(pp=40), Precision(), "num_layers"),
    ],
)
def test_config_errors_name_the_value(model, par, prec, msg):
    with pytest.raises(ConfigError, match=msg):
        CostModel(model, H200, par, prec)


@pytest.mark.parametrize("kw,msg", [({"tp": 0}, "tp=0"), ({"tp": 4, "ep": 3}, "ep=3 must divide tp=4")])
def test_parallelism_validation(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        Parallelism(**kw)


@pytest.mark.parametrize("kw", [{"weights": "fp2"}, {"kv": "int8"}])
def test_precision_validation(kw):
    with pytest.raises(ConfigError):
        Precision(**kw)


def test_kv_heads_replicated_beyond_tp_and_indivisible_rejected():
    big = chip("big", {"bf16": 1000}, [{"name": "hbm", "kind": "hbm", "gb": 200, "tbps": 5}], 450, 2, 64, 700)
    CostModel(LLAMA_70B, big, Parallelism(tp=16))  # 8 kv heads, 16 ranks: replicated
    odd = LLAMA_70B.__class__(**{**LLAMA_70B.__dict__, "num_kv_heads": 6})
    with pytest.raises(ConfigError, match="num_kv_heads=6"):
        CostModel(odd, big, Parallelism(tp=4))


def _decode_equivalence(cm, ctxs, k, window=None, per_seq=1):
    shape = StepShape.from_lists(decode_ctx=ctxs, window=window, decode_tokens_per_seq=per_seq)
    t, e = cm.decode_steps(shape, k)
    ref = [cm.step(StepShape.from_lists(decode_ctx=[c + i for c in ctxs], window=window, decode_tokens_per_seq=per_seq))
           for i in range(k)]
    np.testing.assert_allclose(t, [r.time_s for r in ref], rtol=1e-12)
    np.testing.assert_allclose(e, [r.energy_j for r in ref], rtol=1e-12)
    for i in (0, k - 1):  # advance_decode reproduces the same shapes
        assert cm.step(advance_decode(shape, i, window)) == ref[i]


def test_decode_steps_equals_repeated_step():
    _decode_equivalence(CostModel(LLAMA_8B, H200, precision=Precision("bf16")), [5, 700, 3000, 17], 50)
    _decode_equivalence(CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8, dp_attention=True)), [100] * 32, 20)
    _decode_equivalence(CostModel(LLAMA_8B, H200), [10, 20], 7, per_seq=3)  # speculative verification rows
    gpt = CostModel(GPT_OSS_120B, H200)
    _decode_equivalence(gpt, [300, 1000, 129], 30, window=128)  # all beyond the window
    _decode_equivalence(gpt, [10, 50, 90], 30, window=128)  # all stay below it
    _decode_equivalence(gpt, [120, 500], 30, window=128)  # one crosses, capped sum
    with pytest.raises(ConfigError):
        gpt.decode_steps(StepShape.from_lists(prefill=[(10, 0)]), 3)


def test_energy_hand_count_and_tdp_cap():
    energy = {"pj_per_flop": {"bf16": 0.5}, "pj_per_byte": {"hbm": 20.0}, "pj_per_network_byte": 0.0}
    c = chip("e", {"bf16": 1000}, [{"name": "hbm", "kind": "hbm", "gb": 100, "tbps": 4}], 450, 2, 8, 1000,
             energy=energy, idle=100.0)
    cm = CostModel(LLAMA_8B, c, precision=Precision("bf16"))
    cost = cm.step(StepShape.from_lists(decode_ctx=[100] * 8))
    hand = 100.0 * cost.time_s + cost.flops * 0.5e-12 + cost.bytes * 20e-12
    assert cost.energy_j == pytest.approx(hand, rel=1e-9)
    hot = chip("hot", {"bf16": 1000}, [{"name": "hbm", "kind": "hbm", "gb": 100, "tbps": 4}], 450, 2, 8, 300,
               energy={**energy, "pj_per_flop": {"bf16": 5.0}}, idle=100.0)
    pre = CostModel(LLAMA_8B, hot, precision=Precision("bf16")).step(StepShape.from_lists(prefill=[(4096, 0)]))
    assert pre.avg_power_w == pytest.approx(300.0)  # capped at TDP


def test_energy_fallbacks_when_chip_has_no_energy_block():
    cm = CostModel(LLAMA_8B, H200, precision=Precision("bf16"))  # fixture H200 has no energy block
    pre = cm.breakdown(StepShape.from_lists(prefill=[(4096, 0)]))
    dec = cm.breakdown(StepShape.from_lists(decode_ctx=[100]))
    assert 0.2 * 700 < dec.avg_power_w < pre.avg_power_w <= 700 + 1e-9
    assert dec.joules_per_token > pre.joules_per_token  # decode is the expensive phase per token


def test_dp_attention_cuts_mla_kv_replication():
    tp = CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8))
    dpa = CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8, dp_attention=True))
    assert dpa.memory_plan().kv_capacity_tokens > 5 * tp.memory_plan().kv_capacity_tokens
    s = StepShape.from_lists(decode_ctx=[4000] * 128)
    assert dpa.breakdown(s).op("attention").total_bytes < tp.breakdown(s).op("attention").total_bytes / 4
    ops = {o.name for o in dpa.breakdown(s).ops}
    assert {"moe_dispatch", "moe_combine"} <= ops and "attn_allreduce" not in ops


def test_step_is_consistent_with_breakdown_for_mixed_batches():
    cm = CostModel(GPT_OSS_120B, H200, Parallelism(tp=2))
    s = StepShape.from_lists(prefill=[(512, 1000), (300, 0)], decode_ctx=[10, 2000, 64], window=128)
    cost, bd = cm.step(s), cm.breakdown(s)
    assert cost.time_s == pytest.approx(sum(o.time_s for o in bd.ops))
    assert cost.flops == pytest.approx(bd.flops)
    assert cost.bytes == pytest.approx(bd.total_bytes)
    assert bd.tokens == 812 + 3


def test_empty_step_costs_nothing():
    cm = CostModel(LLAMA_8B, H200)
    assert cm.step(StepShape()).time_s == 0.0
    t, e = cm.decode_steps(StepShape(), 4)
    assert not t.any() and not e.any()


def test_pipeline_stages_respect_sram_and_cover_all_layers():
    cm = CostModel(LLAMA_70B, GROQ_LP30, Parallelism(tp=8, pp=32), Precision("fp8"))
    stages = cm._stages
    assert [i for r in stages for i in r] == list(range(80)) and all(len(r) >= 1 for r in stages)
    assert cm.memory_plan(256).weight_bytes_per_chip <= 0.5e9
    assert max(len(r) for r in stages) - min(len(r) for r in stages[1:-1]) <= 1  # middle stages balanced


def test_partial_sram_pinning_puts_always_read_weights_first():
    mixed = chip("mixed", {"bf16": 1000, "fp8": 2000},
                 [{"name": "sram", "kind": "sram", "gb": 1.0, "tbps": 30},
                  {"name": "hbm", "kind": "hbm", "gb": 100, "tbps": 4}],
                 450, 2, 8, 700)
    off = CostModel(LLAMA_8B, mixed, Parallelism(tp=8), Precision("bf16"))
    assert off.memory_plan().sram_weight_bytes_per_chip == 0
    cm = CostModel(LLAMA_8B, mixed, Parallelism(tp=8), Precision("bf16"), sram_pinning=True)
    h, L, V = 4096, 32, 128256
    qkv, o = L * h * 48 * 128 / 8 * 2, L * h * h / 8 * 2
    norms, head, emb = (2 * L + 1) * h * 2, V * h / 8 * 2, V * h / 8 * 2
    plan = cm.memory_plan()
    assert not plan.weights_in_sram
    assert plan.sram_weight_bytes_per_chip == pytest.approx(qkv + o + norms + head + emb, rel=1e-12)
    assert plan.weight_bytes_per_chip - plan.sram_weight_bytes_per_chip == pytest.approx(L * 3 * h * 14336 / 8 * 2)
    bd = cm.breakdown(StepShape.from_lists(decode_ctx=[1]))
    assert set(bd.op("qkv_proj").bytes) == {"sram"}
    assert bd.op("mlp").bytes.get("hbm", 0) > 0.9 * bd.op("mlp").total_bytes
    # the same chip without SRAM pinning is slower at batch 1
    plain = chip("plain", {"bf16": 1000, "fp8": 2000}, [{"name": "hbm", "kind": "hbm", "gb": 100, "tbps": 4}],
                 450, 2, 8, 700)
    slow = CostModel(LLAMA_8B, plain, Parallelism(tp=8), Precision("bf16"))
    assert cm.step(StepShape.from_lists(decode_ctx=[1])).time_s < slow.step(StepShape.from_lists(decode_ctx=[1])).time_s


def test_closed_form_decode_steps_equal_the_matrix_path_and_fall_back_at_a_bound_change():
    """decode_steps prices a run of decode steps as one line per step time when no operator changes bound;
    it must equal evaluating every step (the matrix path), and hand over to it when an operator does."""
    rng = np.random.default_rng(7)
    models = [
        CostModel(LLAMA_8B, H200, precision=Precision("bf16")),
        CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8)),
        CostModel(GPT_OSS_120B, H200),
    ]
    used = {"affine": 0, "matrix": 0}
    for _ in range(60):
        cm = models[int(rng.integers(len(models)))]
        w = cm.model.sliding_window
        ctxs = [int(c) for c in rng.integers(1, 6000, size=int(rng.integers(1, 300)))]
        shape = StepShape.from_lists(decode_ctx=ctxs, window=w or None)
        k = int(rng.integers(1, 200))
        ref = cm._decode_steps_matrix(shape, k)
        got = cm._decode_steps_affine(shape, k)
        used["matrix" if got is None else "affine"] += 1
        t, e = cm.decode_steps(shape, k)
        np.testing.assert_allclose(t, ref[0], rtol=1e-12)
        np.testing.assert_allclose(e, ref[1], rtol=1e-12)
    assert used["affine"] > 30
    # DeepSeek-R1 with DP attention: all 128 heads on each rank share the latent cache, so the absorbed decode
    # attention's FLOPs per KV byte sit near the chip's ridge and a long enough run turns it compute-bound;
    # the closed form must decline and the matrix path price each step
    dpa = CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8, dp_attention=True))
    crossing = StepShape.from_lists(decode_ctx=[1])
    assert dpa._decode_steps_affine(crossing, 20000) is None
    t = dpa.decode_steps(crossing, 20000)[0]
    np.testing.assert_allclose(t[[0, 9999, 19999]], [dpa.step(StepShape.from_lists(decode_ctx=[1 + i])).time_s
                                                    for i in (0, 9999, 19999)], rtol=1e-12)


def test_decode_step_lists_are_the_vectorised_floats_bit_for_bit():
    """The simulator prices short decode runs in Python floats: the lists must hold exactly the floats of the
    vectorised decode_steps (closed form and matrix fallback, with and without the verify row)."""
    rng = np.random.default_rng(11)
    models = [CostModel(LLAMA_8B, H200, precision=Precision("bf16")), CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8)),
              CostModel(GPT_OSS_120B, H200), CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8, dp_attention=True))]
    for _ in range(80):
        cm = models[int(rng.integers(len(models)))]
        w = cm.model.sliding_window
        ctxs = [int(c) for c in rng.integers(1, 6000, size=int(rng.integers(1, 300)))]
        per = int(rng.integers(1, 3))
        shape = StepShape.from_lists(decode_ctx=ctxs, window=w or None, decode_tokens_per_seq=per)
        k = int(rng.integers(1, 70)) if rng.random() < 0.9 else 20000
        t, e = cm.decode_steps(shape, k)
        lt, le = cm.decode_step_lists(shape, k)
        assert lt == t.tolist() and le == e.tolist()


def test_decode_step_lists_stop_prices_exactly_the_steps_run():
    """With ``stop`` the lists end at the first step whose end (``start`` + durations summed one by one)
    reaches it: the plain reference prices all ``k`` steps, then cuts where bisection over the summed ends says
    (closed form and matrix fallback, stops before, inside and after the run)."""
    from bisect import bisect_left
    from itertools import accumulate

    rng = np.random.default_rng(5)
    models = [CostModel(LLAMA_8B, H200, precision=Precision("bf16")), CostModel(GPT_OSS_120B, H200),
              CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8, dp_attention=True))]
    cut_inside = 0
    for _ in range(120):
        cm = models[int(rng.integers(len(models)))]
        w = cm.model.sliding_window
        ctxs = [int(c) for c in rng.integers(1, 6000, size=int(rng.integers(1, 300)))]
        shape = StepShape.from_lists(decode_ctx=ctxs, window=w or None)
        k = int(rng.integers(2, 70))
        full_t, full_e = cm.decode_step_lists(shape, k)
        start = float(rng.uniform(0, 100))
        stop = start + float(rng.uniform(-0.01, 1.3)) * sum(full_t)
        ends = list(accumulate(full_t, initial=start))
        run = min(k, bisect_left(ends, stop, 1))
        t, e = cm.decode_step_lists(shape, k, start, stop)
        assert t == full_t[:run] and e == full_e[:run]
        cut_inside += 1 < run < k
        assert cm.decode_step_lists(shape, k, start, None) == (full_t, full_e)
    assert cut_inside > 20


def _plain_affine_line(cm: CostModel, shape: StepShape, k: int):
    """``CostModel._affine_line`` as first written (one bound flag per operator compared with its value at the
    run's last step; the feature vector through ``np.array``, the slopes unmemoised): the reference for the
    closed form the simulator prices every decode run with."""
    assert not cm._small_m and not cm.kv_sram_tokens
    d = shape.decode_seqs
    r = shape.decode_tokens / d if d else 0.0
    km, dcw = k - 1, float(d)
    window = cm.model.attention_window
    if window:
        dcw = float(shape.decode_below_window)
        if shape.decode_ctx_sum_window + km * dcw > d * window:
            return None
    y0 = cm._M.dot(cm._x(shape)).tolist()
    g = cm._M_ctx.dot(np.array((d, dcw, d * r, dcw * r))).tolist()
    n = cm._n
    a_t, b_t = y0[2 * n], g[2 * n]
    for tc, dc, tm, dm in zip(y0[:n], g[:n], y0[n : 2 * n], g[n : 2 * n]):
        first = tc >= tm
        if first != (tc + dc * km >= tm + dm * km):
            return None
        if first:
            a_t += tc
            b_t += dc
        else:
            a_t += tm
            b_t += dm
    return a_t, b_t, y0[2 * n + 1], g[2 * n + 1]


@pytest.mark.parametrize("args", [
    "--model gpt-oss-120b --hardware h200 --tp 8 --isl 1024 --osl 512 --concurrency 64 --num-prompts 160",
    "--model deepseek-r1 --hardware h200 --tp 8 --ep 8 --precision fp8 --isl 1024 --osl 512 --concurrency 32 "
    "--num-prompts 80",
])
def test_the_closed_form_of_every_decode_run_of_a_simulation_equals_the_plain_one(args, monkeypatch, capsys):
    """Every decode run a whole simulation prices (sliding-window GPT-OSS-120B; DeepSeek-R1 with EP, KV-bound
    so runs are cut by block crossings) gets exactly the plain reference's line; so do random decode shapes
    with long runs, where the window cap binds or an operator changes bound (DeepSeek-R1 with DP attention
    turns compute-bound) and both give None."""
    from jalapeno.cli import main

    import jalapeno.perf

    seen: list[tuple[CostModel, StepShape, int, object]] = []

    class Recording(CostModel):  # a subclass the simulation builds: the native build calls methods directly
        def _affine_line(self, shape, k):
            out = super()._affine_line(shape, k)
            seen.append((self, shape, k, out))
            return out

    monkeypatch.setattr(jalapeno.perf, "CostModel", Recording)  # what the simulator's factory builds
    with pytest.raises(SystemExit) as exc:
        main(["simulate", *args.split(), "--json"])
    assert not exc.value.code
    capsys.readouterr()
    monkeypatch.undo()
    assert len(seen) > 50 and all(out is not None for *_, out in seen[-10:])
    for cm, shape, k, out in seen:
        assert out == _plain_affine_line(cm, shape, k)
    rng = np.random.default_rng(3)
    models = [seen[0][0], CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8, dp_attention=True))]
    declined = 0
    for _ in range(100):
        cm = models[int(rng.integers(len(models)))]
        w = cm.model.sliding_window
        few = rng.random() < 0.5  # a few short contexts: DP attention's decode turns compute-bound in a long run
        ctxs = [int(c) for c in rng.integers(1, 300 if few else 6000, size=int(rng.integers(1, 8 if few else 300)))]
        shape = StepShape.from_lists(decode_ctx=ctxs, window=w or None)
        for k in (int(rng.integers(1, 200)), 20_000):
            got = cm._affine_line(shape, k)
            assert got == _plain_affine_line(cm, shape, k)
            declined += got is None
    crossing = StepShape.from_lists(decode_ctx=[1])
    assert models[1]._affine_line(crossing, 20_000) is None is _plain_affine_line(models[1], crossing, 20_000)
    assert declined > 10
