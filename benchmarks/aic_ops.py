"""The cost model's per-operator prices against NVIDIA aiconfigurator's per-operator silicon timings (issue #13).

    python benchmarks/aic_ops.py                       # ratio tables from the committed extract (offline)
    python benchmarks/aic_ops.py --chip b300 --op gemm # one chip / one operator family
    python benchmarks/aic_ops.py --rows                # also print every row (ours, measured, ratio)
    python benchmarks/aic_ops.py --paired              # + each chip vs B200 on identical rows, implied fractions
    python benchmarks/aic_ops.py --prefill-terms       # the measured prefill-kernel efficiencies (chip YAMLs)
    python benchmarks/aic_ops.py --moe-terms           # the measured prefill MoE op per expert format (chip YAMLs)
    /tmp/aic/bin/python benchmarks/aic_ops.py extract  # rebuild the extract from an installed wheel

aiconfigurator (Apache-2.0, https://github.com/ai-dynamo/aiconfigurator) ships a "perf database": per-operator
latencies its collectors measured on real GPUs (``aiconfigurator_core/systems/data/<system>/<op>/<framework>/
<version>/*.parquet``). ``extract`` (run with a Python that has pandas + pyarrow and the wheel installed, e.g.
``python -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator``) keeps a subset of the TensorRT-LLM
1.3.0rc20 tables (and NCCL 2.29.2) for the six systems our catalogue also has, and writes
``benchmarks/data/aic_ops_0.12.0.csv.gz`` with the wheel's name, version, the files' paths and sha256 (from the
wheel's RECORD) and the license in its ``#`` header lines. The default command needs only that file and jalapeno.

Every row is priced by the project's own cost model on the same chip (catalogue YAML, its ``efficiency``):
* GEMM m x n x k: the ``o_proj`` operator of a one-layer model whose attention width is k and hidden size n
  (``CostModel.breakdown``: max(FLOPs / (peak x compute fraction), bytes / (HBM x memory fraction)), with the
  precision's compute dtype chain, weight bytes incl. block scales, and dequantization where the chip has it);
* decode attention (batch x context) and context attention (batch x prompt): the ``attention`` operator of a
  one-layer GQA model with the row's per-GPU query / KV heads and head dim;
* MoE (tokens x hidden x inter, top-k of E, moe_tp x moe_ep): the ``moe_experts`` operator of a one-layer MoE
  model at ``Parallelism(tp = moe_tp x moe_ep, ep = moe_ep)`` (expected distinct experts, busiest EP rank);
* DeepSeek's MLA attention block (TensorRT-LLM's "MLA module": q_a/kv_a, q_b, kv_b, latent attention, o_proj) at
  128 / tp query heads per GPU, decode or prefill: those operators of ``CostModel.breakdown`` for DeepSeek-R1 at
  that tp, per layer (bf16 weights, or the native FP8 block-scaled ones);
* all-reduce (bf16, n GPUs, message elements): ``perf.network.collective(chip, efficiency, n, "allreduce")``.
The roofline price of one kernel has no fixed cost; a graph-replayed decode step adds ``kernel_launch_us +
kernel_overhead_us`` per kernel (``perf.model.kernel_count``), so the tables show ratios both without ("roofline")
and with that per-kernel cost ("+kernel", one kernel per GEMM / attention / MoE / all-reduce: the MoE block is ~6
kernels in our count and TensorRT-LLM's attention op ~2; 0 on Hopper, whose fitted fixed costs are per layer).
Ratio = ours / measured: < 1 means the cost model is too fast.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import math
import statistics
import sys
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).parent / "data" / "aic_ops_0.12.0.csv.gz"
#: aiconfigurator system -> our catalogue chip
SYSTEMS = {"h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200",
           "gb300": "gb300"}
CHIPS = {v: k for k, v in SYSTEMS.items()}
FRAMEWORK, VERSION, NCCL_VERSION = "trtllm", "1.3.0rc20", "2.29.2"
COLUMNS = ("system", "op", "dtype", "kv_dtype", "kernel", "m", "n", "k", "batch", "ctx", "heads", "kv_heads",
           "head_dim", "hidden", "inter", "topk", "experts", "moe_tp", "moe_ep", "gpus", "elems", "latency_ms",
           "source")
#: aiconfigurator dtype -> our Precision.weights for a dense GEMM ("nvfp4" is our fp4 path: FP4 tensor cores)
GEMM_PRECISION = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4"}
#: MoE dtype -> our Precision.weights for the routed experts of an MoE model
MOE_PRECISION = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4", "w4a8_mxfp4_mxfp8": "fp4",
                 "w4a16_mxfp4": "fp4"}


# ---------------------------------------------------------------------------------------------- extract
def _extract(args: argparse.Namespace) -> int:
    try:
        import pandas as pd  # noqa: F401  (only the extract needs it)
    except ImportError:
        print("extract needs pandas + pyarrow: run it with the Python of the venv aiconfigurator is installed in "
              "(e.g. /tmp/aic/bin/python)", file=sys.stderr)
        return 2
    try:
        import aiconfigurator_core
    except ImportError:
        print("aiconfigurator_core is not installed in this Python (pip install aiconfigurator)", file=sys.stderr)
        return 2
    import importlib.metadata as md

    import pandas as pd

    pkg = Path(aiconfigurator_core.__file__).parent
    dist = md.distribution("aiconfigurator-core")
    record = {}
    for line in (dist.read_text("RECORD") or "").splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[1].startswith("sha256="):
            record[parts[0]] = parts[1][len("sha256="):]
    wheel_tag = (dist.read_text("WHEEL") or "").split("Tag:")[-1].strip().splitlines()[0]
    rows: list[dict] = []
    sources: list[str] = []

    def src(p: Path) -> str:
        rel = p.relative_to(pkg.parent).as_posix()
        if rel not in sources:
            sources.append(rel)
        return str(sources.index(rel))

    def table(system: str, sub: str, name: str, version: str = VERSION, fw: str = FRAMEWORK):
        p = pkg / "systems" / "data" / system / sub / fw / version / f"{name}.parquet"
        return (pd.read_parquet(p), src(p)) if p.exists() else (None, "")

    gemm_m = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 2048, 4096, 8192, 16384]
    gemm_nk = {(n, k) for n in (2048, 4096, 8192, 16384) for k in (2048, 4096, 8192, 16384)} | {
        (7168, 2048), (2048, 7168), (7168, 16384), (16384, 7168)}
    heads = [(32, 8, 128), (8, 1, 128), (64, 8, 64), (16, 2, 128)]
    gen_batch, gen_step = [1, 4, 16, 64, 256], [127, 1023, 4095, 16383, 65535]
    ctx_batch, ctx_isl = [1, 4, 16], [1024, 4096, 16384]
    moe_shapes = [(7168, 2048, 8, 256), (2880, 2880, 4, 128), (4096, 1536, 8, 128)]
    moe_par = [(1, 1), (1, 4), (1, 8), (8, 1), (2, 4), (1, 16), (1, 32)]
    for system in SYSTEMS:
        d, s = table(system, "gemm", "gemm_perf")
        d = d[d.m.isin(gemm_m) & d.gemm_dtype.isin(list(GEMM_PRECISION))]
        d = d[[(n, k) in gemm_nk for n, k in zip(d.n, d.k)]]
        for r in d.itertuples():
            rows.append(dict(system=system, op="gemm", dtype=r.gemm_dtype, kernel=r.kernel_source, m=r.m, n=r.n,
                             k=r.k, latency_ms=r.latency, source=s))
        for op, name in (("decode_attn", "generation_attention_perf"), ("context_attn", "context_attention_perf")):
            d, s = table(system, "attention", name)
            d = d[(d.window_size == 0) & (d.beam_width == 1)]
            d = d[[h in heads for h in zip(d.num_heads, d.num_key_value_heads, d.head_dim)]]
            if op == "decode_attn":
                d = d[d.batch_size.isin(gen_batch) & d.step.isin(gen_step)]
            else:
                d = d[d.batch_size.isin(ctx_batch) & d.isl.isin(ctx_isl) & (d.attn_dtype == "bfloat16")]
            for r in d.itertuples():
                ctx = r.isl + r.step  # decode: isl 1, the cache holds `step` tokens before this one
                rows.append(dict(system=system, op=op, dtype=r.attn_dtype, kv_dtype=r.kv_cache_dtype,
                                 kernel=r.kernel_source, batch=r.batch_size, ctx=ctx, heads=r.num_heads,
                                 kv_heads=r.num_key_value_heads, head_dim=r.head_dim, latency_ms=r.latency,
                                 source=s))
        for op, name in (("mla_decode", "mla_generation_module_perf"), ("mla_context", "mla_context_module_perf")):
            d, s = table(system, "mla", name)
            if d is None:
                continue
            d = d[d.gemm_type.isin(["bfloat16", "fp8_block"]) & d.num_heads.isin([16, 128]) & (d.tp_size == 1)]
            if op == "mla_decode":
                d = d[d.batch_size.isin(gen_batch) & d.step.isin([128, 1024, 4096, 16384])]
            else:
                d = d[d.batch_size.isin([1, 4]) & d.isl.isin(ctx_isl)]
            for r in d.itertuples():
                rows.append(dict(system=system, op=op, dtype=r.gemm_type, kv_dtype=r.kv_cache_dtype,
                                 kernel=r.kernel_source, batch=r.batch_size, ctx=r.isl + r.step, heads=r.num_heads,
                                 latency_ms=r.latency, source=s))
        d, s = table(system, "moe", "moe_perf")
        d = d[(d.distribution == "balanced") & d.moe_dtype.isin(list(MOE_PRECISION))]
        d = d[[sh in moe_shapes for sh in zip(d.hidden_size, d.inter_size, d.topk, d.num_experts)]]
        d = d[[p in moe_par for p in zip(d.moe_tp_size, d.moe_ep_size)]]
        for r in d.itertuples():
            rows.append(dict(system=system, op="moe", dtype=r.moe_dtype, kernel=r.kernel_source, batch=r.num_tokens,
                             hidden=r.hidden_size, inter=r.inter_size, topk=r.topk, experts=r.num_experts,
                             moe_tp=r.moe_tp_size, moe_ep=r.moe_ep_size, latency_ms=r.latency, source=s))
        d, s = table(system, "comm", "custom_allreduce_perf")
        if d is not None:
            for r in d[d.op_name == "all_reduce"].itertuples():
                rows.append(dict(system=system, op="allreduce", dtype=r.allreduce_dtype, kernel=r.kernel_source,
                                 gpus=r.num_gpus, elems=r.message_size, latency_ms=r.latency, source=s))
        d, s = table(system, "comm", "nccl_perf", NCCL_VERSION, "nccl")
        if d is not None:
            for r in d[(d.op_name == "all_reduce") & (d.nccl_dtype == "half")].itertuples():
                rows.append(dict(system=system, op="allreduce", dtype="bfloat16", kernel="NCCL", gpus=r.num_gpus,
                                 elems=r.message_size, latency_ms=r.latency, source=s))
    out = Path(args.out)
    buf = io.StringIO()
    buf.write(f"# aiconfigurator-core {dist.version} (PyPI wheel aiconfigurator_core-{dist.version}-{wheel_tag}.whl), "
              f"license {dist.metadata.get('License-Expression') or dist.metadata.get('License')} "
              "(Copyright (c) NVIDIA CORPORATION & AFFILIATES; https://github.com/ai-dynamo/aiconfigurator)\n")
    buf.write("# per-operator latencies measured on the GPUs named by `system` (latency_ms in milliseconds), a subset "
              "of the tables below (`source` = index), extracted by benchmarks/aic_ops.py extract\n")
    for i, rel in enumerate(sources):
        buf.write(f"# source {i}: {rel} sha256={record.get(rel, '?')}\n")
    w = csv.DictWriter(buf, COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        lat = r["latency_ms"]
        w.writerow({**r, "latency_ms": f"{lat:.6g}"})
    with open(out, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as f:
        f.write(buf.getvalue().encode())  # no name, mtime 0: the same rows give the same bytes anywhere
    print(f"{len(rows)} rows from {len(sources)} tables -> {out} ({out.stat().st_size / 1024:.0f} KiB)")
    return 0


# ---------------------------------------------------------------------------------------------- load
@dataclass(frozen=True)
class Row:
    system: str
    op: str
    dtype: str
    kv_dtype: str
    kernel: str
    m: int
    n: int
    k: int
    batch: int
    ctx: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    inter: int
    topk: int
    experts: int
    moe_tp: int
    moe_ep: int
    gpus: int
    elems: int
    latency_ms: float

    @property
    def chip(self) -> str:
        return SYSTEMS[self.system]


def load(path: Path = DATA) -> tuple[list[Row], list[str]]:
    """The extract's rows and its ``#`` header lines (provenance)."""
    header: list[str] = []
    body: list[str] = []
    with gzip.open(path, "rt") as f:
        for line in f:
            (header if line.startswith("#") else body).append(line)
    ints = {c for c in COLUMNS if c not in ("system", "op", "dtype", "kv_dtype", "kernel", "latency_ms", "source")}
    rows = []
    for r in csv.DictReader(body):
        kw = {c: (int(r[c]) if r[c] else 0) if c in ints else r[c] for c in COLUMNS if c != "source"}
        kw["latency_ms"] = float(r["latency_ms"])
        rows.append(Row(**kw))
    return rows, [h[2:].rstrip("\n") for h in header]


