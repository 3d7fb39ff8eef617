"""Issue 16, nineteenth session: in one process, under the server's thread policy, the engine's decode step of one
sequence at ~2,050 keys (the served SmolLM2 GGUF, a 2,048-token random-id prompt) against the bare runner's forward
on the same sequence's blocks, interleaved 25 times: what the engine adds to a long-context decode step.

    python benchmarks/long_context_engine_step.py

2026-12-03 16:19 UTC, the 2-core VM, quiet: engine.step 62.92 ms, runner.forward 61.93 ms (median) at 2,078 keys —
the engine adds ~1 ms; the step itself took 50-63 ms across processes, pool sizes and thread policies that hour."""
import statistics, time
import numpy as np
from jalapeno.hardware.threads import apply_thread_policy
apply_thread_policy(serving=True)
from jalapeno.server.build import build_torch
from jalapeno.engine.sequence import SamplingParams, Sequence
from jalapeno.backends.torch.attention import SeqSlice
from jalapeno.backends.torch.runner import DecodePolicy

eng = build_torch(None, device="cpu").engine
backend = eng.backend if hasattr(eng, "backend") else None
rng = np.random.default_rng(0)
seq = Sequence(rng.integers(100, 10_000, 2048).tolist(), SamplingParams(max_tokens=80, ignore_eos=True))
eng.add_sequence(seq)
eng.step()  # prefill
for _ in range(5):
    eng.step()
runner = backend.runner
A, B = [], []
for _ in range(25):
    t = time.perf_counter(); eng.step(); A.append(time.perf_counter() - t)
    ctx = seq.num_tokens - 1  # tokens whose KV is cached
    pol = runner.policy
    t = time.perf_counter()
    runner.forward([SeqSlice(ctx - 1, 1, seq.block_table)], [seq.token_ids[ctx - 1]], [0])
    B.append(time.perf_counter() - t)
print("blocks", seq.block_table[:5], "...", seq.block_table[-3:], "policy", runner.policy)
print(f"engine.step median {statistics.median(A)*1e3:.2f} ms; bare runner.forward median {statistics.median(B)*1e3:.2f} ms; ctx {ctx}")
