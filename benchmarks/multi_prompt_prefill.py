"""Issue 16, twentieth session: is a prefill step of several fresh prompts priced as well as one of a single prompt?
In one process, under the server's thread policy, the served model's shape (random weights, the runner alone) prefills
n prompts of L tokens from an empty cache, interleaved rounds, against the probed chip's price of the same step
(engine overheads included, as the chip prices a served step).

    python benchmarks/multi_prompt_prefill.py [CHIP.yaml]   # default: the probed local chip

The whole-grid runs' line-ups read several-prompt fresh steps ~10 % further over their price than single-prompt ones
(docs/fidelity.md, twentieth session); this separates the step from the server.

2026-12-03 19:06 UTC, the 2-core VM, quiet, priced on benchmarks/data/grid_check_1704_full/local_front_end.yaml (the
grid's chip), measured / priced: 1 x 128 0.834, 8 x 128 0.868, 1 x 1024 0.863, 1 x 512 0.939, 4 x 512 0.936,
16 x 128 0.890 — several prompts are priced as well as one of the same tokens; the served gap is not the step's shape."""
import statistics
import sys

from jalapeno.hardware.threads import apply_thread_policy

apply_thread_policy(serving=True)
import torch  # noqa: E402

from jalapeno.backends.torch.attention import SeqSlice  # noqa: E402
from jalapeno.backends.torch.runner import DecodePolicy, ModelRunner  # noqa: E402
from jalapeno.hardware.catalog import default_probe_dir, load_spec_file  # noqa: E402
from jalapeno.hardware.probe import SERVED_MODEL, interleaved_times, random_model  # noqa: E402
from jalapeno.models.catalog import load_model  # noqa: E402
from jalapeno.perf.shape import StepShape  # noqa: E402
from jalapeno.sim.factory import cost_model_for  # noqa: E402

SHAPES = [(1, 128), (8, 128), (1, 1024), (1, 512), (4, 512), (16, 128)]  # (prompts, tokens each)
chip = load_spec_file(sys.argv[1] if len(sys.argv) > 1 else default_probe_dir() / "local.yaml")
arch = load_model(SERVED_MODEL)
cm = cost_model_for(arch, chip, precision="fp32", kv="fp32")
loaded = random_model(arch, "cpu")
blocks = max(n * -(-t // 16) for n, t in SHAPES)
runner = ModelRunner(loaded.model, blocks, 16, "cpu", torch.float32)


def step(n: int, t: int):
    per = -(-t // 16)
    slices = [SeqSlice(0, t, list(range(i * per, (i + 1) * per))) for i in range(n)]
    ids = [1] * (n * t)
    rows = [(i + 1) * t - 1 for i in range(n)]

    def run():
        runner.policy = DecodePolicy()
        return runner.forward(slices, ids, rows)
    return run


got = interleaved_times({s: step(*s) for s in SHAPES}, 60.0, (5, 7))
print(f"torch threads {torch.get_num_threads()}; chip {chip.name}")
for (n, t), v in got.items():
    meas = statistics.median(v)
    price = cm.step(StepShape.from_lists(prefill=[(t, 0)] * n)).time_s
    print(f"{n:2d} x {t:4d} tokens: measured {meas * 1e3:8.1f} ms (median of {len(v)}), priced {price * 1e3:8.1f} ms, "
          f"measured / priced {meas / price:.3f}")
