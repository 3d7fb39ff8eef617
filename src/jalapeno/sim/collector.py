"""The garbage collector while a simulation runs: collect the young generation every 50,000 net allocations,
not every 700 (CPython's default).

A simulation builds its workload's requests up front and keeps every request's sequence and outcome alive to
the end, so nearly every tracked object it allocates survives; with the default thresholds the collector scans
them again and again on the way to the oldest generation (measured, CPU time of the collector: 3.0–3.6 s of a
17 s rack-scale GB200 point with 81,920 requests, 0.2 s of the 3 s GPT-OSS-120B c1024 point; issue #19). The
simulation's objects are freed by reference counting; the little cyclic garbage it makes is still collected,
at most one raised threshold of allocations late (≈ +30 MB peak at the rack-scale point). Results do not
depend on when the collector runs. The previous thresholds come back when the run ends, also on an error.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: young-generation threshold while a simulation runs (CPython's default is 700)
SIM_GEN0_THRESHOLD = 50_000


@contextmanager
def simulation_collector(gen0: int = SIM_GEN0_THRESHOLD) -> Iterator[None]:
    """Raise the collector's young-generation threshold to at least ``gen0`` inside the block (the older
    generations' thresholds unchanged); restore the previous thresholds on exit."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], gen0), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
