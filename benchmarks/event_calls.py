"""The Python and C calls of engine events of one InferenceX grid point, and its events by kind.

    python benchmarks/event_calls.py TP EP DPA ISL OSL CONC [FIRST] [COUNT]
    python benchmarks/event_calls.py 8 8 0 1024 8192 1024 3000 100

Runs the point of ``examples/inferencex-grid.yaml`` with that layout (``DPA``: 1 for DP attention), workload and
concurrency through ``execute(PointRunner(), point)`` (the sweep workers' path), counts every call made during
events ``FIRST`` .. ``FIRST + COUNT - 1`` with ``sys.setprofile`` (Python calls by function, C calls by callee and
caller; the client's calls between events included, and this script's wrapper: one Python call per event), and classifies every event of the run by the engine's state at its start (something waiting: an
admission event) and whether something finished in it. Used for docs/performance.md "The grid, eighth pass".
"""

from __future__ import annotations

import collections
import sys

from jalapeno.engine import engine as engine_mod
from jalapeno.report.grid import expand
from jalapeno.report.pool import PointRunner, execute
from jalapeno.report.spec import load_sweep


def grid_point(tp: int, ep: int, dpa: int, isl: int, osl: int, conc: int) -> dict:
    for p in expand(load_sweep("examples/inferencex-grid.yaml")):
        key = (p["tp"], p["ep"], int(bool(p["dp_attention"])), p["isl"], p["osl"], p["concurrency"])
        if not p.get("skip_reason") and key == (tp, ep, dpa, isl, osl, conc):
            return p
    raise SystemExit(f"no such point in examples/inferencex-grid.yaml: {tp, ep, dpa, isl, osl, conc}")


def main(argv: list[str]) -> None:
    if len(argv) < 6:
        raise SystemExit(__doc__)
    point = grid_point(*(int(x) for x in argv[:6]))
    first, count = (int(argv[6]) if len(argv) > 6 else 3000), (int(argv[7]) if len(argv) > 7 else 100)
    py: collections.Counter = collections.Counter()
    c: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    state = {"n": 0}

    def profile(frame, event, arg):
        if event == "call":
            py[(frame.f_code.co_filename.split("jalapeno/")[-1], frame.f_code.co_name)] += 1
        elif event == "c_call":
            c[(getattr(arg, "__qualname__", str(arg)), frame.f_code.co_name)] += 1

    step = engine_mod.Engine._step

    def counted(self, outputs):
        n = state["n"] = state["n"] + 1
        kind = "admission" if (self.scheduler.waiting or self.scheduler.inbox) else "decode"
        if n == first + count:
            sys.setprofile(None)
        elif n == first:  # on from here to the end of event first + count - 1, the client's calls between included
            sys.setprofile(profile)
        done = step(self, outputs)
        kinds[kind + (", finish" if done else "")] += 1
        return done

    engine_mod.Engine._step = counted
    try:
        row = execute(PointRunner(), point)
    finally:
        sys.setprofile(None)
        engine_mod.Engine._step = step
    events = sum(kinds.values())
    print(f"{row['status']}: {events} events; by kind " + ", ".join(f"{k} {v / events:.1%}" for k, v in sorted(kinds.items())))
    print(f"events {first}..{first + count - 1}: {sum(py.values()) / count:.1f} Python calls and "
          f"{sum(c.values()) / count:.1f} C calls per event")
    for (f, name), v in py.most_common(60):
        print(f"{v / count:8.2f}  {f}:{name}")
    print("C calls (callee, caller):")
    for (callee, caller), v in c.most_common(25):
        print(f"{v / count:8.2f}  {callee} in {caller}")


if __name__ == "__main__":
    main(sys.argv[1:])
