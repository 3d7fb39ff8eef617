"""`jalapeno serve --step-trace`: what each engine step of a served run cost, and the split of a run's time into
engine steps / delivery / the serving loop between steps / idle (docs/fidelity.md, issue 16)."""

from __future__ import annotations

import json

import httpx
import pytest

from jalapeno.errors import ConfigError
from jalapeno.server.app import build_app
from jalapeno.server.background import BackgroundServer
from jalapeno.server.build import build_sim
from jalapeno.server.step_trace import StepRecord, StepTracer, decode_step_ms, load_trace, split

SIM_CHIP, SIM_MODEL = "h100", "llama-3.1-8b"  # what tests/server/conftest.py serves


def _rec(t0, t1, t2, idle=False, pre=0, dec=1, run=(0.0, 0.0, 0.0), wait=(0.0, 0.0, 0.0)) -> StepRecord:
    return StepRecord(t0, t1, t2, idle, seqs=dec, prefill_tokens=pre, decode_tokens=dec, run_s=run, wait_s=wait)


def test_split_of_a_hand_made_trace_adds_up():
    """Window 10..20 s: an idle start (10 -> 11), a prefill step 11-13 delivered at 13.5, two decode steps of two
    sequences (14-15 / 15.2, 15.7-16.7 / 16.8), then idle to 20; a step outside the window is not counted."""
    steps = [
        _rec(8.0, 9.0, 9.1),  # before the window
        _rec(11.0, 13.0, 13.5, idle=True, pre=512, dec=1, run=(1.0, 0.1, 1.2), wait=(0.5, 0.0, 0.4)),
        _rec(14.0, 15.0, 15.2, dec=2, run=(0.6, 0.05, 0.5), wait=(0.3, 0.01, 0.2)),
        _rec(15.7, 16.7, 16.8, dec=2, run=(0.7, 0.05, 0.6), wait=(0.2, 0.02, 0.3)),
    ]
    w = split(steps, 10.0, 20.0)
    assert w.steps == 3 and w.prefill_tokens == 512 and w.decode_tokens == 5
    assert w.step_s == pytest.approx(2.0 + 1.0 + 1.0)
    assert w.deliver_s == pytest.approx(0.5 + 0.2 + 0.1)
    assert w.between_s == pytest.approx((14.0 - 13.5) + (15.7 - 15.2))  # the engine had work: the loop's time
    assert w.idle_s == pytest.approx((11.0 - 10.0) + (20.0 - 16.8))
    assert w.step_s + w.deliver_s + w.between_s + w.idle_s == pytest.approx(w.wall_s)
    assert w.run_s == pytest.approx({"engine": 2.3, "loop": 0.2, "other": 2.3})
    assert w.wait_s == pytest.approx({"engine": 1.0, "loop": 0.03, "other": 0.9})
    assert w.per_decode_token_ms() == pytest.approx({"step": 800.0, "deliver": 160.0, "between": 200.0})
    assert decode_step_ms(steps, 10.0, 20.0) == pytest.approx({2: 1000.0})  # the prefill step is not a decode step


def test_a_served_run_is_traced_step_by_step(tmp_path):
    """A real server (simulated chip, time-scale 0) with a tracer: every decoded token is in the trace, each step
    in order, and the window's parts add up to its wall time."""
    path = tmp_path / "steps.jsonl"
    served = build_sim(SIM_CHIP, SIM_MODEL, time_scale=0.0)
    tracer = StepTracer(path, {"backend": "sim"})
    import time

    with BackgroundServer(build_app(served.engine, served.codec, served.config, tracer=tracer)) as srv:
        t0 = time.monotonic()
        for n in (5, 7):
            r = httpx.post(srv.url + "/v1/completions", json={"model": served.config.model_name, "prompt": "hi " * 20,
                                                              "max_tokens": n, "ignore_eos": True}, timeout=30)
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == n
        t1 = time.monotonic()
    header, steps = load_trace(path)
    assert header["backend"] == "sim" and header["groups"] == ["engine", "loop", "other"]
    assert sum(s.decode_tokens for s in steps) == 12 and sum(s.prefill_tokens for s in steps) >= 40
    assert all(s.t_start <= s.t_end <= s.t_done for s in steps)
    assert all(a.t_done <= b.t_start for a, b in zip(steps, steps[1:]))
    w = split(steps, t0, t1)
    assert w.decode_tokens == 12 and w.step_s + w.deliver_s + w.between_s + w.idle_s == pytest.approx(w.wall_s)
    assert steps[0].idle_before  # the server sat idle before the first request
    import sys

    if sys.platform == "linux":  # schedstat: the engine thread's CPU over its steps is bounded by the wall it spans
        # (each step's reads bracket it, so the reads' own time counts: the span, not the steps' sum). It may be 0:
        # the kernel adds a running thread's time at a tick or a switch, and these simulated steps take microseconds
        # with no tick inside them (at load this failed 2 runs in 3 with `0 <`, thirteenth session)
        assert all(min(s.run_s) >= 0 and min(s.wait_s) >= 0 and s.steal_s >= 0 for s in steps)
        assert w.steal_s == pytest.approx(sum(s.steal_s for s in steps if t0 <= s.t_start < t1))
        assert sum(s.run_s[0] for s in steps) <= steps[-1].t_done - steps[0].t_start + 0.1