# ---------------------------------------------------------------------------------------------- our prices
@lru_cache(maxsize=None)
def _chip(name: str):
    from jalapeno.hardware.catalog import get_chip

    return get_chip(name)


@lru_cache(maxsize=None)
def _base(name: str):
    from jalapeno.models import load_model

    return load_model(name)


@lru_cache(maxsize=4096)
def _dense_cm(chip: str, hidden: int, width: int, heads: int, kv_heads: int, head_dim: int, weights: str,
              kv: str = "bf16"):
    """A one-layer dense GQA model (Llama-3.1-8B's config with the given widths) and its cost model on ``chip``."""
    from jalapeno.perf import CostModel, Parallelism, Precision

    m = replace(_base("llama-3.1-8b"), name=f"aic-{hidden}x{width}", num_layers=1, hidden_size=hidden,
                num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, layer_types=())
    assert heads * head_dim == width
    return CostModel(m, _chip(chip), Parallelism(), Precision(weights=weights, kv=kv))


def _op_time(cm, shape, name: str) -> float:
    for o in cm.breakdown(shape).ops:
        if o.name == name:
            return o.time_s
    raise KeyError(name)


def price_gemm(chip: str, m: int, n: int, k: int, dtype: str) -> float:
    """Seconds the cost model gives an m x n x k GEMM (``o_proj`` of a one-layer model: width k -> hidden n)."""
    from jalapeno.perf import StepShape

    hd = 128 if k % 128 == 0 else 64
    cm = _dense_cm(chip, n, k, k // hd, k // hd, hd, GEMM_PRECISION[dtype])
    # m decode rows (one token each) or one m-token prefill chunk: the o_proj FLOPs / bytes depend on T only
    return _op_time(cm, StepShape.from_lists(decode_ctx=[1] * m), "o_proj")


def price_decode_attn(chip: str, batch: int, ctx: int, heads: int, kv_heads: int, head_dim: int, kv: str) -> float:
    from jalapeno.perf import StepShape

    cm = _dense_cm(chip, 4096, heads * head_dim, heads, kv_heads, head_dim, "bf16", "fp8" if kv == "fp8" else "bf16")
    return _op_time(cm, StepShape.from_lists(decode_ctx=[ctx] * batch), "attention")


def price_context_attn(chip: str, batch: int, isl: int, heads: int, kv_heads: int, head_dim: int, kv: str) -> float:
    from jalapeno.perf import StepShape

    cm = _dense_cm(chip, 4096, heads * head_dim, heads, kv_heads, head_dim, "bf16", "fp8" if kv == "fp8" else "bf16")
    e = _chip(chip).efficiency  # + the measured fixed costs a prefilling step adds per query head and per layer
    fixed = batch * isl * heads * e.prefill_attention_ns_per_query_head * 1e-9 + e.prefill_attention_layer_us * 1e-6
    return _op_time(cm, StepShape.from_lists(prefill=[(isl, 0)] * batch), "attention") + fixed


@lru_cache(maxsize=1024)
def _moe_cm(chip: str, hidden: int, inter: int, topk: int, experts: int, tp: int, ep: int, weights: str):
    from jalapeno.perf import CostModel, Parallelism, Precision

    heads = max(64, tp)
    m = replace(_base("mixtral-8x7b"), name=f"aic-moe-{hidden}x{inter}", num_layers=1, hidden_size=hidden,
                num_heads=heads, num_kv_heads=max(8, tp) if tp > 8 else 8, head_dim=128, num_experts=experts,
                experts_per_token=topk, moe_intermediate_size=inter, moe_layers=(True,), layer_types=())
    return CostModel(m, _chip(chip), Parallelism(tp=tp, ep=ep), Precision(weights=weights))


def price_moe(chip: str, tokens: int, hidden: int, inter: int, topk: int, experts: int, moe_tp: int, moe_ep: int,
              dtype: str) -> float:
    """Seconds of the routed experts of one MoE layer for ``tokens`` tokens (every rank holds all of them, as
    without attention DP), experts over moe_ep ranks, each split moe_tp ways."""
    from jalapeno.perf import StepShape

    cm = _moe_cm(chip, hidden, inter, topk, experts, moe_tp * moe_ep, moe_ep, MOE_PRECISION[dtype])
    return _op_time(cm, StepShape.from_lists(decode_ctx=[1] * tokens), "moe_experts")


#: the operators of DeepSeek's MLA attention block (TensorRT-LLM's measured "MLA module": projections, latent
#: attention, output projection), as the cost model names them
MLA_OPS = ("qkv_a_proj", "q_b_proj", "kv_b_proj", "attention", "o_proj")


@lru_cache(maxsize=64)
def _mla_cm(chip: str, tp: int, weights: str, kv: str):
    from jalapeno.perf import CostModel, Parallelism, Precision

    m = replace(_base("deepseek-r1"), name="aic-mla", num_layers=1)  # one (dense, first_k_dense) layer: it fits
    return CostModel(m, _chip(chip), Parallelism(tp=tp), Precision(weights=weights, kv=kv))


def price_mla(chip: str, batch: int, ctx: int, heads: int, dtype: str, kv: str, prefill: bool) -> float:
    """Seconds of one layer's MLA block of DeepSeek-R1 with ``heads`` query heads per GPU (tp = 128 / heads):
    decode of ``batch`` sequences at context ``ctx``, or a prefill of ``batch`` prompts of ``ctx`` tokens."""
    from jalapeno.perf import StepShape

    cm = _mla_cm(chip, 128 // heads, "bf16" if dtype == "bfloat16" else "native", "fp8" if kv == "fp8" else "bf16")
    shape = StepShape.from_lists(prefill=[(ctx, 0)] * batch) if prefill else StepShape.from_lists(
        decode_ctx=[ctx] * batch)
    ops = {o.name: o for o in cm.breakdown(shape).ops}
    return sum(ops[n].time_s / ops[n].layers for n in MLA_OPS if n in ops)


def price_allreduce(chip: str, gpus: int, nbytes: float) -> float:
    from jalapeno.perf.network import collective

    c = _chip(chip)
    col = collective(c, c.efficiency, gpus, "allreduce")
    return col.latency_s + col.s_per_byte * nbytes


def kernel_fixed_s(chip: str) -> float:
    """The per-kernel cost of a graph-replayed decode step on ``chip``: launch gap (chip fact) + fitted share."""
    c = _chip(chip)
    return (c.launch_us + c.efficiency.kernel_overhead_us) * 1e-6


def price(r: Row) -> float:
    """Our seconds for the operation of row ``r`` (roofline / collective formula; no per-kernel fixed cost)."""
    if r.op == "gemm":
        return price_gemm(r.chip, r.m, r.n, r.k, r.dtype)
    if r.op == "decode_attn":
        return price_decode_attn(r.chip, r.batch, r.ctx, r.heads, r.kv_heads, r.head_dim, r.kv_dtype)
    if r.op == "context_attn":
        return price_context_attn(r.chip, r.batch, r.ctx, r.heads, r.kv_heads, r.head_dim, r.kv_dtype)
    if r.op == "moe":
        return price_moe(r.chip, r.batch, r.hidden, r.inter, r.topk, r.experts, r.moe_tp, r.moe_ep, r.dtype)
    if r.op == "allreduce":
        return price_allreduce(r.chip, r.gpus, r.elems * 2.0)  # bf16 elements
    if r.op in ("mla_decode", "mla_context"):
        return price_mla(r.chip, r.batch, r.ctx, r.heads, r.dtype, r.kv_dtype, r.op == "mla_context")
    raise ValueError(f"unknown op {r.op!r}")


# ---------------------------------------------------------------------------------------------- tables
def band(r: Row) -> str:
    if r.op == "gemm":
        return "m<=16" if r.m <= 16 else "m 32-256" if r.m <= 256 else "m 1k-16k"
    if r.op == "decode_attn":
        kv = r.batch * r.ctx
        return "b*ctx<64k" if kv < 65536 else "b*ctx<1M" if kv < 1 << 20 else "b*ctx>=1M"
    if r.op in ("context_attn", "mla_context"):
        return f"isl {r.ctx // 1024}k" + (f" tp{128 // r.heads}" if r.op == "mla_context" else "")
    if r.op == "mla_decode":
        kv = r.batch * r.ctx
        return ("b*ctx<64k" if kv < 65536 else "b*ctx<1M" if kv < 1 << 20 else "b*ctx>=1M") + f" tp{128 // r.heads}"
    if r.op == "moe":
        return "tok<=16" if r.batch <= 16 else "tok 32-512" if r.batch <= 512 else "tok>=1k"
    if r.op == "allreduce":
        b = r.elems * 2
        return "<=64KB" if b <= 65536 else "<=4MB" if b <= 4 << 20 else ">4MB"
    return ""


def quantiles(xs: list[float]) -> tuple[float, float, float]:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=10, method="inclusive")
    return q[0], statistics.median(xs), q[-1]


def group_key(r: Row) -> tuple:
    kern = r.kernel if r.op in ("allreduce", "moe") else ""
    return (r.chip, r.op, r.dtype + (f"/kv {r.kv_dtype}" if r.kv_dtype and r.op not in ("context_attn",) else ""), kern,
            band(r))


#: kernels the cost model counts for one measured op, where not 1 (perf.model.KERNELS: an MLA layer's attention)
KERNELS = {"mla_decode": 9, "mla_context": 9}


def ratio_table(rows: list[Row], per_kernel: bool = True) -> list[tuple]:
    """(chip, op, dtype, kernel, band, n, p10, median, p90 of ours/measured [, median with the per-kernel cost])."""
    groups: dict[tuple, list[tuple[float, float]]] = {}
    for r in rows:
        ours = price(r)
        meas = r.latency_ms * 1e-3
        # an all-reduce is one of the kernels kernel_count counts too; the MLA block is 9 (docs/cost-model.md)
        fixed = kernel_fixed_s(r.chip) * KERNELS.get(r.op, 1)
        groups.setdefault(group_key(r), []).append((ours / meas, (ours + fixed) / meas))
    out = []
    order = {op: i for i, op in enumerate(("gemm", "decode_attn", "context_attn", "mla_decode", "mla_context", "moe",
                                           "allreduce"))}
    for key in sorted(groups, key=lambda k: (list(CHIPS).index(k[0]), order[k[1]], k[2], k[3], k[4])):
        v = groups[key]
        lo, med, hi = quantiles([a for a, _ in v])
        out.append((*key, len(v), lo, med, hi, statistics.median(b for _, b in v) if per_kernel else float("nan")))
    return out


def fmt_table(table: list[tuple]) -> str:
    lines = ["| chip | op | dtype | kernel | size band | rows | p10 | median | p90 | median +kernel |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|"]
    for chip, op, dt, kern, b, n, lo, med, hi, withk in table:
        wk = "" if math.isnan(withk) else f"{withk:.2f}"
        lines.append(f"| {chip} | {op} | {dt} | {kern} | {b} | {n} | {lo:.2f} | {med:.2f} | {hi:.2f} | {wk} |")
    return "\n".join(lines)


#: paired chip-vs-B200 comparisons: name -> (row filter, our dtype of the compute fraction it speaks for)
PAIRED = {
    "large GEMM (m >= 4096, n, k >= 8192)": lambda r: r.op == "gemm" and r.m >= 4096 and r.n >= 8192 and r.k >= 8192,
    "weight-streaming GEMM (m <= 8, n x k >= 128M)": lambda r: r.op == "gemm" and r.m <= 8 and r.n * r.k >= 1 << 27,
    "decode attention (batch x ctx >= 256k)": lambda r: r.op == "decode_attn" and r.batch * r.ctx >= 1 << 18,
    "context attention (isl 16k)": lambda r: r.op == "context_attn" and r.ctx >= 16384,
    "MoE (>= 4096 tokens)": lambda r: r.op == "moe" and r.batch >= 4096,
}
#: aiconfigurator GEMM dtype -> the compute dtype whose fraction it measures
FRACTION_OF = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4"}


def _shape(r: Row) -> tuple:
    return (r.op, r.dtype, r.kv_dtype, r.kernel, r.m, r.n, r.k, r.batch, r.ctx, r.heads, r.kv_heads, r.head_dim,
            r.hidden, r.inter, r.topk, r.experts, r.moe_tp, r.moe_ep, r.gpus, r.elems)


def paired(rows: list[Row], chip: str, ref: str = "b200") -> list[tuple]:
    """Speed-up of ``chip`` over ``ref`` on identical rows (ref latency / chip latency), measured and ours:
    (comparison, dtype, rows, measured median, p10, p90, ours median). Transferred chips copy ``ref``'s
    fitted terms, so what the silicon says about them is how they differ from ``ref``."""
    a = {_shape(r): r for r in rows if r.chip == ref}
    out = []
    for name, f in PAIRED.items():
        for dt in sorted({r.dtype for r in rows if r.chip == chip and f(r)}):
            pairs = [(a[_shape(r)], r) for r in rows if r.chip == chip and f(r) and r.dtype == dt and _shape(r) in a]
            if len(pairs) < 3:
                continue
            meas = [x.latency_ms / y.latency_ms for x, y in pairs]
            ours = [price(x) / price(y) for x, y in pairs]
            lo, med, hi = quantiles(meas)
            out.append((name, dt, len(pairs), med, lo, hi, statistics.median(ours)))
    return out


def implied_fractions(rows: list[Row], chip: str, ref: str = "b200") -> dict[str, tuple[float, float, float]]:
    """Large-GEMM compute fraction of ``chip`` per compute dtype that keeps the measured speed-up over ``ref``
    (``ref``'s own fraction x measured speed-up x ref peak / chip peak; fp8 = the mean speed-up of per-tensor
    and block-scaled FP8): dtype -> (current fraction, implied fraction, measured speed-up)."""
    c, b = _chip(chip), _chip(ref)
    ups: dict[str, list[float]] = {}
    for name, dt, _n, med, *_ in paired(rows, chip, ref):
        if name.startswith("large GEMM") and dt in FRACTION_OF:
            ups.setdefault(FRACTION_OF[dt], []).append(med)
    out = {}
    for d, v in ups.items():
        up = statistics.fmean(v)
        cur = c.efficiency.compute.get(d, c.efficiency.compute_default)
        ref_frac = b.efficiency.compute.get(d, b.efficiency.compute_default)
        out[d] = (cur, ref_frac * up * b.peak_flops(d) / c.peak_flops(d), up)
    return out


def absolute_fractions(rows: list[Row], chip: str) -> dict[str, float]:
    """aiconfigurator's large-GEMM rate as a fraction of our catalogue peak, per aiconfigurator dtype (median)."""
    c = _chip(chip)
    out = {}
    for dt, d in FRACTION_OF.items():
        xs = [2 * r.m * r.n * r.k / (r.latency_ms * 1e-3) / c.peak_flops(d) for r in rows
              if r.chip == chip and r.dtype == dt and PAIRED["large GEMM (m >= 4096, n, k >= 8192)"](r)]
        if xs:
            out[dt] = statistics.median(xs)
    return out


#: aiconfigurator MoE dtype -> the compute dtype whose ``efficiency.moe_compute`` it measures: the grouped GEMMs
#: serving runs (DeepSeek's FP8 block-scaled and NVFP4 experts, GPT-OSS's MXFP4 x MXFP8 on Blackwell, bf16). Per-tensor
#: FP8 and Hopper's W4A16 MXFP4 (dequantized by the SMs: ``weight_dequant_ps_per_byte``) are left out
MOE_FRACTION_OF = {"bfloat16": "bf16", "fp8_block": "fp8", "nvfp4": "fp4", "w4a8_mxfp4_mxfp8": "fp4"}
#: prefill token counts at which the MoE fraction is measured (a 1k-8k prompt step), and the layouts (moe_tp = 1,
#: moe_ep <= 8: the serving rows' expert parallelism)
MOE_FIT_TOKENS = (4096, 8192)


def prefill_kernel_terms(rows: list[Row], chip: str) -> dict[str, float]:
    """The measured prefill-kernel efficiencies of ``chip`` (issue #13 step 10; the chip YAMLs' values):

    * context attention, bf16 math and KV, every row of the extract: least squares in relative error of
      ``t = t0 + FLOPs / (bf16 peak x f) + c x (prompt tokens x query heads)`` (FLOPs = 4 x head_dim x heads x
      causal pairs x batch, the cost model's count): ``prefill_attention_compute`` = f,
      ``prefill_attention_ns_per_query_head`` = c, ``prefill_attention_layer_us`` = t0 less the one kernel's cost
      the step already charges (``kernel_launch_us + kernel_overhead_us``; not below 0);
    * ``moe_compute.<dtype>``: the median over :data:`MOE_FRACTION_OF`'s rows at :data:`MOE_FIT_TOKENS` tokens,
      moe_tp 1, moe_ep <= 8, of the routed GEMMs' FLOPs per rank (2 x 3 x hidden x inter x tokens x top-k / ep)
      / (peak x measured time), the faster kernel where a shape has two (NVFP4: CUTLASS and min-latency).
    Also ``attention_fit_median_err``: the attention fit's median |relative error|."""
    c = _chip(chip)
    pk = c.peak_flops("bf16")
    att = [r for r in rows if r.chip == chip and r.op == "context_attn" and r.kv_dtype != "fp8"]
    if not att:
        raise ValueError(f"no context-attention rows for {chip!r}")
    a = [[1.0, 4.0 * r.head_dim * r.heads * r.ctx * (r.ctx + 1) / 2 * r.batch / pk, r.batch * r.ctx * r.heads]
         for r in att]
    t = [r.latency_ms * 1e-3 for r in att]
    # weighted normal equations (3 x 3), weights 1 / t: relative error
    ata = [[sum(x[i] * x[j] / tt ** 2 for x, tt in zip(a, t)) for j in range(3)] for i in range(3)]
    atb = [sum(x[i] / tt for x, tt in zip(a, t)) for i in range(3)]
    t0, inv_f, per_qh = _solve3(ata, atb)
    err = statistics.median(abs((t0 * x[0] + inv_f * x[1] + per_qh * x[2]) / tt - 1) for x, tt in zip(a, t))
    out = {"prefill_attention_compute": 1.0 / inv_f, "prefill_attention_ns_per_query_head": per_qh * 1e9,
           "prefill_attention_layer_us": max(0.0, t0 * 1e6 - (c.launch_us + c.efficiency.kernel_overhead_us)),
           "attention_fit_median_err": err}
    best: dict[tuple, float] = {}  # (compute dtype, MoE dtype, shape, layout, tokens) -> the faster kernel's fraction
    for r in rows:
        d = MOE_FRACTION_OF.get(r.dtype)
        if r.chip != chip or r.op != "moe" or d is None or r.batch not in MOE_FIT_TOKENS or r.moe_tp != 1 \
                or r.moe_ep > 8 or not c.peak_flops(d):
            continue
        flops = 2 * 3 * r.hidden * r.inter * r.batch * r.topk / r.moe_ep
        key = (d, r.dtype, r.hidden, r.inter, r.topk, r.experts, r.moe_ep, r.batch)
        best[key] = max(best.get(key, 0.0), flops / (c.peak_flops(d) * r.latency_ms * 1e-3))
    fr: dict[str, list[float]] = {}
    for key, f in best.items():
        fr.setdefault(key[0], []).append(f)
    for d, v in sorted(fr.items()):
        out[f"moe_compute.{d}"] = statistics.median(v)
    return out


def _solve3(a: list[list[float]], b: list[float]) -> tuple[float, float, float]:
    """Solve the 3 x 3 system ``a x = b`` (Cramer's rule; the normal equations of three parameters)."""
    def det(m: list[list[float]]) -> float:
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))
    d = det(a)
    x = []
    for k in range(3):
        m = [[b[i] if j == k else a[i][j] for j in range(3)] for i in range(3)]
        x.append(det(m) / d)
    return x[0], x[1], x[2]


