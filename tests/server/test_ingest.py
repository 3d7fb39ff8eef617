"""The serving layer's ingest of a closed loop's waves (issue 16, twelfth session): the request records of
``serve --step-trace``, lined up with the client's sends on a made-up trace by hand, the first wave's admission read
back from a trace, and a served run's records in order."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from jalapeno.errors import ConfigError
from jalapeno.server.ingest import (
    LATE_S,
    by_position,
    first_wave,
    first_wave_release,
    front_end_latency_s,
    line_up,
    service_time,
)
from jalapeno.server.step_trace import RequestRecord, StepRecord, StepTracer, load_trace, load_trace_requests


def _step(t0: float, t1: float, pre: int = 0, dec: int = 1) -> StepRecord:
    return StepRecord(t0, t1, t1 + 0.001, False, dec, pre, dec)


def _made_up():
    """A wave of three sent at 10.000 / 10.001 / 10.002 s after step 0 (9.0-9.999) delivered; handlers start 2 ms
    after each send, tokenisation takes 3 / 4 / 5 ms, each hand-over 0.5 ms after (10.0055 / 10.0075 / 10.0095); the
    engine took the first at 10.006 and started step 1 (10.0065-11.0) with it; the other two were handed over during
    step 1 and queued at its end (11.002), step 2 starts at 11.003. Then one sent at 12.0 after step 2 (-11.9)."""
    steps = [_step(9.0, 9.999), _step(10.0065, 11.0, pre=512), _step(11.003, 11.9, pre=1024, dec=3)]
    recs = [RequestRecord(10.002, 10.005, 10.0055, 10.006, 512),
            RequestRecord(10.003, 10.007, 10.0075, 11.002, 512),  # handed over during step 1
            RequestRecord(10.004, 10.009, 10.0095, 11.002, 512),
            RequestRecord(12.001, 12.002, 12.003, 12.004, 512)]
    return [10.0, 10.001, 10.002, 12.0], recs, steps


def test_a_made_up_wave_lines_up_by_hand() -> None:
    sent, recs, steps = _made_up()
    rows = line_up(sent[::-1], recs[::-1], steps)  # any order in, sorted by time
    assert [(r.wave, r.position) for r in rows] == [(0, 0), (0, 1), (0, 2), (2, 0)]
    assert [r.step_at_submit for r in rows] == [False, True, True, False]
    assert [r.first_step for r in rows] == [1, 2, 2, -1]  # the last one: no step after it in the trace
    assert [round(r.delay * 1e3, 3) for r in rows] == [6.0, 1001.0, 1000.0, 4.0]
    pos = by_position(rows)
    assert [p["requests"] for p in pos] == [2, 1, 1]
    assert pos[0]["http_ms"] == pytest.approx(1.5) and pos[0]["tokenise_ms"] == pytest.approx(2.0)  # (2, 1), (3, 1)
    assert pos[1]["tokenise_ms"] == pytest.approx(4.0) and pos[1]["to_queue_ms"] == pytest.approx(994.5)
    assert pos[0]["step_at_submit"] == 0 and pos[1]["step_at_submit"] == 1
    assert front_end_latency_s(rows) == pytest.approx(0.006)  # median of 5.5, 6.5, 7.5, 3.0 ms
    with pytest.raises(ConfigError, match="no wave has two requests handed over outside"):
        service_time(rows)  # the wave's second and third hand-overs overlapped step 1
    free = line_up(sent, recs, [_step(9.0, 9.999)])
    assert [r.wave for r in free] == [0, 0, 0, 0]  # one step only: everything after it is its wave
    assert service_time(free) == pytest.approx(0.002)  # hand-overs 2.0, 2.0 ms and 1.9935 s apart


def test_how_an_idle_engine_took_the_first_wave_by_hand() -> None:
    """Three handed over at 1.000 / 1.001 / 1.002 s to an idle engine; its thread drained the first two at 1.0025 and
    started a step at 1.003 (3 ms after the first hand-over); the third went into the next step. Hand-overs 1 ms
    apart: 1 + 5 ms / 1 ms = 6 predicted by the GIL hypothesis (here, made up, 2 admitted)."""
    steps = [_step(1.003, 2.0, pre=1024, dec=2), _step(2.001, 3.0, pre=512, dec=3)]
    recs = [RequestRecord(0.995, 0.999, 1.0 + i * 1e-3, 1.0025 if i < 2 else 2.0005, 512) for i in range(3)]
    rows = line_up([0.99, 0.991, 0.992], recs, steps)
    fw = first_wave(rows, steps)
    assert (fw.size, fw.admitted) == (3, 2)
    assert fw.pickup_s == pytest.approx(0.003) and fw.spacing_s == pytest.approx(0.001)
    assert fw.predicted == pytest.approx(6.0)
    sent, recs, steps = _made_up()
    fw = first_wave(line_up(sent, recs, steps), steps)  # the made-up wave: the first alone, 1 ms after its hand-over
    assert (fw.size, fw.admitted, fw.spacing_s, fw.predicted) == (3, 1, None, None)
    assert fw.pickup_s == pytest.approx(0.001)
    with pytest.raises(ConfigError, match="no requests"):
        first_wave([], steps)


def test_the_first_wave_is_released_as_the_engine_admitted_it() -> None:
    """11 of 16 prompts in the first step after the window's start (the 14:20 quiet run's c = 16): 11 at 0, the
    other 5 just after (they go into the next step); from the request records, the ones queued by its start."""
    steps = [_step(0.0, 0.05, pre=0), _step(1.0, 14.0, pre=11 * 512, dec=11), _step(14.0, 21.0, pre=5 * 512, dec=16)]
    rel = first_wave_release(steps, 0.9, 16, 512)
    assert rel.tolist() == [0.0] * 11 + [LATE_S] * 5
    recs = [RequestRecord(0.95, 0.96, 0.97, 1.0 if i < 3 else 14.0, 512) for i in range(16)]
    assert first_wave_release(steps, 0.9, 16, 512, recs).tolist() == [0.0] * 3 + [LATE_S] * 13
    assert first_wave_release(steps, 0.9, 4, 512).tolist() == [0.0] * 4  # never more than the wave
    with pytest.raises(ConfigError, match="no prefilling step at or after"):
        first_wave_release(steps, 30.0, 16, 512)
    with pytest.raises(ConfigError, match="must be >= 1"):
        first_wave_release(steps, 0.9, 0, 512)


def test_sends_and_records_that_do_not_match_are_one_line() -> None:
    sent, recs, steps = _made_up()
    with pytest.raises(ConfigError, match="4 requests sent but 3 request records"):
        line_up(sent, recs[:3], steps)
    with pytest.raises(ConfigError, match="no send times"):
        line_up([], recs, steps)


def test_a_served_run_records_each_request_in_order(tmp_path) -> None:
    """A real server (simulated chip, time-scale 0) with a tracer: one record per request, its times in order and
    inside the client's window, the prompt's tokens counted, queued before the step that first ran it."""
    from jalapeno.server.app import build_app
    from jalapeno.server.background import BackgroundServer
    from jalapeno.server.build import build_sim

    path = tmp_path / "steps.jsonl"
    served = build_sim("h100", "llama-3.1-8b", time_scale=0.0)
    tracer = StepTracer(path, {"backend": "sim"})
    sends = []
    with BackgroundServer(build_app(served.engine, served.codec, served.config, tracer=tracer)) as srv:
        for n in (3, 4):
            sends.append(time.monotonic())
            r = httpx.post(srv.url + "/v1/completions", json={"model": served.config.model_name, "prompt": "hi " * 20,
                                                              "max_tokens": n, "ignore_eos": True}, timeout=30)
            assert r.status_code == 200
            prompt_tokens = r.json()["usage"]["prompt_tokens"]
        t_end = time.monotonic()
    _, steps, recs = load_trace_requests(path)
    assert len(load_trace(path)[1]) == len(steps)  # the step reader skips the request records
    assert len(recs) == 2 and all(r.prompt_tokens == prompt_tokens for r in recs)
    for s, r in zip(sends, recs):
        assert s <= r.t_recv <= r.t_tokenised <= r.t_submit <= r.t_queued <= t_end
    rows = line_up(sends, recs, steps)
    assert [r.position for r in rows] == [0, 0] and all(r.first_step >= 0 for r in rows)
    assert all(steps[r.first_step].t_start >= r.queued and steps[r.first_step].prefill_tokens > 0 for r in rows)


def test_the_recorded_loaded_runs_line_up() -> None:
    """This session's served runs at load (c = 16, ISL 512; benchmarks/data/ingest_loaded_*): every measured request
    lines up with a record, each delay part is non-negative, and every first wave was admitted 1 + 15 (docs/fidelity.md,
    twelfth session)."""
    import json
    from pathlib import Path

    from jalapeno.server.step_trace import load_trace_requests

    data = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
    firsts = []
    for name in ("ingest_loaded_c16_2026-12-02", "ingest_loaded_c16_waves_2026-12-02"):
        _, steps, recs = load_trace_requests(data / f"{name}.trace.jsonl")
        for p in json.loads((data / f"{name}.json").read_text())["points"]:
            c = p["client"]
            rows = line_up(c["sent_monotonic"], recs, steps, c["t_end_monotonic"])
            assert len(rows) == p["prompts"]
            assert all(r.sent <= r.recv <= r.tokenised <= r.submit <= r.queued for r in rows)
            fw = first_wave(rows, steps)
            firsts.append((fw.size, fw.admitted))
            assert 0.05 < front_end_latency_s(rows) < 0.15  # 72-113 ms at load 4.4-7.5
    assert firsts == [(16, 1)] * 5
