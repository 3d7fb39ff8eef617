"""Engine on CPU: SmolLM2-135M decode/prefill throughput vs transformers, and batch-1 decode vs the roofline.

    python benchmarks/engine_cpu.py [--decode-tokens 32] [--batches 1,8,32] [--prefill-len 512] [--repeat 3] [--markdown]

Both sides run in this process on the same weights (the bundled Q4_1 GGUF, dequantised to float32) with the
same thread count:

* jalapeno: the shared Engine + TorchBackend (paged KV, continuous batching), scheduler included; decode
  time = wall(N new tokens) - wall(1 new token), prefill = wall(1 new token) for one long prompt. The weight
  layout (``--layout``, see jalapeno.backends.torch.linear) defaults to "auto": row-major "batched" weights,
  so decode steps of up to ``MAX_BATCH`` sequences run the fused C kernel (jalapeno.backends.torch.fused_decode);
  each such batch is measured again on the best PyTorch-ops path ("single" layout at batch 1, "batched"
  otherwise; kernel off). The layouts are load-time deployment choices; the model is re-laid out in place.
* transformers: ``generate`` (greedy, fixed length, dynamic KV cache); decode time = time(N new tokens) -
  time(1 new token), prefill = one forward over the prompt.
* roofline: batch-1 decode must stream every weight byte once per token: ``t >= weight_bytes / bandwidth``,
  bandwidth measured with a 1 GiB ``torch`` copy (read + write bytes / time, best of 5); a read-only
  bandwidth (sum over the same initialised 1 GiB, best of 5) is reported alongside for reference.
* noise: on a shared machine every measurement (bandwidth included) is repeated ``--repeat`` times, the two
  sides alternating, and the best of each is kept; the load average is recorded before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time

from jalapeno.hardware.threads import apply_thread_policy  # noqa: E402  (imports no torch)

# The OpenMP thread policy `jalapeno hardware probe` measured best here (default: idle workers sleep, unpinned),
# unless the environment sets one; OpenMP reads it when torch loads, so before that (applies to both sides).
THREAD_POLICY = apply_thread_policy()

import torch  # noqa: E402


def omp_env() -> dict[str, str]:
    """This process's OpenMP thread-policy variables (as torch read them at import)."""
    from jalapeno.hardware.threads import POLICY_VARS

    return {k: os.environ[k] for k in POLICY_VARS if k in os.environ}


def measure_bandwidth(gib: float = 1.0, reps: int = 5) -> float:
    """Bytes/s of a large tensor copy (counts read and write)."""
    n = int(gib * 2**30) // 4
    x = torch.ones(n, dtype=torch.float32)
    y = torch.empty_like(x)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        y.copy_(x)
        best = min(best, time.perf_counter() - t)
    return 2 * n * 4 / best