#: aiconfigurator MoE dtype -> our expert weight format (``efficiency.prefill_moe``'s key,
#: ``perf.model.expert_format``) and the storage dtype whose compute rate our model runs it at. Per-tensor FP8 and
#: Hopper's W4A16 MXFP4 (dequantized by the SMs) are left out, as for the MoE fraction
MOE_FORMAT_OF = {"bfloat16": ("bf16", "bf16"), "fp8_block": ("fp8", "fp8"), "nvfp4": ("nvfp4", "mxfp4"),
                 "w4a8_mxfp4_mxfp8": ("mxfp4", "mxfp4")}
#: the formats whose fit takes a per-token term (activation quantization ahead of an FP4 grouped GEMM)
MOE_TOKEN_FORMATS = ("nvfp4", "mxfp4")
#: the prefill token counts of the per-format MoE fit, and the decode counts it is checked at
MOE_PREFILL_MIN, MOE_DECODE_MAX = 1024, 256


def _moe_rows(rows: list[Row], chip: str, dtype: str, lo: int, hi: int) -> list[Row]:
    """``chip``'s MoE rows of aiconfigurator dtype ``dtype`` at ``lo``..``hi`` tokens, moe_tp 1, moe_ep <= 8, the
    faster kernel where a shape has two."""
    best: dict[tuple, Row] = {}
    for r in rows:
        if r.chip != chip or r.op != "moe" or r.dtype != dtype or r.moe_tp != 1 or r.moe_ep > 8 \
                or not lo <= r.batch <= hi:
            continue
        key = (r.hidden, r.inter, r.topk, r.experts, r.moe_ep, r.batch)
        if key not in best or r.latency_ms < best[key].latency_ms:
            best[key] = r
    return [best[k] for k in sorted(best)]


