"""The sweep pool's shortcuts against the plain path: cost models shared by a run's points, the point function
sent once per worker, forked workers with the simulator pre-imported, and the
spawn fallback — each gives the rows the plain path gives (every column but ``sim_wall_s``)."""

from __future__ import annotations

import inspect
import multiprocessing
import pickle
import random
import sys
from collections import Counter

import pytest

from jalapeno.report import pool
from jalapeno.report.grid import expand
from jalapeno.report.pool import PointRunner, execute, run_point, run_points
from jalapeno.report.spec import parse_sweep
from jalapeno.sim.factory import CostModelCache, _cache_key, cost_model_for
from jalapeno.testing.report_fakes import CountingPoint


#: every input a point's cost model depends on varies here: model (dense and MoE), chip, tp, ep, dp-attention,
#: KV precision; two concurrencies share each cost model
SMALL = """\
models: [llama-3.1-8b, gpt-oss-120b]
hardware: [h200, b200]
max_chips: 2
precisions: [{weights: native, kv: fp8}, {weights: native, kv: bf16}]
workloads: [{isl: 256, osl: 64}]
concurrencies: [4, 8]
num_prompts: 8
"""
#: disaggregated pools with a serving stack's fitted terms: cost models built from a modified efficiency block
DISAGG = """\
models: [deepseek-r1]
hardware: [b200]
precisions: [fp8]
framework: dynamo-sglang
max_chips: 8
parallelism: [{tp: 8}]
disaggregated:
  - {prefill: {workers: 1, tp: 8}, decode: {workers: 1, tp: 8, ep: 8, dp_attention: true}}
  - {prefill: {workers: 1, tp: 8}, decode: {workers: 2, tp: 8}}
workloads: [{isl: 256, osl: 64}]
concurrencies: [4, 8]
num_prompts: 8
"""


def _points(text: str) -> list[dict]:
    spec, _ = parse_sweep(text)
    return [{**p, "_order": i} for i, p in enumerate(expand(spec))]


def _same(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "sim_wall_s"} for r in rows]


@pytest.mark.parametrize("text, distinct", [(SMALL, (2 + 4) * 2 * 2), (DISAGG, None)])
def test_cached_cost_models_give_the_rows_of_fresh_ones(text, distinct):
    """Every point run by one runner, in a shuffled order (so each cost model is asked for after others), gives
    the row of a fresh run; the cache builds one cost model per distinct input set (hand count: 2 Llama and 4
    GPT-OSS layouts up to 2 chips × 2 chips × 2 KV precisions) and reuses it for the other concurrency."""
    pts = _points(text)
    fresh = {i: execute(run_point, p) for i, p in enumerate(pts)}
    runner = PointRunner()
    order = list(enumerate(pts))
    random.Random(7).shuffle(order)
    cached = {i: execute(runner, p) for i, p in order}
    assert _same([cached[i] for i in range(len(pts))]) == _same([fresh[i] for i in range(len(pts))])
    assert sum(r["status"] == "ok" for r in fresh.values()) >= 6
    cache = runner.cost_models
    assert cache.hits > 0 and cache.hits + cache.misses >= sum(r["status"] == "ok" for r in fresh.values())
    if distinct is not None:
        assert cache.misses == len(cache) == distinct
    else:  # the stack's per-pool terms: cost models keyed by their modified efficiency blocks too
        assert any(dict(k[2])["efficiency"] is not None for k in cache._models)


def test_cache_keys_every_input_of_cost_model_for():
    """Each argument of ``cost_model_for`` changes the key (so no input can be dropped from it), an efficiency
    block is keyed by its content, and a chip given as an object (not a catalogue key) is never cached."""
    base = dict(tp=1, ep=1, pp=1, dp_attention=False, precision="native", kv="bf16", efficiency=None, framework=None,
                hardware_dir=None, sram_pinning=None, power_cap_w=None, kv_sram_gb=0.0, kv_offload=None,
                chip_features=True, memory_fraction=None)
    params = [n for n in inspect.signature(cost_model_for).parameters if n not in ("model", "hardware")]
    assert sorted(params) == sorted(base)
    other = dict(tp=2, ep=2, pp=2, dp_attention=True, precision="fp8", kv="fp8", framework="sglang",
                 hardware_dir=["/x"], sram_pinning=True, power_cap_w=500.0, kv_sram_gb=1.0, kv_offload="host:64",
                 chip_features=False, memory_fraction=0.8)
    k0 = _cache_key("llama-3.1-8b", "h200", base)
    assert k0 is not None
    for name, v in other.items():
        assert _cache_key("llama-3.1-8b", "h200", {**base, name: v}) != k0, name
    assert _cache_key("llama-3.1-8b", "b200", base) != k0 and _cache_key("gpt-oss-120b", "h200", base) != k0
    cm = cost_model_for("llama-3.1-8b", "h200")
    eff = cm.eff
    cache = CostModelCache()
    a = cache.get("llama-3.1-8b", "h200", efficiency=eff)
    assert cache.get("llama-3.1-8b", "h200", efficiency=eff.model_copy()) is a  # equal content: one model
    b = cache.get("llama-3.1-8b", "h200", efficiency=eff.model_copy(update={"request_overhead_ms": 9.0}))
    assert b is not a and b.eff.request_overhead_ms == 9.0 and a.eff.request_overhead_ms == eff.request_overhead_ms
    assert _cache_key("llama-3.1-8b", cm.chip, base) is None
    assert cache.get("llama-3.1-8b", cm.chip) is not cache.get("llama-3.1-8b", cm.chip)
    assert (cache.hits, cache.misses, len(cache)) == (1, 2, 2)


