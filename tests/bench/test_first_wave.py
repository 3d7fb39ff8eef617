"""``bench --compare-sim --sim-release sent``: the simulated closed loop releases its first wave when the client
sent it (issue 16: the real first wave is spread over milliseconds, the simulated one was released at t = 0)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jalapeno.bench.client import BenchRequest
from jalapeno.bench.compare import first_wave_arrivals, simulate_workload
from jalapeno.bench.loadgen import LoadSpec

QUIET_CHIP = Path(__file__).parents[1] / "hardware" / "data"


def test_first_wave_is_released_as_sent_and_the_rest_wait_for_slots() -> None:
    # 3 in flight: sends at 5, 7, 6.5 ms (made non-decreasing, relative to the first), then two that waited
    got = first_wave_arrivals([0.005, 0.007, 0.0065, 0.9, 1.4], 3)
    assert got.tolist() == pytest.approx([0.0, 0.002, 0.002, 0.002, 0.002])
    assert first_wave_arrivals([], 4).size == 0


def _simulate(sent, conc: int = 8, n: int = 16):
    reqs = [BenchRequest(prompt=[1] * 512, prompt_len=512, output_len=64) for _ in range(n)]
    return simulate_workload(reqs, np.zeros(n), LoadSpec(concurrency=conc), hardware="local", model="smollm2-135m",
                             precision="fp32", sent_s=sent)


def test_sends_at_one_instant_are_the_closed_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Released all at t = 0 through the arrival path, the simulation is the closed loop's, metric for metric."""
    monkeypatch.setenv("JALAPENO_CACHE", str(QUIET_CHIP.parent / "no-probe-here"))
    monkeypatch.setenv("JALAPENO_HARDWARE_PATH", str(QUIET_CHIP))
    closed, sent = _simulate(None), _simulate([0.0] * 16)
    for key in ("median_ttft_ms", "median_tpot_ms", "median_e2el_ms", "output_throughput"):
        assert sent[key] == pytest.approx(closed[key], rel=1e-9), key


def test_a_staggered_first_wave_decodes_beside_later_prefills(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sent 2 ms apart, each later prompt's prefill lands in steps where earlier sequences decode: the median TPOT
    rises (released together, all 8 prefill in one step and then decode in lockstep)."""
    monkeypatch.setenv("JALAPENO_CACHE", str(QUIET_CHIP.parent / "no-probe-here"))
    monkeypatch.setenv("JALAPENO_HARDWARE_PATH", str(QUIET_CHIP))
    together, apart = _simulate(None), _simulate([0.002 * i for i in range(8)] + [1.0] * 8)
    assert apart["median_tpot_ms"] > 1.1 * together["median_tpot_ms"]


def test_unknown_release_mode_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    from jalapeno.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["bench", "--base-url", "http://127.0.0.1:9", "--sim-release", "later"])
    assert exc.value.code == 2
    err = capsys.readouterr()
    assert "--sim-release must be 'sent' or 'together' (got 'later')" in err.out + err.err
