"""Record a real engine trace for tests/hardware/test_local_trace.py: the torch backend on CPU running a small
closed batch of requests on a tiny random Llama (2 layers, hidden 64: its steps are all engine overhead), with the
probe's overhead measurement taken just before on the same machine.

    python benchmarks/record_local_trace.py [--out tests/hardware/data/local_trace.json]

The test rebuilds a hand-made local chip from the recorded overheads and checks that the simulator, running the
same requests through the same scheduler, reproduces the recorded per-request TTFT / E2E (no timing in the test).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import time
from pathlib import Path

from jalapeno.hardware import probe as pr

LAYERS = 2
WORKLOAD = [(24, 12), (40, 8), (16, 20), (64, 16), (32, 10), (48, 14)]  # (prompt tokens, output tokens)
MAX_NUM_SEQS = 4


def record() -> dict:
    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.engine.config import EngineConfig
    from jalapeno.engine.engine import Engine
    from jalapeno.engine.sequence import SamplingParams

    res = pr.ProbeResult("cpu", "recording", 0.0)
    load0 = os.getloadavg()[0]
    pr.measure_overheads(res, quick=False)
    loaded = pr.random_llama(LAYERS, 64, 96, 128, "cpu")
    backend = TorchBackend(loaded=loaded, device="cpu", num_blocks=256)
    cfg = EngineConfig(block_size=16, max_num_seqs=MAX_NUM_SEQS)
    Engine(backend, cfg).add_request([1, 2, 3], SamplingParams(max_tokens=2))  # build the kernel before timing
    best = None
    for _ in range(3):  # the run with the shortest duration: the least disturbed by other load
        engine = Engine(backend, cfg)
        seqs = [engine.add_request([(7 * i + j) % 128 for j in range(p)],
                                   SamplingParams(max_tokens=o, temperature=0.0, ignore_eos=True))
                for i, (p, o) in enumerate(WORKLOAD)]
        t0 = time.perf_counter()
        steps = 0
        while engine.has_unfinished():
            engine.step()
            steps += 1
        wall = time.perf_counter() - t0
        run = {"duration_s": wall, "steps": steps,
               "requests": [{"prompt_len": p, "max_tokens": o, "ttft_s": s.first_token_s - s.arrival_s,
                             "e2e_s": s.finish_s - s.arrival_s} for (p, o), s in zip(WORKLOAD, seqs)]}
        if best is None or wall < best["duration_s"]:
            best = run
    return {"recorded": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC by benchmarks/record_local_trace.py",
            "machine": f"{os.cpu_count()} cpus, load average {load0:.1f} -> {os.getloadavg()[0]:.1f}",
            "model_config": pr.llama_config(LAYERS, 64, 96, 128),
            "layers": LAYERS, "max_num_seqs": MAX_NUM_SEQS,
            "step_overhead_us": res.step_overhead_us, "layer_overhead_us": res.layer_overhead_us,
            "seq_overhead_us": res.seq_overhead_us, **best}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("tests/hardware/data/local_trace.json"))
    args = ap.parse_args()
    trace = record()
    args.out.write_text(json.dumps(trace, indent=1) + "\n")
    print(json.dumps({k: v for k, v in trace.items() if k != "requests"}, indent=1))


if __name__ == "__main__":
    main()