def _moe_design(rs: list[Row], peak: float) -> list[list[float]]:
    """Columns 1, FLOPs per rank / peak, experts on the rank, tokens (the form of :func:`moe_prefill_terms`)."""
    return [[1.0, 6.0 * r.hidden * r.inter * r.batch * r.topk / r.moe_ep / peak, r.experts / r.moe_ep,
             float(r.batch)] for r in rs]


def _fit_relative(a: list[list[float]], t: list[float], cols: list[int]) -> list[float]:
    """Least squares in relative error of ``t ~ a[:, cols] @ p`` (the other coefficients 0), by normal equations
    with Gaussian elimination (at most four parameters)."""
    n = len(cols)
    m = [[sum(x[cols[i]] * x[cols[j]] / tt ** 2 for x, tt in zip(a, t)) for j in range(n)]
         + [sum(x[cols[i]] / tt for x, tt in zip(a, t))] for i in range(n)]
    for i in range(n):
        piv = max(range(i, n), key=lambda r: abs(m[r][i]))
        m[i], m[piv] = m[piv], m[i]
        for r in range(n):
            if r != i and m[i][i]:
                f = m[r][i] / m[i][i]
                m[r] = [u - f * w for u, w in zip(m[r], m[i])]
    out = [0.0] * 4
    for i, c in enumerate(cols):
        out[c] = m[i][n] / m[i][i]
    return out


