"""A real simulated server on a free loopback port for the bench client to measure, and the closed-loop script
(benchmarks/sim_vs_engine.py) loaded as a module."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from jalapeno.server.app import build_app
from jalapeno.server.background import BackgroundServer
from jalapeno.server.build import build_sim


def _start(chip: str, model: str, time_scale: float, **kw):
    served = build_sim(chip, model, time_scale=time_scale, **kw)
    return served, BackgroundServer(build_app(served.engine, served.codec, served.config)).start()


@pytest.fixture(scope="module")
def fast_server():
    """llama-3.1-8b on one simulated H100, as fast as the engine steps (time-scale 0)."""
    served, srv = _start("h100", "llama-3.1-8b", 0.0)
    yield served, srv
    srv.stop()


@pytest.fixture(scope="module")
def realtime_server():
    """llama-3.1-70b FP8 on one simulated H200 at real-time pace (decode steps of ~16 ms)."""
    served, srv = _start("h200", "llama-3.1-70b", 1.0, precision="fp8")
    yield served, srv
    srv.stop()


@pytest.fixture(scope="module")
def sve():
    """benchmarks/sim_vs_engine.py loaded as a module (it is a script, not a package member)."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "sim_vs_engine.py"
    spec = importlib.util.spec_from_file_location("sim_vs_engine", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
