"""Server overhead: what the HTTP/SSE layer costs on top of the engine, with the simulated backend.

The sim backend at ``--time-scale 0`` executes nothing and does not wait, so the engine runs as fast as its
Python scheduler allows; anything slower through HTTP is the server's (and the client's) cost.

1. engine only: ``Engine.step()`` in a loop over a closed-loop workload of C concurrent requests;
2. over HTTP: ``jalapeno serve --backend sim --time-scale 0`` in a subprocess, driven by the bench client
   (this process) at concurrency C with the same lengths.

Reported (CPU time is robust to other load on the machine; wall numbers are not):
  * CPU µs per output token: engine only; the whole server process (engine + HTTP/SSE); their difference is the
    HTTP layer's cost; and the bench client's own cost;
  * output tokens/s: engine only and end to end over HTTP (wall clock);
  * added latency per token: the event-loop time to stream one step's tokens to C clients,
    C × (HTTP µs per token) — a decode step must last at least this long for the server to keep up.
Run:

    python benchmarks/server_overhead.py [--concurrency 256] [--num-prompts 1024] [--isl 128] [--osl 128]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

import httpx
import numpy as np

CHIP, MODEL = "h100", "llama-3.1-8b"


def engine_only(isl: np.ndarray, osl: np.ndarray, conc: int) -> dict:
    from jalapeno.engine.sequence import SamplingParams
    from jalapeno.server.build import sim_engine

    engine, _ = sim_engine(CHIP, MODEL)  # single-step, exactly as the server drives it
    todo = list(zip(isl.tolist(), osl.tolist()))
    inflight = 0
    tokens = steps = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    while todo or inflight:
        while todo and inflight < conc:
            i, o = todo.pop()
            engine.add_request(None, SamplingParams(max_tokens=o, ignore_eos=True), prompt_len=i)
            inflight += 1
        for out in engine.step():
            tokens += out.num_new_tokens
            inflight -= out.finished
        steps += 1
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {
        "tokens": tokens,
        "wall_s": wall,
        "steps": steps,
        "tok_s": tokens / wall,
        "step_ms": wall / steps * 1e3,
        "cpu_us_per_token": cpu / tokens * 1e6,
    }


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (Linux /proc), or None elsewhere."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def over_http(n: int, isl_len: int, osl_len: int, conc: int, seed: int) -> dict:
    from jalapeno.bench.client import EndpointConfig
    from jalapeno.bench.dataset import WorkloadSpec, build_requests
    from jalapeno.bench.loadgen import LoadSpec, run_benchmark

    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "jalapeno.cli",
        "serve",
        "--backend",
        "sim",
        "--hardware",
        CHIP,
        "--model",
        MODEL,
        "--time-scale",
        "0",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError("server did not start: " + proc.stderr.read().decode()[-500:])
        spec = WorkloadSpec(num_prompts=n, input_len=isl_len, output_len=osl_len, seed=seed)
        reqs = build_requests(spec, "completions")
        cfg = EndpointConfig(url, MODEL, "completions")
        s0, c0 = proc_cpu_s(proc.pid), time.process_time()
        res = run_benchmark(cfg, reqs, LoadSpec(concurrency=conc), workload=spec, power=False, progress=False)
        s1, c1 = proc_cpu_s(proc.pid), time.process_time()
        m = dict(res.metrics)
        tok = m["total_output_tokens"]
        m["server_cpu_us_per_token"] = (s1 - s0) / tok * 1e6 if s0 is not None and s1 is not None else None
        m["client_cpu_us_per_token"] = (c1 - c0) / tok * 1e6
        return m
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--num-prompts", type=int, default=1024)
    ap.add_argument("--isl", type=int, default=128)
    ap.add_argument("--osl", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from jalapeno.workload import sample_lengths

    isl, osl = sample_lengths(a.num_prompts, a.isl, a.osl, 0.8, seed=a.seed)
    eng = engine_only(isl, osl, a.concurrency)
    m = over_http(a.num_prompts, a.isl, a.osl, a.concurrency, a.seed)
    srv_us = m["server_cpu_us_per_token"]
    http_us = None if srv_us is None else srv_us - eng["cpu_us_per_token"]
    row = {
        "concurrency": a.concurrency,
        "num_prompts": a.num_prompts,
        "isl/osl": f"{a.isl}/{a.osl}",
        "engine_cpu_us_per_token": round(eng["cpu_us_per_token"], 1),
        "server_cpu_us_per_token": None if srv_us is None else round(srv_us, 1),
        "http_cpu_us_per_token": None if http_us is None else round(http_us, 1),
        "client_cpu_us_per_token": round(m["client_cpu_us_per_token"], 1),
        "engine_tok_s": round(eng["tok_s"]),
        "http_tok_s": round(m["output_throughput"]),
        "added_ms_per_step": None if http_us is None else round(http_us * a.concurrency / 1000, 2),
        "http_median_tpot_ms": round(m["median_tpot_ms"], 2),
        "failed": m["failed"],
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    if a.json:
        print(json.dumps(row))
        return
    for k, v in row.items():
        print(f"{k:>24}: {v}")


if __name__ == "__main__":
    main()
