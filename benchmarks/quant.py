"""Weight memory and matmul time of float32 / bf16 / FP8-block / MXFP4 weights at decode shapes, and the same
formats end to end: SmolLM2-135M decode through TorchBackend + the engine.

    python benchmarks/quant.py                 # measure and rewrite the benchmark section of docs/quantization.md
    python benchmarks/quant.py --no-write      # print the tables only
    python benchmarks/quant.py --skip-matmul   # only the SmolLM2 end-to-end table (and keep the matmul one)

End to end: the bundled SmolLM2-135M-Instruct GGUF loaded six ways (float32; bf16; ``--quantize fp8`` and
``--quantize mxfp4`` with the model dtype -- activations, embedding, tied LM head, norms -- float32 or bf16),
side by side in one run. Weight memory = bytes the loaded model holds
(float parameters once, tied embedding included, + quantized codes and scales). Decode tok/s at batch B:
``B * D / (wall(1 + D new tokens) - wall(1 new token))`` for B greedy sequences of a 32-token prompt (prefill and
the first token cancel out), best of ``--reps``.

Shapes: DeepSeek-V3 expert up-projection (K=7168 -> N=2048) and GPT-OSS attention-sized (2880 -> 2880),
batch M in 1..64 (decode). On CPU every path is the PyTorch one (quantized paths dequantize per call). With a CUDA
device the script also times the Triton kernels against torch's bf16 matmul and reports achieved memory
bandwidth in GB/s (weight + activation + output bytes / time). Runs unchanged on a GPU box; CI never runs it.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spinning OpenMP workers steal the core (docs/performance.md)
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from jalapeno.quant import fp8_block_matmul, mxfp4_matmul, quantize_fp8_block, quantize_mxfp4

SHAPES = {"DeepSeek-V3 expert 7168->2048": (7168, 2048), "GPT-OSS 2880->2880": (2880, 2880)}
BEGIN, END = "<!-- benchmarks/quant.py: begin -->", "<!-- benchmarks/quant.py: end -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "quantization.md"


@dataclass(frozen=True)
class Row:
    shape: str
    m: int
    path: str
    weight_bytes: int
    seconds: float
    moved_bytes: int  # weights + activations in + outputs

    @property
    def gbps(self) -> float:
        return self.moved_bytes / self.seconds / 1e9


def _time_cpu(fn: Callable[[], torch.Tensor], reps: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _time_cuda(fn: Callable[[], torch.Tensor], reps: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    return statistics.median(samples)


Path_ = tuple[int, Callable[[torch.Tensor], torch.Tensor]]


def _paths(k: int, n: int, device: str, backend: str) -> dict[str, Path_]:
    """name -> (weight bytes held, x -> y)."""
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(n, k, generator=g) * 0.02).to(device)
    q, s = quantize_fp8_block(w)
    p, e = quantize_mxfp4(w)
    w32, w16 = w.float(), w.to(torch.bfloat16)
    paths: dict[str, Path_] = {}
    if device == "cpu":
        paths["float32"] = (w32.nbytes, lambda x: x.float() @ w32.T)
    paths["bf16"] = (w16.nbytes, lambda x: x @ w16.T)
    be: Any = backend
    paths["fp8 block"] = (q.nbytes + s.nbytes, lambda x: fp8_block_matmul(x, q, s, backend=be))
    paths["mxfp4"] = (p.nbytes + e.nbytes, lambda x: mxfp4_matmul(x, p, e, backend=be))
    return paths


def run(batches: list[int], reps: int, device: str) -> list[Row]:
    rows: list[Row] = []
    backend = "triton" if device == "cuda" else "torch"
    timer = _time_cuda if device == "cuda" else _time_cpu
    for label, (k, n) in SHAPES.items():
        paths = _paths(k, n, device, backend)
        for m in batches:
            x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
            for name, (wbytes, fn) in paths.items():
                xin = x.float() if name == "float32" else x
                secs = timer(lambda fn=fn, xin=xin: fn(xin), reps)
                moved = wbytes + xin.nbytes + m * n * xin.element_size()
                rows.append(Row(label, m, name, wbytes, secs, moved))
    return rows


def table(rows: list[Row], device_name: str) -> str:
    out = [
        f"Device: {device_name}. Median of repeated calls; activations bf16 (float32 for the float32 path). "
        "`time / bf16` and `memory / bf16` are measured side by side in the same run.",
        "",
        "| shape (K->N) | batch | path | weight MiB | memory / bf16 | time (us) | time / bf16 | achieved GB/s |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    base = {(r.shape, r.m): r for r in rows if r.path == "bf16"}
    for r in rows:
        b = base[(r.shape, r.m)]
        out.append(
            f"| {r.shape} | {r.m} | {r.path} | {r.weight_bytes / 2**20:.2f} | {r.weight_bytes / b.weight_bytes:.3f} "
            f"| {r.seconds * 1e6:.0f} | {r.seconds / b.seconds:.2f} | {r.gbps:.1f} |"
        )
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------------
# end to end: SmolLM2-135M through TorchBackend
# ---------------------------------------------------------------------------------------------------------
#: name -> (model dtype: activations and the layers that stay float, --quantize)
E2E_CONFIGS = {
    "float32": ("float32", None),
    "bf16": ("bfloat16", None),
    "fp8, rest float32": ("float32", "fp8"),
    "mxfp4, rest float32": ("float32", "mxfp4"),
    "fp8, rest bf16": ("bfloat16", "fp8"),
    "mxfp4, rest bf16": ("bfloat16", "mxfp4"),
}


@dataclass(frozen=True)
class E2ERow:
    config: str
    weight_bytes: int
    quantized_bytes: int
    load_s: float
    decode_tok_s: dict[int, float]


def _model_weight_bytes(model: torch.nn.Module) -> tuple[int, int]:
    """(all weight bytes, of which quantized codes + scales); shared (tied) parameters counted once."""
    from jalapeno.quant import quantized_bytes

    q = quantized_bytes(model)
    return q + sum(p.nbytes for p in model.parameters()), q


def run_e2e(batches: list[int], decode_tokens: int, reps: int) -> list[E2ERow]:
    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.backends.torch.generate import generate_tokens
    from jalapeno.engine import EngineConfig, SamplingParams

    rows = []
    for name, (dtype, quantize) in E2E_CONFIGS.items():
        t0 = time.perf_counter()
        backend = TorchBackend(None, dtype=dtype, quantize=quantize, kv_cache_gb=0.25)
        load_s = time.perf_counter() - t0
        total, qbytes = _model_weight_bytes(backend.model)
        speeds = {}
        for b in batches:
            prompts = [[(17 * i + 31 * j) % 4000 + 100 for j in range(32)] for i in range(b)]
            cfg = EngineConfig(max_num_seqs=b, block_size=16)

            def wall(n: int, backend=backend, prompts=prompts, cfg=cfg) -> float:
                sp = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
                t = time.perf_counter()
                generate_tokens(backend, prompts, sp, cfg)
                return time.perf_counter() - t

            wall(2)  # warm-up
            best = min(wall(1 + decode_tokens) - wall(1) for _ in range(reps))
            speeds[b] = b * decode_tokens / best
        rows.append(E2ERow(name, total, qbytes, load_s, speeds))
        print(f"  {name}: {total / 2**20:.1f} MiB, " + ", ".join(f"b{b} {v:.2f} tok/s" for b, v in speeds.items()))
        del backend
    return rows


def e2e_table(rows: list[E2ERow], device_name: str) -> str:
    batches = list(rows[0].decode_tok_s)
    base = next(r for r in rows if r.config == "bf16")
    head = " | ".join(f"decode tok/s b={b} | vs bf16" for b in batches)
    out = [
        f"Device: {device_name}. SmolLM2-135M-Instruct (bundled Q4_1 GGUF dequantised, then loaded as each config), "
        "TorchBackend + engine, greedy; all rows measured side by side in this run.",
        "",
        f"| config | weight MiB | memory / bf16 | of which quantized MiB | load s | {head} |",
        "|---|---:|---:|---:|---:|" + "---:|---:|" * len(batches),
    ]
    for r in rows:
        cells = " | ".join(f"{r.decode_tok_s[b]:.2f} | {r.decode_tok_s[b] / base.decode_tok_s[b]:.2f}" for b in batches)
        out.append(
            f"| {r.config} | {r.weight_bytes / 2**20:.1f} | {r.weight_bytes / base.weight_bytes:.3f} "
            f"| {r.quantized_bytes / 2**20:.1f} | {r.load_s:.1f} | {cells} |"
        )
    return "\n".join(out)


def write_section(doc: Path, body: str) -> None:
    text = doc.read_text() if doc.exists() else "# Quantization\n"
    section = f"{BEGIN}\n## Quantization benchmark (benchmarks/quant.py)\n\n{body}\n{END}\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    doc.write_text(text)


def _existing_section(doc: Path, title: str) -> str | None:
    """The ``### title`` subsection currently in the doc's benchmark block (to keep it when not re-measured)."""
    text = doc.read_text() if doc.exists() else ""
    if BEGIN not in text or END not in text:
        return None
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    parts = block.split("\n### ")
    for part in parts[1:]:
        if part.startswith(title):
            return "### " + part.strip("\n")
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--e2e-batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--decode-tokens", type=int, default=8, help="end to end: tokens timed per sequence")
    ap.add_argument("--e2e-reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: see docs/performance.md)")
    ap.add_argument("--skip-matmul", action="store_true", help="only the end-to-end table (keep the doc's matmul one)")
    ap.add_argument("--skip-e2e", action="store_true", help="only the matmul tables")
    ap.add_argument("--no-write", action="store_true", help="print only; do not touch docs/quantization.md")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sections = []
    load = f", load average {os.getloadavg()[0]:.1f} at start" if hasattr(os, "getloadavg") else ""
    cpu_name = f"CPU ({platform.machine()}, {torch.get_num_threads()} threads{load}; quantized and bf16 paths are PyTorch, float32 decode runs the fused C kernel)"
    if args.skip_matmul:
        kept = _existing_section(DOC, "CPU\n")
        if kept:
            sections.append(kept)
    else:
        sections.append("### CPU\n\n" + table(run(args.batches, args.reps, "cpu"), cpu_name))
    if args.skip_e2e:
        kept = _existing_section(DOC, "SmolLM2-135M end to end")
        if kept:
            sections.append(kept)
    else:
        e2e = run_e2e(args.e2e_batches, args.decode_tokens, args.e2e_reps)
        sections.append("### SmolLM2-135M end to end (CPU)\n\n" + e2e_table(e2e, cpu_name))
    if torch.cuda.is_available() and not args.skip_matmul:
        gpu = torch.cuda.get_device_name()
        sections.append(
            "### CUDA: Triton kernels vs torch bf16\n\n"
            + table(run(args.batches, max(args.reps, 20), "cuda"), f"{gpu} (fp8/mxfp4 = Triton kernels)")
        )
    body = "\n\n".join(sections)
    print(body)
    if not args.no_write:
        write_section(DOC, body)
        print(f"\nwrote {DOC}")


if __name__ == "__main__":
    main()
