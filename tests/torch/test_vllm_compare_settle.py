"""benchmarks/vllm_cpu_compare.py: a side is timed only once vLLM's processes stop busy-polling.

A stand-in for vLLM's process group (a child in its own session) spins for a while after "a request", as vLLM's
worker does for ~1 s; ``settle`` must wait it out, and ``group_cpu_s`` must see the CPU it burned.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
vc = pytest.importorskip("vllm_cpu_compare")

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")

SPIN_S = 0.8
CHILD = f"import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < {SPIN_S}: pass\ntime.sleep(60)\n"


@pytest.fixture
def spinner():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], start_new_session=True)
    try:
        yield SimpleNamespace(proc=proc)
    finally:
        proc.kill()
        proc.wait()


def test_settle_waits_for_a_busy_group(spinner):
    started = time.perf_counter()
    waited = vc.settle(spinner, 0.0)
    spun = vc.group_cpu_s(spinner.proc.pid)
    assert spun > 0.05  # the child's own CPU, counted through its process group
    assert time.perf_counter() - started >= SPIN_S * 0.9  # not timed before the spin ended
    assert waited < SPIN_S + 5  # and no longer than needed
    # idle now: a second settle returns after its minimum plus one window
    waited = vc.settle(spinner, 0.1)
    assert waited < 0.1 + 4 * 0.2 + 0.5
    assert vc.group_cpu_s(spinner.proc.pid) - spun < 0.05


def test_timed_beside_reports_the_groups_cpu(spinner):
    _, busy_cpu = vc.timed_beside(spinner, time.sleep, 0.3)  # inside the child's spin
    assert busy_cpu is not None and busy_cpu >= 0.02
    vc.settle(spinner, 0.0)
    _, cpu = vc.timed_beside(spinner, time.sleep, 0.3)
    assert cpu is not None and cpu < 0.05  # idle group: nothing charged to the side being timed
