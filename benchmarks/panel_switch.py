"""The fused CPU decode kernel's two GEMM kinds on the served model's shape, batch by batch (issue 16, thirteenth
session): SmolLM2-135M with random weights (30 layers; no download), one decode step of every batch 1..10 at
``CTX`` keys, panels (``panel_min_rows=1``) and dot tiles (``panel_min_rows=b+1``), timed in interleaved rounds so a
change in load hits both alike. Prints best and median ms per batch and the switch ``choose_panel_min_rows`` takes
from them; compare with ``execution.panel_min_rows`` of the probed chip.

    python benchmarks/panel_switch.py [CTX]        # about 1 min quiet
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    import torch

    from jalapeno.backends.torch.attention import SeqSlice
    from jalapeno.backends.torch.runner import DecodePolicy, ModelRunner
    from jalapeno.hardware.probe import choose_panel_min_rows, interleaved_times, random_model
    from jalapeno.models.catalog import load_model

    ctx = int(sys.argv[1]) if len(sys.argv) > 1 else 480
    loaded = random_model(load_model("smollm2-135m"), "cpu")
    batches = list(range(1, 11))
    per = ctx // 16 + 1
    runner = ModelRunner(loaded.model, per * max(batches), 16, "cpu", torch.float32)

    def step(b: int, panels: bool):
        slices = [SeqSlice(ctx - 1, 1, list(range(i * per, (i + 1) * per))) for i in range(b)]

        def run():
            runner.policy = DecodePolicy(fused_max_batch=128, panel_min_rows=1 if panels else b + 1)
            return runner.forward(slices, [1] * b, list(range(b)))
        return run

    load0 = os.getloadavg()[0]
    out = interleaved_times({(b, p): step(b, p) for b in batches for p in (True, False)}, 60.0, (3, 6))
    print(f"load {load0:.2f} -> {os.getloadavg()[0]:.2f}; {torch.get_num_threads()} threads; ctx {ctx}")
    best = {p: {b: min(out[(b, p)]) for b in batches} for p in (True, False)}
    for b in batches:
        pa, do = sorted(out[(b, True)]), sorted(out[(b, False)])
        print(f"b={b:2d} panels best {pa[0] * 1e3:7.1f} median {pa[len(pa) // 2] * 1e3:7.1f} | dot tiles best "
              f"{do[0] * 1e3:7.1f} median {do[len(do) // 2] * 1e3:7.1f} ms")
    print(f"switch from the best times: panel_min_rows = {choose_panel_min_rows(best[True], best[False])}")


if __name__ == "__main__":
    main()
