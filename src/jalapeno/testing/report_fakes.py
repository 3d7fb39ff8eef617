"""Helpers for the report tests (an importable module, so process pools and Ray workers can pickle them by
reference): a fake point function (a toy latency model through the real ``compute_metrics``), so sweep
mechanics can be tested without the simulator."""

from __future__ import annotations

import os
import time

from jalapeno.metrics import SLO, RequestOutcome, compute_metrics
from jalapeno.errors import CapacityError

CALLS: list[dict] = []
#: set by :meth:`CountingPoint.preload` (in the parent, before a forked pool starts)
PRELOADED = False


def fake_point(point: dict) -> dict:
    """TPOT grows with concurrency and shrinks with tp; an H100 cannot hold the model on one chip."""
    CALLS.append(point)
    if point["hardware"] == "h100" and point["tp"] == 1:
        raise CapacityError("weights need 200 GB, 80 GB per chip available")
    conc, tp = point["concurrency"], point["tp"]
    speed = {"b200": 2.0, "gb200": 2.0, "tpu-v6e": 4.0}.get(point["hardware"], 1.0)  # tpu-v6e: an uncalibrated chip that wins
    tpot = (0.005 + 0.001 * conc / tp) / speed
    ttft = 0.05 * point["isl"] / 1024
    osl = point["osl"]
    e2el = ttft + tpot * (osl - 1)
    outs = [RequestOutcome(True, point["isl"], osl, ttft, e2el) for _ in range(conc)]
    duration = e2el  # all `conc` requests in one wave
    slo = SLO(point.get("slo_ttft_ms"), point.get("slo_tpot_ms"))
    return compute_metrics(outs, duration, num_chips=tp, energy_j=500.0 * tp * duration, slo=slo, energy_source="predicted")




class CountingPoint:
    """A point function that reports which copy of itself ran each point: the process, how many points this copy
    has run (a copy unpickled per task would always say 1), whether :meth:`preload` ran in the process before,
    and when the point started (``time.monotonic``: one clock for all processes on Linux)."""

    def __init__(self) -> None:
        self.calls = 0

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.calls = 0

    @staticmethod
    def preload() -> None:
        global PRELOADED
        PRELOADED = True

    def __call__(self, point: dict) -> dict:
        self.calls += 1
        started = time.monotonic()
        time.sleep(0.05)  # long enough that both workers take points
        return {"pid": os.getpid(), "copy_calls": self.calls, "preloaded": PRELOADED, "started": started}