@pytest.mark.parametrize(
    "content, needle",
    [
        ("", "is empty"),
        ('{"kind": "step", "t_start": 1}\n', "line 1"),
        ("not json\n", "line 1"),
        (json.dumps({"kind": "step", **_rec(1, 2, 3).__dict__}) + "\n", "no header"),
    ],
)
def test_a_bad_trace_is_one_clear_line(tmp_path, content, needle):
    p = tmp_path / "t.jsonl"
    p.write_text(content)
    with pytest.raises(ConfigError, match=needle):
        load_trace(p)


def test_bad_trace_paths_and_windows_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        StepTracer(tmp_path / "missing" / "t.jsonl")
    with pytest.raises(ConfigError, match="is a folder"):
        StepTracer(tmp_path)
    with pytest.raises(ConfigError, match="end after it starts"):
        split([], 2.0, 1.0)
    with pytest.raises(ConfigError, match="cannot read"):
        load_trace(tmp_path / "nothing.jsonl")


def test_the_recorded_served_trace_splits_as_the_doc_says():
    """The trace docs/fidelity.md's split comes from (`sim_vs_engine.py --concurrency 1 --isl 512 --osl 64
    --step-trace`, 2026-12-02 03:30-03:39 UTC, load 9.5-10.4, window incl. one warm-up request): 4 prompts of 512
    tokens and 4 x 64 decoded tokens in 256 steps; the parts add up to the window; the engine thread waited for a
    core ~4.7x as long as it ran."""
    from pathlib import Path

    header, steps = load_trace(Path(__file__).parent / "data" / "served_c1_isl512_osl64_loaded.jsonl")
    assert header["torch_threads"] == 2 and header["cpus"] == 2
    w = split(steps, 39964.194597294, 40145.525130031)
    assert (w.steps, w.prefill_tokens, w.decode_tokens) == (256, 4 * 512, 4 * 64)
    assert (w.wall_s, w.step_s, w.deliver_s, w.between_s, w.idle_s) == pytest.approx(
        (181.33, 179.70, 0.926, 0.620, 0.083), abs=5e-3)
    assert w.run_s == pytest.approx({"engine": 30.99, "loop": 0.685, "other": 29.58}, abs=5e-3)
    assert w.wait_s["engine"] / w.run_s["engine"] == pytest.approx(4.70, abs=0.01)
    assert w.per_decode_token_ms()["step"] == pytest.approx(702.0, abs=0.1)
    assert decode_step_ms(steps, 39964.19, 40145.53)[1] == pytest.approx(577.5, abs=0.1)


def test_steal_time_is_read_from_the_aggregate_cpu_line():
    """/proc/stat's aggregate line: user nice system idle iowait irq softirq steal ...; steal is the eighth value,
    in clock ticks. A line without it (an old kernel) or another first line reads 0."""
    from jalapeno.server.step_trace import parse_steal_s

    text = b"cpu  6227753 2875103 1028143 7917215 19431 0 6314 192084 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"
    assert parse_steal_s(text, 100.0) == pytest.approx(1920.84)
    assert parse_steal_s(b"cpu  1 2 3 4 5 6 7\n", 100.0) == 0.0
    assert parse_steal_s(b"intr 5\n", 100.0) == 0.0
