"""One factory builds every simulated engine: one set of default limits, and callers that simulate the same
load get the same numbers (``jalapeno simulate``, ``bench --compare-sim``, calibration, the server's engine)."""

from __future__ import annotations

import numpy as np
import pytest

from jalapeno.bench.client import BenchRequest
from jalapeno.bench.compare import simulate_workload
from jalapeno.bench.loadgen import LoadSpec
from jalapeno.calibration.points import Layout, SimSpec
from jalapeno.calibration.predict import simulate as predict
from jalapeno.server.build import sim_engine
from jalapeno.sim import DEFAULT_MIN_NUM_SEQS, SimLimits, build_sim_engines, cost_model_for
from jalapeno.sim.scenario import Scenario, run_scenario
from jalapeno.workload import inferencex_workload


def test_default_limits_never_cap_the_load_and_cover_every_decode():
    # hand counts: max_num_seqs = max(1024, in flight); batched tokens >= seqs x (1 + spec tokens)
    cfg = SimLimits().engine_config(in_flight=8)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.block_size) == (DEFAULT_MIN_NUM_SEQS, 8192, 16)
    cfg = SimLimits().engine_config(in_flight=3000)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == (3000, 8192)
    cfg = SimLimits().engine_config(in_flight=9000)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == (9000, 9000)
    cfg = SimLimits().engine_config(in_flight=4096, spec_tokens=3)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.num_speculative_tokens) == (4096, 16384, 3)
    cfg = SimLimits(max_num_seqs=16, max_num_batched_tokens=1024, block_size=32).engine_config(in_flight=64)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.block_size) == (16, 1024, 32)


def test_replicas_get_their_own_backend_and_single_step_streams():
    cm = cost_model_for("llama-3.1-8b", "h100")
    a, b = build_sim_engines(cm, 2)
    assert a.backend is not b.backend and a.backend.cm is cm is b.backend.cm
    assert a.backend.max_multi_step > 1
    (one,) = build_sim_engines(cm, 1, single_step=True)
    assert one.backend.max_multi_step == 1


def test_simulate_and_compare_sim_give_the_same_metrics_for_the_same_load():
    sc = Scenario(model="llama-3.1-8b", hardware="h100", isl=256, osl=64, concurrency=4, num_prompts=12, seed=5)
    want = run_scenario(sc)
    wl = inferencex_workload(256, 64, concurrency=4, num_prompts=12, seed=5)
    reqs = [BenchRequest("x", int(i), int(o)) for i, o in zip(wl.input_lens, wl.output_lens)]
    got = simulate_workload(reqs, np.zeros(len(reqs)), LoadSpec(concurrency=4), hardware="h100",
                            model="llama-3.1-8b")
    shared = [k for k in got if k in want]
    assert len(shared) > 20
    assert {k: got[k] for k in shared} == {k: want[k] for k in shared}


def test_calibration_predicts_what_simulate_prints():
    spec = SimSpec(model="llama-3.1-8b", chip="h200", layout=Layout(tp=1), weights="native", kv="bf16", isl=512,
                   osl=128, concurrency=8, range_ratio=0.8, num_prompts_per_concurrency=2)
    p = predict(spec, frameworks=False)
    m = run_scenario(Scenario(model="llama-3.1-8b", hardware="h200", isl=512, osl=128, concurrency=8,
                              num_prompts=16))
    assert p["median_tpot"] == pytest.approx(m["median_tpot_ms"] * 1e-3, rel=1e-12)
    assert p["output_tput_per_gpu"] == pytest.approx(m["output_throughput_per_chip"], rel=1e-12)


def test_the_servers_engine_comes_from_the_factory():
    engine, arch = sim_engine("h100", "llama-3.1-8b")
    assert engine.config.max_num_seqs == DEFAULT_MIN_NUM_SEQS
    assert engine.config.max_model_len == int(arch.max_position_embeddings)
    assert engine.backend.max_multi_step == 1  # a server releases each step's tokens
    capped, _ = sim_engine("h100", "llama-3.1-8b", limits=SimLimits(max_num_seqs=256))
    assert capped.config.max_num_seqs == 256
