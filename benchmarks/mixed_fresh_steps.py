"""Offline: the steps whose attention path issue 16's fourteenth session changed (fresh prompts beside decode rows,
later chunks), timed on one thread (best CPU time) and on two threads (best wall time), interleaved rounds, one JSON
line on stdout. SmolLM2-135M's layer shape, random float32 weights (``chunk_paths.py``'s runner and slices). Run it
from two trees in alternating processes to compare them side by side:

    for t in BEFORE AFTER BEFORE AFTER; do PYTHONPATH=$t/src OMP_WAIT_POLICY=PASSIVE nice -n 5 \\
        python benchmarks/mixed_fresh_steps.py >> steps.jsonl; done

Environment: ``LAYERS`` (default 2), ``ROUNDS`` (default 3).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

STEPS = [
    ("fresh 2048", [(2048, 0)], []),
    ("fresh 2048 + 1 decode", [(2048, 0)], [2049]),
    ("fresh 512", [(512, 0)], []),
    ("fresh 512 + 1 decode", [(512, 0)], [513]),
    ("fresh 3x512 + 1 decode", [(512, 0)] * 3, [513]),
    ("fresh 512 + 7 decode", [(512, 0)], [577] * 7),
    ("chunk 1024 after 1024", [(1024, 1024)], []),
    ("chunk 512 after 1536 + 1 decode", [(512, 1536)], [513]),
]


def main() -> None:
    import torch

    import jalapeno
    from jalapeno.backends.torch.runner import DecodePolicy, ModelRunner
    from jalapeno.hardware import probe as pr

    sys.path.insert(0, str(Path(__file__).parent))
    from chunk_paths import BLOCK, HIDDEN, INTER, VOCAB, slices_of

    layers, rounds = int(os.environ.get("LAYERS", 2)), int(os.environ.get("ROUNDS", 3))
    loaded = pr.random_llama(layers, HIDDEN, INTER, VOCAB, "cpu")
    runner = ModelRunner(loaded.model, max(slices_of(p, d)[1] for _, p, d in STEPS), BLOCK, "cpu", torch.float32,
                         policy=DecodePolicy(fused_max_batch=128, panel_min_rows=8))
    todo = []
    for label, prefill, decode in STEPS:
        sl, _ = slices_of(prefill, decode)
        ids = [1] * sum(s.num_tokens for s in sl)
        todo.append((label, sl, ids, [sum(s.num_tokens for s in sl[: i + 1]) - 1 for i in range(len(sl))]))
    load0 = os.getloadavg()[0]
    res = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        best = {label: float("inf") for label, *_ in todo}
        for _, sl, ids, logits in todo:  # warm-up
            runner.forward(sl, ids, logits)
        for _ in range(rounds):
            for label, sl, ids, logits in todo:
                c0, w0 = time.process_time(), time.perf_counter()
                runner.forward(sl, ids, logits)
                best[label] = min(best[label], time.process_time() - c0 if threads == 1 else time.perf_counter() - w0)
        res[threads] = best
    print(json.dumps({"jalapeno": jalapeno.__file__, "layers": layers, "rounds": rounds, "load_start": load0,
                      "load_end": os.getloadavg()[0], "cpu1_ms": {k: v * 1e3 for k, v in res[1].items()},
                      "wall2_ms": {k: v * 1e3 for k, v in res[2].items()}}))


if __name__ == "__main__":
    main()
