"""Where a mixed step's time goes on the served model's shape (issue 16's residual): a fresh prompt of P tokens
beside B decode rows at context C, against the prompt alone and the B decode rows alone (fused kernel and PyTorch
path), timed in interleaved rounds (medians) on a random-weight SmolLM2-135M (float32, the probed thread count),
each beside what the chip prices for it. Usage, from the repository root, on a quiet machine (about 30 s):

    python benchmarks/mixed_steps.py [CHIP_YAML]      # default: the probed local chip

Prints one line per (B, C): measured and priced ms of each step and measured / priced. No serving."""

from __future__ import annotations

import sys

import numpy as np

SHAPES = ((16, 200), (16, 450), (31, 200))
PROMPT = 128


def main() -> None:
    import torch

    from jalapeno.backends.torch.attention import SeqSlice
    from jalapeno.backends.torch.runner import PYTORCH_ONLY, DecodePolicy, ModelRunner
    from jalapeno.hardware.catalog import get_chip, load_spec_file
    from jalapeno.hardware.probe import interleaved_times, local_execution, random_model
    from jalapeno.models.catalog import load_model
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim import cost_model_for

    chip = load_spec_file(sys.argv[1]) if len(sys.argv) > 1 else get_chip("local")
    cm = cost_model_for("smollm2-135m", chip, precision="fp32", kv="fp32")
    ex = local_execution()
    torch.set_num_threads(ex.threads if ex is not None else torch.get_num_threads())
    loaded = random_model(load_model("smollm2-135m"), "cpu")
    p, pb = PROMPT, -(-PROMPT // 16)
    for b, c in SHAPES:
        per = c // 16 + 2
        runner = ModelRunner(loaded.model, per * b + pb, 16, "cpu", torch.float32)
        dec = [SeqSlice(c - 1, 1, list(range(i * per, (i + 1) * per))) for i in range(b)]
        pre = [SeqSlice(0, p, list(range(per * b, per * b + pb)))]

        def step(slices, policy, rows):
            ids = [1] * sum(s.num_tokens for s in slices)

            def run():
                runner.policy = policy
                return runner.forward(slices, ids, rows)
            return run

        got = interleaved_times({"mixed": step(dec + pre, DecodePolicy(), [*range(b), b + p - 1]),
                                 "prefill": step(pre, DecodePolicy(), [p - 1]),
                                 "decode": step(dec, DecodePolicy(fused_max_batch=b), list(range(b))),
                                 "decode torch path": step(dec, PYTORCH_ONLY, list(range(b)))}, 20.0, (5, 9))
        ms = {k: float(np.median(v)) * 1e3 for k, v in got.items()}
        priced = {"mixed": StepShape.from_lists(prefill=[(p, 0)], decode_ctx=[c] * b),
                  "prefill": StepShape.from_lists(prefill=[(p, 0)]),
                  "decode": StepShape.from_lists(decode_ctx=[c] * b)}
        pr = {k: cm.step(s).time_s * 1e3 for k, s in priced.items()}
        row = "  ".join(f"{k} {ms[k]:.1f}/{pr[k]:.1f} ({ms[k] / pr[k]:.2f})" for k in pr)
        print(f"P={p} B={b} C={c} ms measured/priced (ratio): {row}  decode torch path {ms['decode torch path']:.1f}; "
              f"mixed - prefill - decode measured {ms['mixed'] - ms['prefill'] - ms['decode']:+.1f}, priced "
              f"{pr['mixed'] - pr['prefill'] - pr['decode']:+.1f}", flush=True)


if __name__ == "__main__":
    main()