def test_a_pickled_runner_starts_with_an_empty_cache():
    runner = PointRunner()
    runner.cost_models.get("llama-3.1-8b", "h200")
    assert len(runner.cost_models) == 1
    copy = pickle.loads(pickle.dumps(runner))
    assert len(copy.cost_models) == 0 and copy.cost_models.hits == copy.cost_models.misses == 0
    assert len(pickle.dumps(runner)) < 400  # the cache's models never travel


@pytest.mark.skipif(sys.platform != "linux", reason="fork is Linux's pool start method here")
def test_pool_sends_the_function_once_per_worker_and_forks_preloaded():
    """Two workers: each copy of the point function runs several points (it was not pickled with every task), the
    parent's preload is visible in the forked workers, and every point ran exactly once."""
    assert pool.pool_context().get_start_method() == "fork"
    pts = [{"model": "m", "hardware": "h200", "tp": 1, "ep": 1, "pp": 1, "dp": 1, "dp_attention": False,
            "isl": 1024, "osl": osl, "concurrency": c} for c in (4, 8, 16, 32) for osl in (128, 1024, 8192)]
    random.Random(3).shuffle(pts)
    rows = run_points(pts, point_fn=CountingPoint(), workers=2)
    assert [r["status"] for r in rows] == ["ok"] * len(pts)
    per_copy = Counter(r["pid"] for r in rows)
    assert len(per_copy) == 2
    assert {pid: max(r["copy_calls"] for r in rows if r["pid"] == pid) for pid in per_copy} == dict(per_copy)
    assert all(r["preloaded"] for r in rows)


def test_spawned_workers_give_the_rows_of_forked_ones_and_of_one_process(monkeypatch):
    """Where fork is not available the pool falls back to the platform's start method; a spawned worker imports
    the simulator itself and the rows are the same as forked workers' and one process's."""
    pts = [p for p in _points(SMALL) if p["model"] == "llama-3.1-8b" and p["hardware"] == "h200"]
    serial = run_points(pts, workers=1)
    forked = run_points(pts, workers=2)
    monkeypatch.setattr(pool, "pool_context", lambda: multiprocessing.get_context("spawn"))
    spawned = run_points(pts, workers=2)
    assert _same(forked) == _same(serial) and _same(spawned) == _same(serial)
    assert all(r["status"] == "ok" for r in serial)


def test_a_point_runs_without_the_cyclic_collector_and_gives_the_collected_row():
    """``execute`` pauses the cyclic collector over the whole point (the run and the freeing of its objects):
    no collection starts while it runs, even with a young-generation threshold of 10 allocations; the row equals
    the one of the same point run with the collector on at that threshold; the collector's state is restored
    (on, or off as the caller had it) also when the point function raises."""
    import gc

    point = _points(SMALL)[2]
    passes = []

    def count(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    def plain(p: dict) -> dict:  # the point with the collector running as often as it can
        gc.enable()
        return run_point(p)

    old = gc.get_threshold()
    was = gc.isenabled()
    gc.callbacks.append(count)
    try:
        gc.set_threshold(10, 10, 10)
        gc.enable()
        reference = pool._without_collector(plain, {k: point.get(k) for k in pool.POINT_KEYS})
        assert passes, "the reference run collects"
        during = []

        def watched(p: dict) -> dict:
            passes.clear()
            out = run_point(p)
            during.extend(passes)
            return out

        row = execute(watched, point)
        assert during == [] and gc.isenabled()
        assert row["status"] == "ok" and {k: row[k] for k in reference} == reference

        def boom(p: dict) -> dict:
            raise RuntimeError("a bug in a point")

        assert execute(boom, point)["error_kind"] == "bug" and gc.isenabled()
        gc.disable()
        execute(run_point, point)
        assert not gc.isenabled()
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*old)
        (gc.enable if was else gc.disable)()
