"""Real servers on free loopback ports: the simulated backend (no weights) behind the real app and engine."""

from __future__ import annotations

import pytest

from jalapeno.server.app import build_app
from jalapeno.server.background import BackgroundServer
from jalapeno.server.build import build_sim

#: a small, fast simulated deployment (the cost model prices it; nothing runs)
SIM_CHIP, SIM_MODEL = "h100", "llama-3.1-8b"
API_KEY = "test-key-123"


def start_sim(time_scale: float = 0.0, api_key: str | None = None, **kw):
    served = build_sim(SIM_CHIP, SIM_MODEL, time_scale=time_scale, api_key=api_key, **kw)
    srv = BackgroundServer(build_app(served.engine, served.codec, served.config)).start()
    return served, srv


@pytest.fixture(scope="module")
def sim_server():
    """(served, server) at time-scale 0: as fast as the engine steps."""
    served, srv = start_sim(0.0)
    yield served, srv
    srv.stop()


@pytest.fixture(scope="module")
def keyed_server():
    served, srv = start_sim(0.0, api_key=API_KEY)
    yield served, srv
    srv.stop()


@pytest.fixture(scope="module")
def make_sim_server():
    """Factory: ``make_sim_server(time_scale, api_key=None) -> (served, server)``; servers stop at teardown."""
    started = []

    def make(time_scale: float = 0.0, api_key: str | None = None, **kw):
        served, srv = start_sim(time_scale, api_key, **kw)
        started.append(srv)
        return served, srv

    yield make
    for srv in started:
        srv.stop()
