"""Ceiling prototypes for one ``jalapeno simulate`` point (docs/performance.md, "Fifteenth session (speed15)").

    python benchmarks/sim_oracle.py MODE simulate <flags> --json

MODE: ``base`` (as is); ``record`` (write every priced result — ``CostModel.decode_step_lists`` and
``CostModel.step``, in call order — to ``$ORACLE_FILE``, default ``/tmp/sim_oracle_prices.pkl``); ``replay``
(return the recorded results in order instead of pricing: what the run costs with pricing free, the ceiling of any
pricing change); ``fold`` (``EngineTarget.advance`` steps the engine again while nothing finished and the client gave
no horizon — then its turn between two events would change nothing: the ceiling of folding the client's turn away);
``kinds`` (CPU time per event kind: preempted / admitted / finished, one step or several, the group alone or not).
Run ``record`` first, then ``base`` / ``replay`` / ``fold`` under ``valgrind --tool=callgrind`` (their JSON is the
recorded run's, byte for byte). Monkeypatches only; the CLI runs in-process, without the cyclic collector.
"""

from __future__ import annotations

import collections
import gc
import os
import pickle
import sys
import time

MODES = ("base", "record", "replay", "fold", "kinds")


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] not in MODES:
        raise SystemExit(__doc__)
    mode, args = argv[0], argv[1:]
    path = os.environ.get("ORACLE_FILE", "/tmp/sim_oracle_prices.pkl")
    from jalapeno.perf import model as pm

    rec: list = []
    kinds_t: collections.Counter = collections.Counter()
    kinds_n: collections.Counter = collections.Counter()
    if mode == "record":
        d0, s0 = pm.CostModel.decode_step_lists, pm.CostModel.step

        def d(self, *a):
            r = d0(self, *a)
            rec.append(r)
            return r

        def s(self, shape):
            r = s0(self, shape)
            rec.append(r)
            return r

        pm.CostModel.decode_step_lists, pm.CostModel.step = d, s
    elif mode == "replay":
        with open(path, "rb") as f:
            pop = collections.deque(pickle.load(f)).popleft
        pm.CostModel.decode_step_lists = lambda self, *a: pop()
        pm.CostModel.step = lambda self, shape: pop()
    elif mode == "fold":
        from jalapeno.sim import client as cl

        def advance(self, horizon):
            e = self.engine
            e.next_event_s = horizon
            step, busy = e.step_finished, e.scheduler.has_unfinished
            while True:
                done = step()
                if done or horizon is not None or not busy():
                    return done

        cl.EngineTarget.advance = advance
    elif mode == "kinds":
        from jalapeno.engine import engine as em
        from jalapeno.engine import scheduler as sm

        state = {"pre": 0, "batch": None}
        preempt, schedule, step = sm.Scheduler._preempt, sm.Scheduler.schedule, em.Engine._step

        def counting_preempt(self, seq):
            state["pre"] += 1
            return preempt(self, seq)

        def keeping_schedule(self, max_steps=1):
            state["batch"] = b = schedule(self, max_steps)
            return b

        def timed_step(self, outputs):
            s = self.scheduler
            state["pre"], n0 = 0, len(s.running)
            t = time.perf_counter()
            done = step(self, outputs)
            t = time.perf_counter() - t
            b = state["batch"]
            admitted = len(s.running) + state["pre"] + len(done) - n0
            kind = ("preempt " if state["pre"] else "") + ("admit " if admitted else "") + ("finish " if done else "")
            kind += ("multi-step" if b is not None and b.num_steps > 1 else "one step")
            kind += (", the group alone" if b is not None and b.num_grouped == len(b.chunks) else "")
            kinds_t[kind] += t
            kinds_n[kind] += 1
            return done

        sm.Scheduler._preempt, sm.Scheduler.schedule, em.Engine._step = counting_preempt, keeping_schedule, timed_step
    from jalapeno.cli import main as cli

    gc.disable()
    t = time.process_time()
    try:
        cli(args)
    except SystemExit as exc:
        if exc.code:
            raise
    finally:
        print(f"{mode}: {time.process_time() - t:.3f} CPU s after imports", file=sys.stderr)
        if mode == "record":
            with open(path, "wb") as f:
                pickle.dump(rec, f)
        if kinds_n:
            tot, n = sum(kinds_t.values()), sum(kinds_n.values())
            print(f"{n} events, {tot:.3f} s in Engine._step", file=sys.stderr)
            for k, v in kinds_t.most_common():
                print(f"  {kinds_n[k]:7d} ({kinds_n[k] / n:5.1%})  {v:6.3f} s ({v / tot:5.1%})  "
                      f"{v / kinds_n[k] * 1e6:6.1f} us  {k}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
