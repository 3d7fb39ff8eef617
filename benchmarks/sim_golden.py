"""Golden outputs of every simulator entry point, to check that a refactor changes no simulated number.

    python benchmarks/sim_golden.py OUT.json         # run everything, write one JSON file
    cmp before.json after.json                       # byte-identical or not

Covers ``jalapeno simulate --json`` (dense/MoE, tp/ep, dp-attention, dp>1, disaggregated, MTP spec decode,
draft spec decode, chained calls, open-loop request rate, a trace, a framework profile), the scenarios-CSV batch
runner, ``jalapeno.calibration.predict.simulate`` on calibration points (closed loop, offline, MTP), the sweep
adapter ``report.runner.run_point``, ``bench --compare-sim`` (``bench.compare.simulate_workload``), the server's
simulated engine and the Jalapeño study's ``simulate``. Only public entry points (the CLI, stable functions) are
called, so the script runs unchanged before and after a move. Small workloads: ~1 min on one core.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--isl", "512", "--osl", "128", "--num-prompts", "40"]

#: name -> `jalapeno simulate` arguments
CLI = {
    "dense_tp2": ["--model", "llama-3.1-8b", "--hardware", "h100", "--tp", "2", "--concurrency", "8", *SMALL],
    "moe_tp8_ep8_fp8": ["--model", "deepseek-r1", "--hardware", "h200", "--tp", "8", "--ep", "8",
                        "--precision", "fp8", "--kv-dtype", "fp8", "--concurrency", "16", *SMALL],
    "moe_dp_attention": ["--model", "deepseek-r1", "--hardware", "b200", "--tp", "8", "--ep", "8",
                         "--dp-attention", "--precision", "fp4", "--concurrency", "32", *SMALL],
    "dense_dp2": ["--model", "llama-3.1-70b", "--hardware", "h200", "--tp", "2", "--dp", "2",
                  "--concurrency", "12", *SMALL],
    "disaggregated": ["--model", "llama-3.1-70b", "--hardware", "h200", "--prefill-workers", "1",
                      "--prefill-tp", "2", "--decode-workers", "2", "--decode-tp", "2", "--concurrency", "16",
                      *SMALL],
    "spec_mtp": ["--model", "deepseek-r1", "--hardware", "b200", "--tp", "8", "--ep", "8", "--precision", "fp8",
                 "--spec-decode", "mtp", "--spec-tokens", "3", "--acceptance", "0.8,0.6,0.4",
                 "--concurrency", "8", *SMALL],
    "spec_draft": ["--model", "llama-3.1-70b", "--hardware", "h200", "--tp", "4", "--spec-decode", "draft",
                   "--draft-model", "llama-3.1-8b", "--spec-tokens", "2", "--concurrency", "4", *SMALL],
    "chained": ["--model", "gpt-oss-120b", "--hardware", "h200", "--chain-calls", "3", "--concurrency", "6",
                *SMALL, "--goodput", "ttft:500", "--goodput", "tpot:30"],
    "open_loop": ["--model", "qwen3-30b-a3b", "--hardware", "mi300x", "--request-rate", "6",
                  "--max-concurrency", "32", *SMALL],
    "framework": ["--model", "gpt-oss-120b", "--hardware", "b200", "--framework", "sglang",
                  "--concurrency", "16", "--range-mode", "vllm", "--seed", "3", *SMALL],
    "small_cap": ["--model", "llama-3.1-8b", "--hardware", "h100", "--concurrency", "64", "--max-num-seqs", "16",
                  "--max-num-batched-tokens", "1024", "--block-size", "32", *SMALL],
}


def _cli(args: list[str]) -> dict:
    from jalapeno.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            main(["simulate", *args, "--json"])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise RuntimeError(f"simulate {args} exited {exc.code}") from None
    return json.loads(buf.getvalue())


def _trace(tmp: Path) -> dict:
    p = tmp / "trace.csv"
    rows = [(100 + 37 * i % 900, 20 + 13 * i % 200, round(0.05 * i, 3)) for i in range(50)]
    p.write_text("input_len,output_len,arrival_s\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows))
    return _cli(["--model", "llama-3.1-8b", "--hardware", "h200", "--trace", str(p)])


def _batch(tmp: Path) -> list[dict]:
    src = tmp / "scen.csv"
    src.write_text("model,hardware,tp,concurrency,isl,osl,num_prompts,spec_decode,spec_tokens\n"
                   "llama-3.1-8b,h100,1,4,256,64,16,,\n"
                   "llama-3.1-8b,h200,2,8,256,64,16,ngram,2\n"
                   "llama-3.1-8b,h2000,1,4,256,64,16,,\n")
    out = tmp / "res.csv"
    from jalapeno.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(["simulate", "--scenarios", str(src), "--output", str(out)])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    with out.open(newline="") as f:
        return list(csv.DictReader(f))


def _predict() -> dict:
    from jalapeno.calibration.points import SimSpec, load_points, to_sim_spec
    from jalapeno.calibration.predict import simulate

    specs = [s for s in (to_sim_spec(p) for p in load_points(ROOT / "benchmarks" / "data" / "calibration.csv"))
             if isinstance(s, SimSpec)]
    picked: dict[str, SimSpec] = {}
    for s in specs:  # one closed-loop small-concurrency point, one offline point, one MTP point, one big one
        kind = ("offline" if s.concurrency is None else "mtp" if s.spec_tokens else
                "big" if s.concurrency >= 64 else "small")
        if kind not in picked and (s.concurrency or 0) <= 256 and s.isl + s.osl <= 9000:
            picked[kind] = s
    out = {}
    for kind, s in sorted(picked.items()):
        try:
            out[kind] = {"spec": repr(s), "pred": simulate(s, prompts_per_concurrency=2)}
        except Exception as exc:  # noqa: BLE001 - recorded, compared like a result
            out[kind] = {"spec": repr(s), "error": f"{type(exc).__name__}: {exc}"}
    return out


def _run_point() -> dict:
    from jalapeno.report.pool import run_point

    pt = dict(model="llama-3.1-8b", hardware="h200", tp=1, ep=1, pp=1, dp=1, dp_attention=False, weights="fp8",
              kv="fp8", isl=512, osl=128, concurrency=8, num_prompts=24, seed=0, mode="aggregated",
              slo_ttft_ms=300)
    return run_point(pt)


def _compare_sim() -> dict:
    import numpy as np

    from jalapeno.bench.client import BenchRequest
    from jalapeno.bench.compare import simulate_workload
    from jalapeno.bench.loadgen import LoadSpec

    reqs = [BenchRequest(prompt="x", prompt_len=200 + 10 * i, output_len=32 + i) for i in range(20)]
    closed = simulate_workload(reqs, np.zeros(20), LoadSpec(concurrency=4), hardware="h100", model="llama-3.1-8b")
    arr = np.cumsum(np.full(20, 0.1))
    opened = simulate_workload(reqs, arr, LoadSpec(request_rate=10.0, max_concurrency=8), hardware="h200",
                               model="llama-3.1-8b", tp=2)
    return {"closed": closed, "open": opened}


def _server_engine() -> dict:
    from jalapeno.engine.sequence import SamplingParams
    from jalapeno.server.build import sim_engine

    engine, _ = sim_engine("h100", "llama-3.1-8b")
    for i in range(6):
        engine.add_request(None, SamplingParams(max_tokens=20 + i, ignore_eos=True), prompt_len=50 + 30 * i)
    steps = 0
    while engine.has_unfinished():
        engine.step()
        steps += 1
    return {"steps": steps, "clock": engine.clock.now()}


def _study() -> list:
    import importlib.util

    try:  # the study's library (since the sim refactor), else the script that held it before
        from types import SimpleNamespace

        from jalapeno.study import design, points

        js = SimpleNamespace(**vars(design), **{k: v for k, v in vars(points).items() if k not in vars(design)})
    except ImportError:
        spec = importlib.util.spec_from_file_location("jalapeno_study", ROOT / "benchmarks" / "jalapeno_study.py")
        js = importlib.util.module_from_spec(spec)
        sys.modules["jalapeno_study"] = js
        spec.loader.exec_module(js)  # type: ignore[union-attr]
    from jalapeno.hardware import get_chip

    out = []
    for chip, lay in ((get_chip("h200"), js.Layout(tp=8, ep=1, weights="fp8")),
                      (js.jalapeno_chip(js.Params()), js.Layout(tp=8, ep=8, weights="fp8"))):
        out.append(js.simulate(js.Task("deepseek-r1", chip, "g", lay, 1024, 256, 8, 24)))
    return out


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit(__doc__)
    res: dict = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, args in CLI.items():
            res[f"cli/{name}"] = _cli(args)
        res["cli/trace"] = _trace(tmp)
        res["batch"] = _batch(tmp)
    res["predict"] = _predict()
    res["run_point"] = _run_point()
    res["compare_sim"] = _compare_sim()
    res["server_engine"] = _server_engine()
    res["study"] = _study()
    Path(argv[1]).write_text(json.dumps(res, indent=1, sort_keys=True, default=repr) + "\n")
    print(f"{len(res)} groups -> {argv[1]}")


if __name__ == "__main__":
    main(sys.argv)
