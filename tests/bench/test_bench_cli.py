"""`jalapeno bench` (the Python entry) against a real simulated server: counts and metric relations."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from jalapeno.metrics import RequestOutcome, compute_metrics
from jalapeno.cli import main
from jalapeno.workload import arrival_times, sample_lengths

METRIC_KEYS = set(compute_metrics([RequestOutcome(output_tokens=2, e2el_s=1.0)], 1.0))


def _bench(tmp_path, url, *args) -> dict:
    out = tmp_path / "r.json"
    run_cli(["bench", "--base-url", url, "--no-progress", "-o", str(out), "--save-detailed", *args])
    return json.loads(out.read_text())


def run_cli(argv: list[str]) -> None:
    """The console entry point; success may surface as SystemExit(0)."""
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (0, None), f"exit {exc.code}"


def test_closed_loop_counts_and_metric_relations(tmp_path, fast_server):
    served, srv = fast_server
    n, isl, osl = 24, 64, 16
    r = _bench(
        tmp_path,
        srv.url,
        "--concurrency",
        "8",
        "--num-prompts",
        str(n),
        "--input-len",
        str(isl),
        "--output-len",
        str(osl),
    )
    ref_in, ref_out = sample_lengths(n, isl, osl, 0.8, mode="ix", seed=0)  # the workload InferenceX would send
    assert r["completed"] == n and r["failed"] == 0
    assert r["total_output_tokens"] == int(ref_out.sum())  # tokens from usage, EOS ignored
    assert r["total_input_tokens"] == int(ref_in.sum())  # token-id prompts: exact lengths
    reqs = r["requests"]
    assert sorted(q["output_tokens"] for q in reqs) == sorted(ref_out.tolist())
    for q in reqs:
        assert 0 < q["ttft_s"] <= q["e2el_s"]
        assert len(q["itl_s"]) == q["output_tokens"] - 1  # one SSE chunk per token on the sim server
        assert math.isclose(sum(q["itl_s"]), q["e2el_s"] - q["ttft_s"], rel_tol=1e-6, abs_tol=1e-9)
    tpot_ms = [(q["e2el_s"] - q["ttft_s"]) / (q["output_tokens"] - 1) * 1000 for q in reqs]
    assert r["mean_tpot_ms"] == pytest.approx(np.mean(tpot_ms), rel=1e-9)
    assert r["median_ttft_ms"] == pytest.approx(np.median([q["ttft_s"] * 1000 for q in reqs]), rel=1e-9)
    assert r["duration"] >= max(q["start_s"] + q["e2el_s"] for q in reqs) - 1e-6
    assert r["output_throughput"] == pytest.approx(r["total_output_tokens"] / r["duration"])
    # at most 8 in flight at any instant (closed loop at concurrency 8)
    assert _max_overlap(reqs) <= 8
    # the file holds exactly the metrics keys, plus run metadata
    meta = set(r) - METRIC_KEYS - {"requests"}
    assert METRIC_KEYS <= set(r)
    assert {"date", "base_url", "model", "dataset", "concurrency", "num_prompts"} <= meta
    assert r["model"] == "llama-3.1-8b" and r["concurrency"] == 8 and r["dataset"] == "random"


def _max_overlap(reqs) -> int:
    ev = sorted([(q["start_s"], 1) for q in reqs] + [(q["start_s"] + q["e2el_s"] + 1e-9, -1) for q in reqs])
    cur = best = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return best


def test_chat_endpoint_fixed_dataset(tmp_path, fast_server):
    _, srv = fast_server
    r = _bench(
        tmp_path,
        srv.url,
        "--endpoint",
        "chat",
        "--dataset",
        "fixed",
        "--concurrency",
        "4",
        "--num-prompts",
        "8",
        "--input-len",
        "32",
        "--output-len",
        "10",
    )
    assert r["completed"] == 8 and r["total_output_tokens"] == 80
    # server-side prompt length: the sim counts whitespace words of its chat template (32 words + roles)
    assert all(q["prompt_tokens"] >= 32 for q in r["requests"])


def test_open_loop_poisson_arrivals_and_cap(tmp_path, fast_server):
    _, srv = fast_server
    n, rate = 30, 300.0
    r = _bench(
        tmp_path,
        srv.url,
        "--request-rate",
        str(rate),
        "--num-prompts",
        str(n),
        "--input-len",
        "32",
        "--output-len",
        "8",
        "--max-concurrency",
        "3",
        "--seed",
        "5",
    )
    assert r["completed"] == n and r["request_rate"] == rate and r["max_concurrency"] == 3
    arrivals = arrival_times(n, rate, seed=5)
    starts = sorted(q["start_s"] for q in r["requests"])
    # nobody is sent before its Poisson arrival time
    assert all(s >= a - 1e-3 for s, a in zip(starts, arrivals))
    assert _max_overlap(r["requests"]) <= 3


def test_goodput(tmp_path, fast_server):
    _, srv = fast_server
    lax = _bench(
        tmp_path,
        srv.url,
        "--concurrency",
        "2",
        "--num-prompts",
        "4",
        "--input-len",
        "16",
        "--output-len",
        "4",
        "--goodput",
        "ttft:100000 tpot:100000",
        "--num-warmups",
        "3",
    )
    assert lax["slo_attainment"] == 1.0 and lax["request_goodput"] > 0
    assert lax["completed"] == 4 and lax["num_warmups"] == 3  # warm-ups are not measured
    strict = _bench(
        tmp_path,
        srv.url,
        "--concurrency",
        "2",
        "--num-prompts",
        "4",
        "--input-len",
        "16",
        "--output-len",
        "4",
        "--goodput",
        "ttft:0.0001",
    )
    assert strict["slo_attainment"] == 0.0


def test_no_power_without_nvidia_gpu(tmp_path, fast_server):
    from jalapeno.bench.power import PowerSampler

    if PowerSampler().available:
        pytest.skip("this machine has readable NVIDIA GPU power")
    _, srv = fast_server
    r = _bench(tmp_path, srv.url, "--concurrency", "1", "--num-prompts", "2", "--input-len", "8", "--output-len", "3")
    assert r["power_measured"] is False and r["avg_power_w"] is None and r["output_tokens_per_joule"] is None
    assert "not measured" in r["power_note"]


def test_unknown_model_requests_fail_cleanly(tmp_path, fast_server, capsys):
    """Nothing completed: exit 2 with one line (not a table of zeros); the results file still records why."""
    _, srv = fast_server
    out = tmp_path / "r.json"
    args = ["--model", "nope", "--concurrency", "2", "--num-prompts", "3", "--input-len", "8", "--output-len", "2"]
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--base-url", srv.url, "--no-progress", "-o", str(out), "--save-detailed",
              "--num-warmups", "0", *args])
    assert exc.value.code == 2
    r = json.loads(out.read_text())
    assert r["completed"] == 0 and r["failed"] == 3
    assert all("does not exist" in q["error"] for q in r["requests"])
    err = capsys.readouterr().err
    assert err.startswith("error: no request completed: all 3 failed") and "does not exist" in err


@pytest.mark.parametrize(
    "args",
    [
        ["--endpoint", "embeddings"],
        ["--concurrency", "4", "--request-rate", "10"],
        ["--concurrency", "0"],
        ["--range-mode", "weird"],
        ["--goodput", "latency:5"],
        ["--dataset", "file"],
        ["--compare-sim"],
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--no-progress", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "Traceback" not in err


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("warmups", ["0", "1"])
def test_bench_against_no_server_fails_with_one_line(tmp_path, capsys, warmups):
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--base-url", url, "--model", "m", "--no-progress", "--num-prompts", "3",
              "--num-warmups", warmups, "--input-len", "8", "--output-len", "4", "-o", str(tmp_path / "r.json")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "failed" in err and "Connect" in err


def test_bench_url_without_scheme_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--base-url", "127.0.0.1:8000", "--model", "m", "--no-progress"])
    assert exc.value.code == 2 and "http://" in capsys.readouterr().err


def test_bench_prints_the_failure_count(tmp_path, capsys, fast_server):
    """Requests over the context fail (400) while the others complete: the count is printed."""
    served, srv = fast_server
    ctx = served.config.max_model_len
    path = tmp_path / "d.jsonl"
    rows = [{"prompt": "a b c", "output_len": 4}] * 3 + [{"prompt": "a b", "output_len": ctx}] * 2
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = _bench(tmp_path, srv.url, "--dataset", "file", "--dataset-path", str(path), "--num-prompts", "5",
               "--num-warmups", "0")
    assert r["completed"] == 3 and r["failed"] == 2
    assert "2 of 5 requests failed" in capsys.readouterr().out


def test_one_unmeasured_warmup_by_default(tmp_path, fast_server):
    import re

    import httpx

    served, srv = fast_server
    count = lambda: sum(  # noqa: E731
        float(v) for v in re.findall(r"^jalapeno_requests_finished_total\{[^}]*\} (\S+)$", httpx.get(srv.url + "/metrics").text, re.M)
    )
    before = count()
    r = _bench(tmp_path, srv.url, "--num-prompts", "4", "--input-len", "8", "--output-len", "4")
    assert r["num_warmups"] == 1 and r["completed"] == 4
    assert count() - before == 5  # the server saw the warm-up too
