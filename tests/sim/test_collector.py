"""The collector policy around a simulation: raised young-generation threshold inside, the previous thresholds
restored afterwards (also when the run raises), and the same metrics either way."""

from __future__ import annotations

import contextlib
import gc
import json

import pytest

from jalapeno.sim.collector import SIM_GEN0_THRESHOLD, simulation_collector
from jalapeno.sim import scenario
from jalapeno.sim.scenario import Scenario, run_scenario


def test_threshold_raised_inside_and_restored_after_an_error():
    old = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with pytest.raises(RuntimeError):
            with simulation_collector():
                assert gc.get_threshold() == (SIM_GEN0_THRESHOLD, 10, 10)
                raise RuntimeError("boom")
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(10 * SIM_GEN0_THRESHOLD, 5, 5)  # never lowered
        with simulation_collector():
            assert gc.get_threshold() == (10 * SIM_GEN0_THRESHOLD, 5, 5)
        assert gc.get_threshold() == (10 * SIM_GEN0_THRESHOLD, 5, 5)
    finally:
        gc.set_threshold(*old)


def test_a_run_restores_the_thresholds_and_matches_one_with_frequent_collections(monkeypatch):
    old = gc.get_threshold()
    sc = Scenario(model="llama-3.1-8b", hardware="h200", isl=256, osl=64, concurrency=16, num_prompts=64)
    with monkeypatch.context() as m:
        m.setattr(scenario, "simulation_collector", contextlib.nullcontext)
        try:
            gc.set_threshold(50, 2, 2)  # collections all the time: results must not depend on them
            eager = run_scenario(sc)
            assert gc.get_threshold() == (50, 2, 2)
        finally:
            gc.set_threshold(*old)
    lazy = run_scenario(sc)
    assert gc.get_threshold() == old
    eager.pop("sim", None), lazy.pop("sim", None)  # wall-clock of the run
    assert json.dumps(eager, sort_keys=True, default=str) == json.dumps(lazy, sort_keys=True, default=str)
