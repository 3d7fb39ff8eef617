"""The prepared GPU check: correctness and speed of everything that only runs on CUDA, in one short run.

    python benchmarks/gpu_check.py --out DIR [--quick]      # on a machine with a CUDA GPU

Run it as the one device script of a session that is lent a GPU (benchmarks/gpu_check.sh installs what the
device image lacks and calls it); CI never runs it (no GPU). It writes ``gpu_check.json`` and
``gpu_check.md`` under ``--out`` and exits non-zero if any correctness check fails. Parts, each independent
(a failure is recorded and the next part still runs):

1. **paged decode kernel** (Triton) vs the PyTorch reference path on the GPU, at Llama-3-70B-like (bf16,
   GQA 64/8, d=128), GPT-OSS-like (sinks, sliding window 128, d=64) and DeepSeek MLA latent (576/512) shapes,
   mixed context lengths over scattered blocks: max abs error, and time of kernel vs reference (CUDA events)
   with the KV bytes it reads per second.
2. **FP8-block / MXFP4 matmul kernels** (Triton) vs a float64 matmul of the dequantized weights: relative
   error, and time vs torch's bf16 matmul at DeepSeek-V3 expert (7168->2048) and GPT-OSS (2880->2880) shapes.
3. **TorchBackend on CUDA, every family**: tiny random-weight models (jalapeno.testing.torch_models) in float32,
   three prompts batched through the shared engine, greedy tokens == transformers' on the same GPU.
4. **Engine decode speed**: Llama-3.1-8B's config with random bf16 weights (no download), decode tok/s at a
   few batch sizes through the engine vs transformers ``generate`` on the same weights, and the cost model's
   prediction of the same decode step on the catalogue's H200 (the chip twin against a measured step).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # quant.py: the CUDA-event timer


def cuda_time(fn, reps: int = 20) -> float:
    """Median seconds of ``fn()`` on the current stream (CUDA events; quant.py's timer)."""
    from quant import _time_cuda

    return _time_cuda(fn, reps)


# --- 1. paged decode ---------------------------------------------------------------------------------------
def check_paged_decode(quick: bool) -> list[dict]:
    from jalapeno.backends.torch.attention import SeqSlice, StepMetadata, paged_attention_ref
    from jalapeno.kernels.paged_attention import paged_decode

    dev = torch.device("cuda")
    cases = [
        # name, heads, kv heads, d, dv, window, sinks, mla, batch, max ctx
        ("llama-70b-like bf16", 64, 8, 128, 128, None, False, False, 32, 4096),
        ("gpt-oss-like sinks+window", 64, 8, 64, 64, 128, True, False, 32, 4096),
        ("deepseek MLA latent", 128, 1, 576, 512, None, False, True, 16, 2048),
    ]
    rows = []
    for name, h, kvh, d, dv, window, sinks, mla, batch, max_ctx in cases:
        if quick:
            batch, max_ctx = min(batch, 8), min(max_ctx, 1024)
        g = torch.Generator().manual_seed(0)
        bs = 16
        ctx = torch.randint(max_ctx // 4, max_ctx + 1, (batch,), generator=g).tolist()
        num_blocks = sum(-(-c // bs) for c in ctx) + 8
        perm = torch.randperm(num_blocks, generator=g).tolist()
        slices = []
        for c in ctx:
            nb = -(-c // bs)
            slices.append(SeqSlice(c - 1, 1, perm[:nb]))
            perm = perm[nb:]
        meta = StepMetadata.build(slices, bs, dev)
        if mla:
            k = torch.randn(num_blocks, bs, 1, d, device=dev, dtype=torch.bfloat16)
            v = k[..., :dv]
        else:
            k = torch.randn(num_blocks, bs, kvh, d, device=dev, dtype=torch.bfloat16)
            v = torch.randn(num_blocks, bs, kvh, dv, device=dev, dtype=torch.bfloat16)
        q = torch.randn(batch, h, d, device=dev, dtype=torch.bfloat16)
        s = torch.randn(h, device=dev) if sinks else None
        scale = d**-0.5
        got = paged_decode(q, k, v, meta.block_tables, meta.context_lens, scale, window, s)
        ref = paged_attention_ref(q.float(), k.float(), v.float(), meta, scale, window, s)
        err = (got.float() - ref).abs().max().item()
        t_kernel = cuda_time(lambda: paged_decode(q, k, v, meta.block_tables, meta.context_lens, scale, window, s))
        t_ref = cuda_time(lambda: paged_attention_ref(q, k, v, meta, scale, window, s), reps=5)
        seen = [min(c, window) if window else c for c in ctx]
        kv_bytes = sum(seen) * (kvh * (d if mla else d + dv)) * 2
        rows.append({"case": name, "batch": batch, "max_ctx": max_ctx, "max_abs_err": err, "ok": err < 2e-2,
                     "kernel_us": t_kernel * 1e6, "reference_us": t_ref * 1e6, "speedup": t_ref / t_kernel,
                     "kv_gb_s": kv_bytes / t_kernel / 1e9})
    return rows


# --- 2. quantized matmuls ----------------------------------------------------------------------------------
def check_quant_matmul(quick: bool) -> list[dict]:
    from jalapeno.quant import (
        dequantize_fp8_block,
        dequantize_mxfp4,
        fp8_block_matmul,
        mxfp4_matmul,
        quantize_fp8_block,
        quantize_mxfp4,
    )

    dev = torch.device("cuda")
    rows = []
    for label, (k, n) in {"DeepSeek-V3 expert 7168->2048": (7168, 2048), "GPT-OSS 2880->2880": (2880, 2880)}.items():
        g = torch.Generator().manual_seed(1)
        w = (torch.randn(n, k, generator=g) * 0.02).to(dev)
        q, s = quantize_fp8_block(w)
        p, e = quantize_mxfp4(w)
        w16 = w.to(torch.bfloat16)
        refs = {"fp8 block": dequantize_fp8_block(q, s).double(), "mxfp4": dequantize_mxfp4(p, e).double()}
        fns = {"fp8 block": lambda x: fp8_block_matmul(x, q, s, backend="triton"),
               "mxfp4": lambda x: mxfp4_matmul(x, p, e, backend="triton")}
        for m in ([1, 64] if quick else [1, 16, 128]):
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            t_bf16 = cuda_time(lambda: x @ w16.T)
            for name, fn in fns.items():
                y = fn(x).double()
                ref = x.double() @ refs[name].T
                rel = ((y - ref).norm() / ref.norm()).item()
                t = cuda_time(lambda fn=fn: fn(x))
                wbytes = (q.nbytes + s.nbytes) if name == "fp8 block" else (p.nbytes + e.nbytes)
                rows.append({"shape": label, "m": m, "path": name, "rel_err": rel, "ok": rel < 2e-2,
                             "us": t * 1e6, "bf16_us": t_bf16 * 1e6, "vs_bf16": t / t_bf16,
                             "weight_gb_s": wbytes / t / 1e9})
    return rows


# --- 3. every family on CUDA vs transformers ---------------------------------------------------------------
def check_families(quick: bool) -> list[dict]:
    from jalapeno.testing.torch_models import FAMILIES, build_hf

    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.backends.torch.generate import generate_tokens
    from jalapeno.engine import EngineConfig, SamplingParams

    rows = []
    prompts = [[5, 9, 33, 2], [100, 7, 1, 64, 12, 90, 3, 17, 45], [11] * 6 + [70, 71]]
    n = 8 if quick else 16
    for family in FAMILIES:
        with tempfile.TemporaryDirectory() as tmp:
            hf = build_hf(family)
            hf.save_pretrained(tmp)
            hf = hf.to("cuda")
            backend = TorchBackend(tmp, device="cuda", dtype="float32")
            cfg = EngineConfig(block_size=16, max_num_batched_tokens=256, max_num_seqs=8)
            ours = generate_tokens(backend, prompts, SamplingParams(max_tokens=n, temperature=0.0), cfg)
            ref = []
            for p in prompts:
                ids = torch.tensor([p], device="cuda")
                out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                                  eos_token_id=None)
                ref.append(out[0, len(p):].tolist())
            rows.append({"family": family, "ok": ours == ref, "ours": ours, "transformers": ref})
            del backend, hf
            torch.cuda.empty_cache()
    return rows


# --- 4. engine decode speed on a real-size model -----------------------------------------------------------
def engine_speed(quick: bool) -> dict:
    import transformers

    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.backends.torch.loader import LoadedModel, materialize
    from jalapeno.backends.torch.models import torch_arch
    from jalapeno.engine import Engine, EngineConfig, SamplingParams

    hf_cfg = json.loads((ROOT / "src/jalapeno/models/configs/llama-3.1-8b.json").read_text())["config"]
    hf_cfg = {**hf_cfg, "torch_dtype": "bfloat16"}
    cfg = torch_arch(hf_cfg, "llama-3.1-8b")
    with torch.device("cuda"):
        torch.manual_seed(0)
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**hf_cfg)).to(torch.bfloat16).eval()
    model, _ = materialize(cfg, dict(hf.state_dict()), "cuda", torch.bfloat16)
    backend = TorchBackend(loaded=LoadedModel(model, cfg, ("", None)), device="cuda", dtype="bfloat16",
                           gpu_memory_fraction=0.5)
    prompt_len, new = 128, (16 if quick else 64)
    rows = []
    for batch in ([1, 16] if quick else [1, 16, 64]):
        g = torch.Generator().manual_seed(batch)
        prompts = [torch.randint(100, cfg.vocab_size, (prompt_len,), generator=g).tolist() for _ in range(batch)]

        def engine_wall(n: int) -> float:
            eng = Engine(backend, EngineConfig(max_num_seqs=batch, max_num_batched_tokens=8192))
            for p in prompts:
                eng.add_request(p, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
            torch.cuda.synchronize()
            t = time.perf_counter()
            while eng.has_unfinished():
                eng.step()
            torch.cuda.synchronize()
            return time.perf_counter() - t

        def hf_wall(n: int) -> float:
            ids = torch.tensor(prompts, device="cuda")
            torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.inference_mode():
                hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                            do_sample=False, eos_token_id=None, pad_token_id=0)
            torch.cuda.synchronize()
            return time.perf_counter() - t

        engine_wall(2), hf_wall(2)  # warm-up
        ours = min(engine_wall(new) - engine_wall(1) for _ in range(2)) / (new - 1)
        ref = min(hf_wall(new) - hf_wall(1) for _ in range(2)) / (new - 1)
        rows.append({"batch": batch, "engine_step_ms": ours * 1e3, "transformers_step_ms": ref * 1e3,
                     "engine_tok_s": batch / ours, "transformers_tok_s": batch / ref, "ratio": ref / ours,
                     "predicted_h200_step_ms": _predicted_step_ms(batch, prompt_len + new // 2)})
    return {"model": "llama-3.1-8b (random bf16 weights)", "prompt_len": prompt_len, "new_tokens": new, "rows": rows}


def _predicted_step_ms(batch: int, ctx: int) -> float | None:
    """The cost model's decode step for the same shape on the catalogue's H200 (bf16, TP1)."""
    try:
        from jalapeno.hardware import get_chip
        from jalapeno.models import load_model
        from jalapeno.perf import CostModel, Parallelism, Precision, StepShape

        cm = CostModel(load_model("llama-3.1-8b"), get_chip("h200"), Parallelism(), Precision(weights="bf16"))
        shape = StepShape(decode_seqs=batch, decode_tokens=batch, decode_ctx_sum=batch * ctx)
        return cm.step(shape).time_s * 1e3
    except Exception as exc:  # noqa: BLE001 - a report line, never a failed GPU run
        return f"n/a: {exc}"  # type: ignore[return-value]


def markdown(res: dict) -> str:
    out = [f"# GPU check: {res['device']}\n", f"torch {res['torch']}, triton {res['triton']}\n"]
    for part, rows in res["parts"].items():
        out.append(f"\n## {part}\n")
        if isinstance(rows, dict) and "error" in rows:
            out.append(f"FAILED: {rows['error']}\n")
            continue
        if isinstance(rows, dict):
            out.append(f"{ {k: v for k, v in rows.items() if k != 'rows'} }\n")
            rows = rows["rows"]
        if not rows:
            continue
        keys = [k for k in rows[0] if k not in ("ours", "transformers")]
        out.append("| " + " | ".join(keys) + " |")
        out.append("|" + "---|" * len(keys))
        for r in rows:
            out.append("| " + " | ".join(f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--quick", action="store_true", help="smaller shapes and fewer tokens")
    ap.add_argument("--parts", default="paged,quant,families,speed")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("error: no CUDA GPU here; run this on a machine with one", file=sys.stderr)
        raise SystemExit(2)
    import triton

    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "parts": {}}
    funcs = {"paged": ("paged decode kernel", check_paged_decode), "quant": ("quantized matmuls", check_quant_matmul),
             "families": ("families on CUDA vs transformers", check_families),
             "speed": ("engine decode speed", engine_speed)}
    failed = False
    args.out.mkdir(parents=True, exist_ok=True)
    for key in args.parts.split(","):
        title, fn = funcs[key]
        t = time.perf_counter()
        try:
            rows = fn(args.quick)
            failed |= isinstance(rows, list) and not all(r.get("ok", True) for r in rows)
        except Exception as exc:  # noqa: BLE001 - record and go on to the next part
            rows = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            failed = True
        res["parts"][title] = rows
        print(f"{title}: {time.perf_counter() - t:.1f} s", flush=True)
        (args.out / "gpu_check.json").write_text(json.dumps(res, indent=2, default=str))
    md = markdown(res)
    (args.out / "gpu_check.md").write_text(md)
    print(md)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
