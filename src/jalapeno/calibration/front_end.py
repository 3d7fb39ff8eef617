"""The serving layer's latency per request on this machine, timed for a probed chip (issue 16, thirteenth session):
``jalapeno calibrate --probe`` runs it when the chip has none (the probe itself imports no server: the packages'
layering), and writes it as ``efficiency.request_overhead_ms``."""

from __future__ import annotations

from pathlib import Path

from jalapeno.hardware.probe import FRONT_END_LOOP, ProbeResult


def measure_front_end(res: ProbeResult, loop: tuple[int, int, int, int] = FRONT_END_LOOP) -> None:
    """The serving layer's latency per request on this machine (``res.front_end_ms``): ``jalapeno serve``'s app in
    this process over a simulated engine at time-scale 0 (its steps take no time, so what is timed is the server),
    driven by ``jalapeno bench``'s closed-loop client at ``loop`` = (in flight, requests, prompt tokens sent as token
    ids, output tokens), with a step trace's request records: the median of send -> handed to the engine thread
    (HTTP, parsing, hand-over; :func:`jalapeno.server.ingest.front_end_latency_s`). What
    ``efficiency.request_overhead_ms`` prices: a served closed loop's replacement arrives after the step that
    started at its predecessor's completion (docs/fidelity.md, thirteenth session); 0 let it join that step. Here
    no engine step competes for the cores, so it is the floor of a served run's value (``sim_vs_engine.py
    --write-chip`` measures that one from a served trace). Any failure is a note, never a crash."""
    import asyncio
    import tempfile

    import numpy as np

    try:
        from jalapeno.bench.client import BenchRequest, EndpointConfig
        from jalapeno.bench.loadgen import run_requests
        from jalapeno.server.app import build_app
        from jalapeno.server.background import BackgroundServer
        from jalapeno.server.build import build_sim
        from jalapeno.server.step_trace import StepTracer, load_trace_requests

        conc, n, prompt, out = loop
        served = build_sim("h100", "llama-3.1-8b", time_scale=0.0)
        rng = np.random.default_rng(0)
        reqs = [BenchRequest(rng.integers(100, 10_000, prompt).tolist(), prompt, out) for _ in range(n)]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "front_end.jsonl"
            tracer = StepTracer(path, {"probe": "front end"})
            marks: dict = {}
            with BackgroundServer(build_app(served.engine, served.codec, served.config, tracer=tracer)) as srv:
                cfg = EndpointConfig(srv.url, served.config.model_name)
                outcomes, _ = asyncio.run(run_requests(cfg, reqs, np.zeros(n), conc, num_warmups=1, marks=marks))
            records = load_trace_requests(path)[2]
        bad = [o for o in outcomes if not o.success]
        if bad:
            raise RuntimeError(f"{len(bad)} of {n} requests failed ({bad[0].error})")
        sent = sorted(marks["mono0"] + o.start_s for o in outcomes)
        got = sorted((r for r in records if r.t_recv >= sent[0] - 1e-3), key=lambda r: r.t_recv)
        if len(got) != n:
            raise RuntimeError(f"{len(got)} request records for {n} requests")
        res.front_end_ms = float(np.median([r.t_submit - t for r, t in zip(got, sent)])) * 1e3
        res.samples["front end s"] = [r.t_submit - t for r, t in zip(got, sent)]
    except Exception as exc:  # noqa: BLE001 - a probe step that cannot run here is a note
        res.notes.append(f"serving front end: not measured ({type(exc).__name__}: {exc})")
