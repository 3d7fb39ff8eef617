"""Where a mixed step's time goes on the served model's shape (issue 16's residual): a fresh prompt of P tokens
beside B decode rows at context C, against the prompt alone and the B decode rows alone (fused kernel and PyTorch
path), timed in interleaved rounds (medians) on a random-weight SmolLM2-135M (float32, the probed thread count),
each beside what the chip prices for it. Usage, from the repository root, on a quiet machine (about 30 s):

    python benchmarks/mixed_steps.py [CHIP_YAML]      # default: the probed local chip

Prints one line per (B, C): measured and priced ms of each step and measured / priced. No serving.

``--ab NAME`` (seventeenth session) times pairs of step variants that differ in one thing, alternately in one
process (every variant once per round, ``--rounds`` rounds), so the machine's state cancels in each pair's per-round
ratio; each pair's ratio is printed beside the ratio the chip prices (the variants live in one KV cache of the
served engine's size, 1,456 blocks of 16 tokens):

* ``spread``: B decode rows at unequal contexts (evenly from ``lo`` to ``hi``, as a served closed loop's rows are)
  against B rows all at their mean (the same keys in all), beside a 128-token prompt (the PyTorch path) and alone
  (fused kernel; PyTorch path);
* ``scatter``: block tables drawn at random from the whole cache (a long served run's) against consecutive blocks,
  mixed and decode-only;
* ``prompts``: 2 and 4 fresh prompts beside B decode rows against 1 (priced per token);
* ``long``: fused decode steps at 2,048-2,300 keys, batch 1 / 4 / 8 (the per-key cost by batch past the probe's
  batches 1, 8, 16).
"""

from __future__ import annotations

import argparse
import random
import sys

import numpy as np

SHAPES = ((16, 200), (16, 450), (31, 200))
PROMPT = 128
POOL_BLOCKS = 1456  # the served engine's KV cache (23,296 tokens: `served_kv_tokens` of every committed run)
BLOCK = 16


def _setup(chip_path: str | None):
    import torch

    from jalapeno.hardware.catalog import get_chip, load_spec_file
    from jalapeno.hardware.probe import local_execution, random_model
    from jalapeno.models.catalog import load_model
    from jalapeno.sim import cost_model_for

    chip = load_spec_file(chip_path) if chip_path else get_chip("local")
    cm = cost_model_for("smollm2-135m", chip, precision="fp32", kv="fp32")
    ex = local_execution()
    torch.set_num_threads(ex.threads if ex is not None else torch.get_num_threads())
    return cm, random_model(load_model("smollm2-135m"), "cpu")


def isolated(chip_path: str | None) -> None:
    """The sixteenth session's check: mixed, prefill and decode steps of SHAPES (equal contexts, fresh blocks)."""
    import torch

    from jalapeno.backends.torch.attention import SeqSlice
    from jalapeno.backends.torch.runner import PYTORCH_ONLY, DecodePolicy, ModelRunner
    from jalapeno.hardware.probe import interleaved_times
    from jalapeno.perf.shape import StepShape

    cm, loaded = _setup(chip_path)
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


def spread_contexts(b: int, lo: int, hi: int) -> list[int]:
    """``b`` decode contexts evenly from ``lo`` to ``hi`` (a closed loop's rows at every stage of their output)."""
    return [int(round(x)) for x in np.linspace(lo, hi, b)] if b > 1 else [hi]