def moe_prefill_terms(rows: list[Row], chip: str) -> dict[str, dict[str, float]]:
    """The measured prefill MoE op of ``chip`` per expert weight format (issue #13 step 11; the chip YAMLs'
    ``efficiency.prefill_moe``): over :func:`_moe_rows` at >= :data:`MOE_PREFILL_MIN` tokens, least squares in
    relative error of ``t = t0 + FLOPs / (peak x f) + c_e x experts / moe_ep + c_t x tokens`` (FLOPs per rank =
    2 x 3 x hidden x inter x tokens x top-k / moe_ep; peak = the compute dtype our model runs that format at;
    ``c_t`` only for :data:`MOE_TOKEN_FORMATS`; a coefficient fitted negative is dropped and the rest refitted).
    Per format: ``compute`` f, ``expert_us`` c_e, ``token_ns`` c_t, ``t0_us``, ``layer_us`` (t0 less the MoE
    block's ``KERNELS["moe"]`` kernels at ``kernel_launch_us + kernel_overhead_us``; not below 0), the fit's
    ``median_err`` and ``n``, and the same form checked at 1..:data:`MOE_DECODE_MAX` tokens (``decode_median_err``,
    ``decode_signed``, ``decode_n``: rows in no fit)."""
    from jalapeno.perf.dtypes import compute_dtype
    from jalapeno.perf.model import KERNELS

    c = _chip(chip)
    out: dict[str, dict[str, float]] = {}
    for dtype, (fmt, storage) in MOE_FORMAT_OF.items():
        rs = _moe_rows(rows, chip, dtype, MOE_PREFILL_MIN, 1 << 30)
        peak = c.peak_flops(compute_dtype(c, storage))
        if len(rs) < 6 or not peak or (chip in ("h100", "h200") and storage == "mxfp4"):
            continue
        a, t = _moe_design(rs, peak), [r.latency_ms * 1e-3 for r in rs]
        cols = [0, 1, 2] + ([3] if fmt in MOE_TOKEN_FORMATS else [])
        p = _fit_relative(a, t, cols)
        while any(p[i] < 0 for i in cols[1:]):
            cols = [i for i in cols if i == 0 or p[i] >= 0]
            p = _fit_relative(a, t, cols)
        err = [(sum(u * v for u, v in zip(p, x)) / tt - 1) for x, tt in zip(a, t)]
        rd = _moe_rows(rows, chip, dtype, 1, MOE_DECODE_MAX)
        ed = [(sum(u * v for u, v in zip(p, x)) / (r.latency_ms * 1e-3) - 1) for x, r in zip(_moe_design(rd, peak), rd)]
        out[fmt] = {"compute": 1.0 / p[1] if p[1] > 0 else float("nan"), "expert_us": p[2] * 1e6,
                    "token_ns": p[3] * 1e9, "t0_us": p[0] * 1e6,
                    "layer_us": max(0.0, p[0] * 1e6 - KERNELS["moe"] * (c.launch_us + c.efficiency.kernel_overhead_us)),
                    "median_err": statistics.median(abs(e) for e in err), "n": len(rs),
                    "decode_median_err": statistics.median(abs(e) for e in ed) if ed else float("nan"),
                    "decode_signed": statistics.median(ed) if ed else float("nan"), "decode_n": len(ed)}
    return out


