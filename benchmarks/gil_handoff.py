"""The mechanism behind a served closed loop's first-wave admission, in isolation (issue 16, twelfth session): a
thread blocked on a queue (the server's engine thread, idle) is woken by the first of ``n`` hand-overs while another
thread (the event loop) keeps the GIL busy with ``s`` of Python work per request; how many requests has the woken
thread drained when it first runs? CPython forces a GIL switch only after ``sys.getswitchinterval()`` (5 ms), so
about 1 + 5 ms / s: the requests the engine's first step admits when a wave's requests are ready back to back.

    python benchmarks/gil_handoff.py [--trials 7] [--n 16]

Prints, per per-request time, the drained counts of each trial (sorted) against 1 + switch interval / s. A few
seconds; timing-sensitive: record the load (``uptime``) beside the output.
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
import time


def _busy(s: float) -> None:
    end = time.perf_counter() + s
    while time.perf_counter() < end:
        pass


def drained_at_first_wake(per_request_s: float, n: int = 16) -> int:
    """Requests the woken thread took in its first drain, ``n`` handed over ``per_request_s`` of GIL work apart."""
    q: queue.SimpleQueue = queue.SimpleQueue()
    got: list[int] = []

    def engine() -> None:
        q.get(timeout=10)
        k = 1
        while True:
            try:
                q.get_nowait()
            except queue.Empty:
                break
            k += 1
        got.append(k)

    th = threading.Thread(target=engine)
    th.start()
    time.sleep(0.05)  # let it block on the queue (idle)
    for i in range(n):
        q.put(i)
        _busy(per_request_s)
    th.join()
    return got[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--n", type=int, default=16, help="requests in the wave")
    args = ap.parse_args()
    if args.trials < 1 or args.n < 1:
        print("error: --trials and --n must be >= 1", file=sys.stderr)
        raise SystemExit(2)
    sw = sys.getswitchinterval()
    print(f"switch interval {sw * 1e3:.1f} ms; load {os.getloadavg()[0]:.1f}; {os.cpu_count()} cpus")
    for s in (0.0002, 0.0005, 0.001, 0.002, 0.004, 0.008):
        ks = sorted(drained_at_first_wake(s, args.n) for _ in range(args.trials))
        print(f"{s * 1e3:.1f} ms of loop work per request: drained at first wake {ks}; "
              f"1 + {sw * 1e3:.0f} ms / s = {min(args.n, 1 + sw / s):.1f}")


if __name__ == "__main__":
    main()