def equal_contexts(ctx: list[int]) -> list[int]:
    """As many contexts as ``ctx``, all equal, with the same sum (the remainder spread one key at a time)."""
    b, s = len(ctx), sum(ctx)
    return [s // b + (1 if i < s % b else 0) for i in range(b)]


def variants(ab: str) -> tuple[dict[str, tuple[list[int], list[int], bool, str]], list[tuple[str, str]]]:
    """{label: (fresh prompts' tokens, decode contexts, scattered blocks, path)}, and the (A, B) pairs to compare.
    ``path``: ``auto`` (the engine's choice: fused up to 128 tokens), ``fused`` or ``torch``."""
    v: dict[str, tuple[list[int], list[int], bool, str]] = {}
    pairs: list[tuple[str, str]] = []
    if ab == "spread":
        for b, lo, hi in ((16, 104, 192), (31, 104, 192), (16, 104, 380), (31, 104, 380)):
            sp = spread_contexts(b, lo, hi)
            eq = equal_contexts(sp)
            tag = f"B={b} ctx {lo}-{hi}"
            v[f"mixed {tag} spread"] = ([PROMPT], sp, False, "auto")
            v[f"mixed {tag} equal"] = ([PROMPT], eq, False, "auto")
            v[f"decode torch {tag} spread"] = ([], sp, False, "torch")
            v[f"decode torch {tag} equal"] = ([], eq, False, "torch")
            v[f"decode fused {tag} spread"] = ([], sp, False, "fused")
            v[f"decode fused {tag} equal"] = ([], eq, False, "fused")
            pairs += [(f"{k} {tag} spread", f"{k} {tag} equal") for k in ("mixed", "decode torch", "decode fused")]
    elif ab == "scatter":
        for b, c in ((16, 200), (31, 200), (8, 2100)):
            tag = f"B={b} C={c}"
            for sc in (True, False):
                t = "scattered" if sc else "contiguous"
                v[f"mixed {tag} {t}"] = ([PROMPT], [c] * b, sc, "auto")
                v[f"decode fused {tag} {t}"] = ([], [c] * b, sc, "fused")
                v[f"decode torch {tag} {t}"] = ([], [c] * b, sc, "torch")
            pairs += [(f"{k} {tag} scattered", f"{k} {tag} contiguous") for k in ("mixed", "decode fused", "decode torch")]
    elif ab == "prompts":
        for b, c in ((16, 160), (31, 160)):
            tag = f"B={b} C={c}"
            for n in (1, 2, 4):
                v[f"{n} x {PROMPT} + {tag}"] = ([PROMPT] * n, [c] * b, False, "auto")
            v[f"1 x {PROMPT} alone ({tag})"] = ([PROMPT], [], False, "auto")
            v[f"2 x {PROMPT} alone ({tag})"] = ([PROMPT] * 2, [], False, "auto")
            pairs += [(f"2 x {PROMPT} + {tag}", f"1 x {PROMPT} + {tag}"), (f"4 x {PROMPT} + {tag}", f"1 x {PROMPT} + {tag}"),
                      (f"2 x {PROMPT} alone ({tag})", f"1 x {PROMPT} alone ({tag})")]
    elif ab == "parts":
        for b, c in ((16, 200), (31, 200)):
            tag = f"B={b} C={c}"
            v[f"mixed {tag}"] = ([PROMPT], [c] * b, False, "auto")
            v[f"prefill ({tag})"] = ([PROMPT], [], False, "auto")
            v[f"decode fused {tag}"] = ([], [c] * b, False, "fused")
            pairs += [(f"mixed {tag}", f"decode fused {tag}"), (f"mixed {tag}", f"prefill ({tag})")]
    elif ab == "long":
        for c in (2100, 2300):
            for b in (1, 4, 8):
                v[f"decode fused B={b} C={c}"] = ([], [c] * b, True, "fused")
        for c in (577,):
            for b in (1, 4, 8):
                v[f"decode fused B={b} C={c}"] = ([], [c] * b, True, "fused")
        pairs += [(f"decode fused B={b} C={c}", f"decode fused B=1 C={c}") for c in (577, 2100, 2300) for b in (4, 8)]
        pairs += [(f"decode fused B={b} C=2300", f"decode fused B={b} C=2100") for b in (1, 4, 8)]
    else:
        raise SystemExit(f"--ab {ab!r}: choose spread, scatter, prompts, parts or long")
    return v, pairs


def ab_run(chip_path: str | None, ab: str, rounds: int, show: bool = True) -> dict:
    import torch

    from jalapeno.backends.torch.attention import SeqSlice
    from jalapeno.backends.torch.runner import PYTORCH_ONLY, DecodePolicy, ModelRunner
    from jalapeno.hardware.probe import interleaved_times
    from jalapeno.perf.shape import StepShape

    cm, loaded = _setup(chip_path)
    runner = ModelRunner(loaded.model, POOL_BLOCKS, BLOCK, "cpu", torch.float32)
    order = list(range(POOL_BLOCKS))
    shuffled = order[:]
    random.Random(0).shuffle(shuffled)
    v, pairs = variants(ab)

    def build(prompts: list[int], ctx: list[int], scattered: bool, path: str):
        src = iter(shuffled if scattered else order)
        dec = []
        for c in ctx:
            dec.append(SeqSlice(c - 1, 1, [next(src) for _ in range(-(-c // BLOCK))]))
        pre = [SeqSlice(0, p, [next(src) for _ in range(-(-p // BLOCK))]) for p in prompts]
        slices = dec + pre
        rows, at = list(range(len(dec))), len(dec)
        for p in prompts:
            at += p
            rows.append(at - 1)
        policy = {"auto": DecodePolicy(), "fused": DecodePolicy(fused_max_batch=max(1, sum(s.num_tokens for s in slices))),
                  "torch": PYTORCH_ONLY}[path]
        ids = [1] * sum(s.num_tokens for s in slices)

        def run():
            runner.policy = policy
            return runner.forward(slices, ids, rows)
        return run

    fns = {k: build(*spec) for k, spec in v.items()}
    priced = {k: cm.step(StepShape.from_lists(prefill=[(p, 0) for p in pr], decode_ctx=ctx)).time_s
              for k, (pr, ctx, _, _) in v.items()}
    got = interleaved_times(fns, 0.0, (rounds, rounds))
    n = len(next(iter(got.values())))
    out = {"samples": got, "priced": priced, "pairs": pairs}
    if not show:
        return out
    print(f"--ab {ab}: {n} interleaved rounds, threads {torch.get_num_threads()}")
    for k in v:
        ms = float(np.median(got[k])) * 1e3
        print(f"  {k:34s} {ms:8.1f} ms  priced {priced[k] * 1e3:8.1f}  m/p {ms / (priced[k] * 1e3):.3f}", flush=True)
    for a, b in pairs:
        r = np.array(got[a]) / np.array(got[b])
        q = np.quantile(r, [0.25, 0.5, 0.75])
        print(f"  {a} / {b}: measured {q[1]:.3f} (IQR {q[0]:.3f}-{q[2]:.3f}), priced {priced[a] / priced[b]:.3f}",
              flush=True)
    return out


def across_policies(chip_path: str | None, ab: str, rounds: int, alternations: int) -> None:
    """``--policies N``: the ``--ab`` set in a fresh process per OpenMP wait policy (PASSIVE, the server's default;
    ACTIVE with libgomp's bounded spin), ``N`` alternations; each pair's per-round ratio pooled by policy."""
    import json
    import os
    import subprocess

    from jalapeno.hardware.threads import POLICY_VARS, ThreadPolicy, usable_cores

    pooled: dict[str, dict[tuple[str, str], list[float]]] = {}
    ms: dict[str, dict[str, list[float]]] = {}
    priced: dict = {}
    for i in range(alternations):
        for wait in ("PASSIVE", "ACTIVE"):
            env = {k: v for k, v in os.environ.items() if k not in POLICY_VARS}
            env.update(ThreadPolicy(wait).env(usable_cores()))
            cmd = [sys.executable, __file__, *([chip_path] if chip_path else []), "--ab", ab, "--rounds", str(rounds),
                   "--samples-json"]
            got = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                             .stdout.strip().splitlines()[-1])
            priced = got["priced"]
            for a, b in got["pairs"]:
                r = np.array(got["samples"][a]) / np.array(got["samples"][b])
                pooled.setdefault(wait, {}).setdefault((a, b), []).extend(r.tolist())
            for k, x in got["samples"].items():
                ms.setdefault(wait, {}).setdefault(k, []).extend(x)
            print(f"  process {i + 1} {wait} done", flush=True)
    for wait, pairs in pooled.items():
        print(f"{wait}: " + "; ".join(f"{k} {np.median(x) * 1e3:.1f} ms (m/p {np.median(x) / priced[k]:.3f})"
                                      for k, x in ms[wait].items()))
        for (a, b), r in pairs.items():
            q = np.quantile(r, [0.25, 0.5, 0.75])
            print(f"  {wait} {a} / {b}: measured {q[1]:.3f} (IQR {q[0]:.3f}-{q[2]:.3f}), priced "
                  f"{priced[a] / priced[b]:.3f}", flush=True)


def engine_run(chip_path: str | None, conc: int, isl: int, osl: int, per_slot: int = 3,
               threads: int | None = None) -> None:
    """``--engine C,ISL,OSL``: the served closed loop without the server: ``jalapeno serve``'s engine (SmolLM2-135M
    GGUF, the probed execution choices, the server's thread policy unless the environment sets one) runs
    ``per_slot`` x C requests of the bench's lengths (random dataset, range ratio 0.8, seed 0), C in flight, in
    this process; every step's exact batch is recorded and priced, and the steps are grouped as
    ``step_residuals.py`` groups served ones (measured / priced over the run's decode-only steps' measured / priced)."""
    import resource
    import time

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
    from step_residuals import step_group

    from jalapeno.bench.dataset import WorkloadSpec, workload_lengths
    from jalapeno.bench.lineup import _recorder
    from jalapeno.engine.config import EngineConfig
    from jalapeno.engine.sequence import SamplingParams, Sequence
    from jalapeno.hardware.catalog import get_chip, load_spec_file
    from jalapeno.perf.shape import StepShape
    from jalapeno.server.build import build_torch
    from jalapeno.sim import cost_model_for

    served = build_torch(None, engine_config=EngineConfig(max_num_seqs=conc))
    engine = served.engine
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    chip = load_spec_file(chip_path) if chip_path else get_chip("local")
    cm = cost_model_for("smollm2-135m", chip, precision="fp32", kv="fp32")
    n = max(4, per_slot * conc)
    prompts, outputs = workload_lengths(WorkloadSpec(dataset="random", num_prompts=n, input_len=isl, output_len=osl,
                                                     range_ratio=0.8, fixed_output_len=True, seed=0))
    rng = np.random.default_rng(0)
    steps: list = []
    _recorder(engine, steps, lambda seq: seq.seq_id, None)
    durations: list[float] = []
    faults: list[tuple[int, float]] = []  # per step: minor page faults, system CPU s (every thread of the process)
    fwd: list[float] = []  # per step: seconds in the model runner's forward (the rest: scheduler, sampling, outputs)
    runner = engine.backend.runner
    forward = runner.forward

    def timed(*a):
        t = time.perf_counter()
        out = forward(*a)
        fwd.append(time.perf_counter() - t)
        return out

    runner.forward = timed
    sent = done = 0
    while done < n:
        while sent < n and sent - done < conc:
            ids = rng.integers(100, 10_000, int(prompts[sent])).tolist()
            engine.add_sequence(Sequence(ids, SamplingParams(max_tokens=int(outputs[sent]), ignore_eos=True)))
            sent += 1
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        outs = engine.step()
        durations.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        faults.append((r1.ru_minflt - r0.ru_minflt, r1.ru_stime - r0.ru_stime))
        done += sum(o.finished for o in outs)
    groups: dict[tuple[str, str], list] = {}
    for st, m, (flt, sys_s), f in zip(steps, durations, faults, fwd):
        pre, dec = st.shape()
        q = cm.step(StepShape.from_lists(prefill=pre, decode_ctx=dec)).time_s
        acc = groups.setdefault(step_group(st.prefill, st.decode, isl), [0.0, 0.0, 0, [], [], 0.0])
        acc[0] += m
        acc[1] += q
        acc[2] += 1
        acc[3].append(flt)
        acc[4].append(sys_s)
        acc[5] += f
    dm = sum(v[0] for k, v in groups.items() if k[0] == "decode")
    dq = sum(v[1] for k, v in groups.items() if k[0] == "decode")
    ref = dm / dq if dq else float("nan")
    print(f"engine offline c={conc} isl={isl} osl={osl}: {len(steps)} steps, decode-only measured / priced {ref:.3f}")
    for (kind, shape), (m, q, k, flt, sys_s, f) in sorted(groups.items()):
        print(f"  {kind} {shape}: {k} steps, measured / priced {m / q:.3f}, / decode {m / q / ref:.3f}; forward "
              f"{f / m:.2f} of the step ({(m - f) / k * 1e3:.1f} ms a step outside it); per step median "
              f"{np.median(flt):.0f} minor page faults, {np.median(sys_s) * 1e3:.1f} ms system CPU", flush=True)


def captured_run(chip_path: str | None, conc: int, isl: int, osl: int, rounds: int, min_rows: int = 24,
                 threads: int | None = None) -> None:
    """``--captured C,ISL,OSL``: the closed loop of ``--engine`` until its first mixed step beside at least
    ``min_rows`` decode rows (real SmolLM2 weights and KV, the engine's block tables and contexts); then that very
    step is timed again and again in interleaved rounds beside its parts (its prompts alone, its decode rows alone on
    the fused kernel and on the PyTorch path), the same step with the decode rows' contexts made equal (same keys),
    and the same slices on a random-weight model of the same shape (its own KV cache): each with its price, and the
    step over its parts measured against priced."""
    import torch

    from jalapeno.backends.torch.attention import SeqSlice
    from jalapeno.backends.torch.runner import PYTORCH_ONLY, DecodePolicy, ModelRunner
    from jalapeno.bench.dataset import WorkloadSpec, workload_lengths
    from jalapeno.engine.config import EngineConfig
    from jalapeno.engine.sequence import SamplingParams, Sequence
    from jalapeno.hardware.catalog import get_chip, load_spec_file
    from jalapeno.hardware.probe import interleaved_times, random_model
    from jalapeno.models.catalog import load_model
    from jalapeno.perf.shape import StepShape
    from jalapeno.server.build import build_torch
    from jalapeno.sim import cost_model_for

    engine = build_torch(None, engine_config=EngineConfig(max_num_seqs=conc)).engine
    runner = engine.backend.runner
    if threads is not None:
        torch.set_num_threads(threads)
    chip = load_spec_file(chip_path) if chip_path else get_chip("local")
    cm = cost_model_for("smollm2-135m", chip, precision="fp32", kv="fp32")
    n = max(4, 3 * conc)
    prompts, outputs = workload_lengths(WorkloadSpec(dataset="random", num_prompts=n, input_len=isl, output_len=osl,
                                                     range_ratio=0.8, fixed_output_len=True, seed=0))
    rng = np.random.default_rng(0)
    got: list = []
    forward = runner.forward

    def spy(slices, ids, rows):
        dec = [s for s in slices if s.num_tokens == 1 and s.start > 0]
        if not got and len(dec) >= min_rows and len(dec) < len(slices):
            got.append(([SeqSlice(s.start, s.num_tokens, list(s.block_table)) for s in slices], list(ids), list(rows)))
        return forward(slices, ids, rows)

    runner.forward = spy
    sent = done = 0
    while done < n and not got:
        while sent < n and sent - done < conc:
            ids = rng.integers(100, 10_000, int(prompts[sent])).tolist()
            engine.add_sequence(Sequence(ids, SamplingParams(max_tokens=int(outputs[sent]), ignore_eos=True)))
            sent += 1
        done += sum(o.finished for o in engine.step())
    runner.forward = forward
    if not got:
        raise SystemExit(f"no mixed step beside >= {min_rows} decode rows in the run")
    slices, ids, rows = got[0]
    dec_i = [i for i, s in enumerate(slices) if s.num_tokens == 1 and s.start > 0]
    pre_i = [i for i in range(len(slices)) if i not in dec_i]
    dec, pre = [slices[i] for i in dec_i], [slices[i] for i in pre_i]
    offs = np.cumsum([0] + [s.num_tokens for s in slices])
    ids_of = lambda idx: [t for i in idx for t in ids[offs[i]:offs[i + 1]]]  # noqa: E731
    ctx = [s.start + 1 for s in dec]
    eq = equal_contexts(ctx)
    used = {b for s in slices for b in s.block_table}
    spare = iter(b for b in range(runner.num_blocks - 1, -1, -1) if b not in used)
    dec_eq = []
    for s, c in zip(dec, eq):
        need = -(-c // BLOCK)
        table = s.block_table[:need] + [next(spare) for _ in range(need - len(s.block_table[:need]))]
        dec_eq.append(SeqSlice(c - 1, 1, table))
    print(f"captured: {len(pre)} prompt(s) of {[s.num_tokens for s in pre]} tokens beside {len(dec)} decode rows at "
          f"contexts {min(ctx)}-{max(ctx)} (mean {np.mean(ctx):.0f}); policy {runner.policy}", flush=True)
    rnd = ModelRunner(random_model(load_model("smollm2-135m"), "cpu").model, runner.num_blocks, BLOCK, "cpu",
                      torch.float32)
    auto = runner.policy

    def call(r, sl, toks, lrows, policy):
        def run():
            r.policy = policy
            return r.forward(sl, toks, lrows)
        return run

    pre_rows = list(np.cumsum([s.num_tokens for s in pre]) - 1)
    nd = len(dec)
    fused = DecodePolicy(fused_max_batch=nd, panel_min_rows=auto.panel_min_rows)
    mixed_rows = list(range(nd)) + [nd + r for r in pre_rows]
    fns, shapes = {}, {}
    for tag, r in (("real", runner), ("random w", rnd)):
        fns[f"mixed ({tag})"] = call(r, dec + pre, ids_of(dec_i) + ids_of(pre_i), mixed_rows, auto)
        fns[f"prompts alone ({tag})"] = call(r, pre, ids_of(pre_i), pre_rows, auto)
        fns[f"decode fused ({tag})"] = call(r, dec, ids_of(dec_i), list(range(nd)), fused)
        fns[f"decode torch ({tag})"] = call(r, dec, ids_of(dec_i), list(range(nd)), PYTORCH_ONLY)
        shapes[f"mixed ({tag})"] = ([(s.num_tokens, 0) for s in pre], ctx)
        shapes[f"prompts alone ({tag})"] = ([(s.num_tokens, 0) for s in pre], [])
        shapes[f"decode fused ({tag})"] = ([], ctx)
        shapes[f"decode torch ({tag})"] = ([], ctx)
    fns["mixed equal ctx (real)"] = call(runner, dec_eq + pre, ids_of(dec_i) + ids_of(pre_i), mixed_rows, auto)
    shapes["mixed equal ctx (real)"] = ([(s.num_tokens, 0) for s in pre], eq)
    priced = {k: cm.step(StepShape.from_lists(prefill=p, decode_ctx=d)).time_s for k, (p, d) in shapes.items()}
    t = interleaved_times(fns, 0.0, (rounds, rounds))
    med = {k: float(np.median(v)) for k, v in t.items()}
    print(f"{rounds} interleaved rounds, threads {torch.get_num_threads()}")
    for k in fns:
        print(f"  {k:26s} {med[k] * 1e3:8.1f} ms  priced {priced[k] * 1e3:8.1f}  m/p {med[k] / priced[k]:.3f}")
    for tag in ("real", "random w"):
        m = np.array(t[f"mixed ({tag})"])
        parts = np.array(t[f"prompts alone ({tag})"]) + np.array(t[f"decode fused ({tag})"])
        pp = priced[f"prompts alone ({tag})"] + priced[f"decode fused ({tag})"]
        print(f"  {tag}: mixed / (prompts + fused decode) per round {np.median(m / parts):.3f}, priced "
              f"{priced[f'mixed ({tag})'] / pp:.3f}; mixed / fused decode {np.median(m / np.array(t[f'decode fused ({tag})'])):.3f}"
              f" (priced {priced[f'mixed ({tag})'] / priced[f'decode fused ({tag})']:.3f})")
    r = np.array(t["mixed (real)"]) / np.array(t["mixed (random w)"])
    e = np.array(t["mixed (real)"]) / np.array(t["mixed equal ctx (real)"])
    print(f"  mixed real / random weights per round {np.median(r):.3f}; real / equal contexts {np.median(e):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chip", nargs="?", default=None, help="a probed chip YAML (default: the local chip)")
    ap.add_argument("--ab", default=None, help="spread, scatter, prompts or long: an interleaved A/B (see above)")
    ap.add_argument("--rounds", type=int, default=9, help="with --ab: interleaved rounds")
    ap.add_argument("--policies", type=int, default=0, metavar="N",
                    help="with --ab: N alternations of a PASSIVE and an ACTIVE OpenMP process")
    ap.add_argument("--samples-json", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--captured", default=None, metavar="C,ISL,OSL",
                    help="the engine's first mixed step beside >= 24 decode rows, timed against its parts")
    ap.add_argument("--threads", type=int, default=None, help="with --engine: torch threads (default: the probed)")
    ap.add_argument("--engine", default=None, metavar="C,ISL,OSL",
                    help="the served closed loop offline (no server): steps by shape, measured / priced")
    args = ap.parse_args()
    if args.rounds < 1 or args.policies < 0:
        raise SystemExit("--rounds must be >= 1 and --policies >= 0")
    if args.captured or args.engine:
        flag, text = ("--captured", args.captured) if args.captured else ("--engine", args.engine)
        try:
            conc, isl, osl = (int(x) for x in text.split(","))
        except ValueError:
            raise SystemExit(f"{flag} {text!r}: give C,ISL,OSL as three integers, e.g. {flag} 32,128,64") from None
        if min(conc, isl, osl) < 1:
            raise SystemExit(f"{flag} {text!r}: C, ISL and OSL must be positive")
        if args.captured:
            captured_run(args.chip, conc, isl, osl, args.rounds, threads=args.threads)
        else:
            engine_run(args.chip, conc, isl, osl, threads=args.threads)
    elif args.ab is None:
        isolated(args.chip)
    elif args.policies:
        across_policies(args.chip, args.ab, args.rounds, args.policies)
    elif args.samples_json:
        import json

        got = ab_run(args.chip, args.ab, args.rounds, show=False)
        print(json.dumps(got))
    else:
        ab_run(args.chip, args.ab, args.rounds)


if __name__ == "__main__":
    main()