def fmt_moe_terms(rows: list[Row], chips: list[str]) -> str:
    lines = ["| chip | format | compute f | expert_us | token_ns | t0 (us) | layer_us | fit median \\|err\\| (n) | "
             "decode 1-256 median \\|err\\| / signed (n) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for chip in chips:
        for fmt, v in moe_prefill_terms(rows, chip).items():
            lines.append(f"| {chip} | {fmt} | {v['compute']:.3f} | {v['expert_us']:.2f} | {v['token_ns']:.2f} | "
                         f"{v['t0_us']:.1f} | {v['layer_us']:.1f} | {100 * v['median_err']:.1f}% ({v['n']}) | "
                         f"{100 * v['decode_median_err']:.1f}% / {100 * v['decode_signed']:+.1f}% ({v['decode_n']}) |")
    return "\n".join(lines)


def fmt_prefill_terms(rows: list[Row], chips: list[str]) -> str:
    keys = ("prefill_attention_compute", "prefill_attention_ns_per_query_head", "prefill_attention_layer_us",
            "attention_fit_median_err", "moe_compute.bf16", "moe_compute.fp8", "moe_compute.fp4")
    lines = ["| chip | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
    for chip in chips:
        v = prefill_kernel_terms(rows, chip)
        lines.append(f"| {chip} | " + " | ".join(f"{v[k]:.4g}" if k in v else "" for k in keys) + " |")
    return "\n".join(lines)


#: the calibrated chip each transferred chip copies its fitted terms from (docs/fidelity.md)
REFERENCE = {"h100": "h200", "b300": "b200", "gb200": "b200", "gb300": "b200"}


def fmt_paired(rows: list[Row], chips: list[str]) -> str:
    chips = [c for c in chips if c in REFERENCE]
    lines = ["| chip | vs | comparison | dtype | rows | measured speed-up (p10-p90) | ours |",
             "|---|---|---|---|---:|---|---:|"]
    for chip in chips:
        for name, dt, n, med, lo, hi, ours in paired(rows, chip, REFERENCE[chip]):
            lines.append(f"| {chip} | {REFERENCE[chip]} | {name} | {dt} | {n} | {med:.3f} ({lo:.2f}-{hi:.2f}) | "
                         f"{ours:.3f} |")
    lines += ["", "| chip | dtype | aiconfigurator large-GEMM fraction of our peak | current fraction | implied by the "
              "measured speed-up over its reference | measured speed-up |", "|---|---|---:|---:|---:|---:|"]
    for chip in chips:
        ab = absolute_fractions(rows, chip)
        for d, (cur, imp, up) in implied_fractions(rows, chip, REFERENCE[chip]).items():
            a = " / ".join(f"{ab[k]:.3f}" for k, v in FRACTION_OF.items() if v == d and k in ab)
            lines.append(f"| {chip} | {d} | {a} | {cur:.3f} | {imp:.3f} | {up:.3f} |")
    return "\n".join(lines)


def fmt_pivot(table: list[tuple], chips: list[str]) -> str:
    """The ratio table with one column per chip: median roofline ratio / median with the per-kernel cost."""
    cells: dict[tuple, dict[str, str]] = {}
    for chip, op, dt, kern, b, _n, _lo, med, _hi, withk in table:
        k = "" if math.isnan(withk) or abs(withk - med) < 0.005 else f" / {withk:.2f}"
        cells.setdefault((op, dt, kern, b), {})[chip] = f"{med:.2f}{k}"
    lines = ["| op | dtype | kernel | size band | " + " | ".join(chips) + " |",
             "|---|---|---|---|" + "---:|" * len(chips)]
    for (op, dt, kern, b), v in cells.items():
        lines.append(f"| {op} | {dt} | {kern} | {b} | " + " | ".join(v.get(c, "") for c in chips) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    ex = sub.add_parser("extract", help="rebuild the extract from an installed aiconfigurator-core wheel")
    ex.add_argument("--out", default=str(DATA))
    ap.add_argument("--data", default=str(DATA), help="the extract (default: %(default)s)")
    ap.add_argument("--chip", action="append", help="only these chips (repeatable): " + ", ".join(CHIPS))
    ap.add_argument("--op", action="append",
                    help="only these ops: gemm, decode_attn, context_attn, mla_decode, mla_context, moe, allreduce")
    ap.add_argument("--rows", action="store_true", help="print every row too")
    ap.add_argument("--pivot", action="store_true", help="one column per chip (median; / median with the kernel cost)")
    ap.add_argument("--paired", action="store_true",
                    help="also compare each chip with B200 on identical rows (what a transferred chip changes)")
    ap.add_argument("--prefill-terms", action="store_true",
                    help="only the measured prefill-kernel efficiencies per chip (the chip YAMLs' values)")
    ap.add_argument("--moe-terms", action="store_true",
                    help="only the measured prefill MoE op per chip and expert weight format (efficiency.prefill_moe)")
    args = ap.parse_args(argv)
    if args.cmd == "extract":
        return _extract(args)
    path = Path(args.data)
    if not path.exists():
        print(f"no extract at {path}: run `python benchmarks/aic_ops.py extract` with aiconfigurator installed",
              file=sys.stderr)
        return 2
    rows, header = load(path)
    bad = [c for c in args.chip or () if c not in CHIPS]
    if bad:
        print(f"unknown chip {bad[0]!r}: the extract has {', '.join(CHIPS)}", file=sys.stderr)
        return 2
    if args.chip:
        rows = [r for r in rows if r.chip in args.chip]
    if args.op:
        rows = [r for r in rows if r.op in args.op]
    print("\n".join("# " + h for h in header[:2]))
    if args.prefill_terms:
        print(fmt_prefill_terms(rows, [c for c in CHIPS if any(r.chip == c for r in rows)]))
        return 0
    if args.moe_terms:
        print(fmt_moe_terms(rows, [c for c in CHIPS if any(r.chip == c for r in rows)]))
        return 0
    print(f"{len(rows)} rows; ratio = ours / measured (< 1: the cost model is faster than the silicon)\n")
    if args.rows:
        for r in rows:
            ours = price(r)
            print(f"{r.chip} {r.op} {r.dtype} {r.kernel} m={r.m} n={r.n} k={r.k} b={r.batch} ctx={r.ctx} "
                  f"h={r.heads}/{r.kv_heads}/{r.head_dim} moe={r.hidden}x{r.inter} top{r.topk}/{r.experts} "
                  f"tp{r.moe_tp} ep{r.moe_ep} gpus={r.gpus} elems={r.elems}: ours {ours * 1e6:.2f} us, "
                  f"measured {r.latency_ms * 1e3:.2f} us, ratio {ours / (r.latency_ms * 1e-3):.3f}")
    table = ratio_table(rows)
    print(fmt_pivot(table, [c for c in CHIPS if any(t[0] == c for t in table)]) if args.pivot else fmt_table(table))
    if args.paired:
        chips = [c for c in (args.chip or CHIPS) if c in REFERENCE]
        full, _ = load(path)
        refs = {REFERENCE[c] for c in chips}
        print("\n" + fmt_paired([r for r in full if r.chip in (*chips, *refs)], chips))
    return 0


if __name__ == "__main__":
    sys.exit(main())
