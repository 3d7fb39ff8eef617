"""A real-time simulated server, measured over HTTP, lands near the simulator's own offline prediction."""

from __future__ import annotations

import json

import pytest

from jalapeno.cli import main


def test_realtime_sim_server_matches_simulator(tmp_path, realtime_server, capsys):
    _, srv = realtime_server
    out = tmp_path / "r.json"
    try:
        main(
            [
                "bench",
                "--base-url",
                srv.url,
                "--no-progress",
                "-o",
                str(out),
                "--concurrency",
                "4",
                "--num-prompts",
                "12",
                "--input-len",
                "128",
                "--output-len",
                "32",
                "--compare-sim",
                "--hardware",
                "h200",
                "--sim-precision",
                "fp8",
            ]
        )
    except SystemExit as exc:
        assert exc.code in (0, None)
    r = json.loads(out.read_text())
    sim = r["simulated"]
    assert r["completed"] == sim["completed"] == 12
    assert r["total_output_tokens"] == sim["total_output_tokens"]
    # The sim server is itself a serving front end: the simulator's modelled front-end latency per request
    # (efficiency.request_overhead_ms, in TTFT and E2E) is replaced there by the real HTTP path, so compare the
    # latencies without it.
    from jalapeno.hardware import get_chip

    front_ms = get_chip("h200").efficiency.request_overhead_ms
    sim_ttft, sim_e2el = sim["median_ttft_ms"] - front_ms, sim["median_e2el_ms"] - front_ms
    assert sim_ttft > 0
    # step-paced quantities: within 25% of the prediction (typically 0-5%)
    for key in ("median_tpot_ms", "mean_tpot_ms", "median_itl_ms"):
        assert r[key] == pytest.approx(sim[key], rel=0.25), key
    assert r["median_e2el_ms"] == pytest.approx(sim_e2el, rel=0.25)
    # duration and throughput include the modelled front end on each of the 3 waves of replacement requests
    for key in ("duration", "output_throughput"):
        assert r[key] == pytest.approx(sim[key], rel=0.35), key
    # TTFT additionally pays the HTTP round trip and a step boundary per replacement request
    assert sim_ttft * 0.8 <= r["median_ttft_ms"] <= sim_ttft * 2.5 + 50
    printed = capsys.readouterr().out
    assert "Measured vs simulated" in printed and "measured / sim" in printed