def measure_read_bandwidth(gib: float = 1.0, reps: int = 5) -> float:
    """Bytes/s of a reduction over a large initialised tensor (reads only)."""
    n = int(gib * 2**30) // 4
    x = torch.ones(n, dtype=torch.float32)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t)
    return n * 4 / best


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes read per decode step: every parameter once (tied embedding counted once, as the LM head)."""
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel() * p.element_size()
    return total


def _engine_wall(backend, prompts: list[list[int]], new_tokens: int) -> float:
    """Wall seconds to serve ``prompts`` to ``new_tokens`` each through a fresh Engine (scheduler included)."""
    from jalapeno.engine import Engine, EngineConfig, SamplingParams

    engine = Engine(backend, EngineConfig(max_num_seqs=max(len(prompts), 1), max_num_batched_tokens=8192))
    sp = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    t = time.perf_counter()
    for p in prompts:
        engine.add_request(p, sp)
    while engine.has_unfinished():
        engine.step()
    return time.perf_counter() - t


def jalapeno_run(backend, prompts: list[list[int]], new_tokens: int) -> dict:
    """Measured exactly like the transformers side: decode = wall(N new tokens) - wall(1 new token)."""
    one = _engine_wall(backend, prompts, 1)
    full = _engine_wall(backend, prompts, new_tokens)
    decode = full - one
    return {
        "prefill_tok_s": sum(map(len, prompts)) / one,
        "decode_tok_s": len(prompts) * (new_tokens - 1) / decode,
        "decode_step_ms": 1000 * decode / (new_tokens - 1),
    }


def hf_run(model, prompts: list[list[int]], new_tokens: int) -> dict:
    ids = torch.tensor(prompts)
    mask = torch.ones_like(ids)
    kw = dict(attention_mask=mask, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.inference_mode():
        t = time.perf_counter()
        model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw)
        one = time.perf_counter() - t
        t = time.perf_counter()
        model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kw)
        full = time.perf_counter() - t
    decode = full - one
    return {"decode_tok_s": len(prompts) * (new_tokens - 1) / decode, "decode_step_ms": 1000 * decode / (new_tokens - 1)}


def hf_prefill(model, prompt: list[int]) -> float:
    with torch.inference_mode():
        model(torch.tensor([prompt[:8]]))  # warm-up
        t = time.perf_counter()
        model(torch.tensor([prompt]))
        return len(prompt) / (time.perf_counter() - t)


def build_hf_reference(loaded):
    """transformers' Llama with exactly our (dequantised) weights."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.initialization import no_init_weights

    c = loaded.config  # ModelArch
    rope = {k: v for k, v in dataclasses.asdict(c.rope_scaling).items() if v is not None and k != "truncate"}
    cfg = LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
        max_position_embeddings=c.max_position_embeddings, tie_word_embeddings=c.tie_word_embeddings,
        rope_parameters={**rope, "rope_theta": c.rope_theta},
    )
    with no_init_weights():
        model = LlamaForCausalLM(cfg)
    model.load_state_dict(loaded.model.state_dict(), strict=False)
    model.tie_weights()
    return model.eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--prefill-len", type=int, default=512)
    ap.add_argument("--max-multi-step", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch threads for both sides (0 = torch default)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement, best kept (shared machines)")
    ap.add_argument("--layout", default="auto", choices=["auto", "single", "batched"],
                    help="weight layout: auto = batched (the fused C decode kernel where it applies), each "
                         "batch the kernel takes measured again on the best PyTorch-ops layout")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.backends.torch.fused_decode import MAX_BATCH
    from jalapeno.backends.torch.models.layers import set_weight_layout
    from jalapeno.backends.torch.runner import PYTORCH_ONLY, DecodePolicy

    backend = TorchBackend(None, kv_cache_gb=1.0, max_multi_step=args.max_multi_step)
    hf = build_hf_reference(backend.loaded)
    load_before = os.getloadavg()[0]
    reps = max(1, args.repeat)
    best = lambda runs: max(runs, key=lambda r: r["decode_tok_s"])  # noqa: E731
    bw = measure_bandwidth()
    wbytes = weight_bytes(backend.model)
    g = torch.Generator().manual_seed(0)
    rows = []
    jalapeno_run(backend, [[1, 2, 3, 4]], 4)  # warm-up
    hf_run(hf, [[1, 2, 3, 4]], 4)
    for b in [int(x) for x in args.batches.split(",")]:
        prompts = [torch.randint(100, 40000, (args.prompt_len,), generator=g).tolist() for _ in range(b)]
        if args.layout == "auto":
            # the default: row-major ("batched") weights, which the fused C decode kernel reads (used for decode
            # steps of up to fused_decode.MAX_BATCH sequences); for comparison the best PyTorch-ops path
            # ("single" layout at batch 1, "batched" otherwise, kernel off)
            variants = [("fused" if b <= MAX_BATCH else "torch-ops", "batched", True)]
            if b <= MAX_BATCH:
                variants.append(("torch-ops", "single" if b == 1 else "batched", False))
        else:
            variants = [("fused" if b <= MAX_BATCH and args.layout == "batched" else "torch-ops", args.layout, True)]
        for path, layout, fused in variants:
            set_weight_layout(backend.model, layout)
            backend.set_decode_policy(DecodePolicy() if fused else PYTORCH_ONLY)
            jalapeno_run(backend, prompts[:1], 2)  # warm-up in this layout (builds the kernel's plan)
            ours_runs, ref_runs = [], []
            for _ in range(reps):
                ours_runs.append(jalapeno_run(backend, prompts, args.decode_tokens))
                ref_runs.append(hf_run(hf, prompts, args.decode_tokens))
                if b == 1:  # the roofline's bandwidth is sampled next to the batch-1 runs it judges
                    bw = max(bw, measure_bandwidth())
            ours, ref = best(ours_runs), best(ref_runs)
            rows.append({"batch": b, "path": path, "layout": layout, "jalapeno_decode_tok_s": ours["decode_tok_s"],
                         "hf_decode_tok_s": ref["decode_tok_s"], "ratio": ours["decode_tok_s"] / ref["decode_tok_s"],
                         "jalapeno_step_ms": ours["decode_step_ms"], "hf_step_ms": ref["decode_step_ms"],
                         "jalapeno_runs_tok_s": [round(r["decode_tok_s"], 2) for r in ours_runs],
                         "hf_runs_tok_s": [round(r["decode_tok_s"], 2) for r in ref_runs]})
        backend.set_decode_policy(DecodePolicy())
    roof_tok_s = bw / wbytes
    read_bw = measure_read_bandwidth()
    set_weight_layout(backend.model, "batched" if args.layout == "auto" else args.layout)
    long = torch.randint(100, 40000, (args.prefill_len,), generator=g).tolist()
    ours_prefill = max(len(long) / _engine_wall(backend, [long], 1) for _ in range(reps))
    hf_pf = max(hf_prefill(hf, long) for _ in range(reps))
    result = {
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                    "load_avg_before": load_before, "load_avg_after": os.getloadavg()[0],
                    "torch": torch.__version__, "repeat": reps, "thread_policy": THREAD_POLICY,
                    "omp_env": omp_env()},
        "bandwidth_gb_s": bw / 1e9,
        "read_bandwidth_gb_s": read_bw / 1e9,
        "weight_mb": wbytes / 1e6,
        "roofline_batch1_tok_s": roof_tok_s,
        "batch1_fraction_of_roofline": rows[0]["jalapeno_decode_tok_s"] / roof_tok_s if rows and rows[0]["batch"] == 1 else None,
        "batch1_fraction_of_read_roofline": (
            rows[0]["jalapeno_decode_tok_s"] * wbytes / read_bw if rows and rows[0]["batch"] == 1 else None
        ),
        "batch1_rows_fraction_of_roofline": {
            r["path"]: r["jalapeno_decode_tok_s"] / roof_tok_s for r in rows if r["batch"] == 1
        },
        "decode": rows,
        "prefill": {"tokens": args.prefill_len, "jalapeno_tok_s": ours_prefill, "hf_tok_s": hf_pf, "ratio": ours_prefill / hf_pf},
    }
    if not args.markdown:
        print(json.dumps(result, indent=2))
        return
    print(f"Machine: {result['machine']}; copy bandwidth {bw / 1e9:.1f} GB/s (read-only {read_bw / 1e9:.1f} GB/s); "
          f"weights {wbytes / 1e6:.0f} MB (float32)\n")
    print("| batch | path | layout | jalapeno decode tok/s | transformers decode tok/s | ratio | jalapeno ms/step | "
          "transformers ms/step |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['batch']} | {r['path']} | {r['layout']} | {r['jalapeno_decode_tok_s']:.1f} | {r['hf_decode_tok_s']:.1f} | {r['ratio']:.2f} | "
              f"{r['jalapeno_step_ms']:.1f} | {r['hf_step_ms']:.1f} |")
    p = result["prefill"]
    print(f"\nPrefill ({p['tokens']} tokens): jalapeno {p['jalapeno_tok_s']:.0f} tok/s, transformers {p['hf_tok_s']:.0f} tok/s, ratio {p['ratio']:.2f}")
    print(f"Batch-1 decode roofline: {roof_tok_s:.1f} tok/s; jalapeno reaches {100 * (result['batch1_fraction_of_roofline'] or 0):.0f}%"
          f" ({100 * (result['batch1_fraction_of_read_roofline'] or 0):.0f}% of the read-only one, {read_bw / wbytes:.1f} tok/s)")
    for path, frac in result["batch1_rows_fraction_of_roofline"].items():
        print(f"  batch 1, {path}: {100 * frac:.0f}% of the copy roofline")


if __name__ == "__main__":
    main()
