"""benchmarks/aic_ops.py: the cost model's per-operator prices against aiconfigurator's silicon timings.

Checks the committed extract (provenance, rows) and the comparison code on hand-computed cases: an H200 bf16
GEMM priced by hand as max(FLOPs / (989 TFLOPS x 0.80), bytes / (4.8 TB/s x 0.90)) against the measured time
in the extract, a memory-bound decode GEMM, and an all-reduce (ring: 2 phases x 1 switch hop x latency +
2(n-1)/n x bytes / (bandwidth x efficiency)).
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def aic():
    spec = importlib.util.spec_from_file_location("aic_ops", ROOT / "benchmarks" / "aic_ops.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules["aic_ops"] = mod  # its dataclass resolves its annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def extract(aic):
    return aic.load()


def test_the_extract_names_its_source_and_holds_every_chip_and_op(aic, extract):
    rows, header = extract
    assert "aiconfigurator-core 0.12.0" in header[0] and "Apache-2.0" in header[0]
    assert any("h200_sxm/gemm/trtllm/1.3.0rc20/gemm_perf.parquet sha256=" in h for h in header)
    seen = {(r.chip, r.op) for r in rows}
    for chip in ("h100", "h200", "b200", "b300", "gb200", "gb300"):
        for op in ("gemm", "decode_attn", "context_attn", "mla_decode", "mla_context", "moe", "allreduce"):
            assert (chip, op) in seen, (chip, op)
    assert all(r.latency_ms > 0 for r in rows)


def _row(rows, **kw):
    hit = [r for r in rows if all(getattr(r, k) == v for k, v in kw.items())]
    assert len(hit) == 1, (kw, len(hit))
    return hit[0]


def test_h200_bf16_gemm_by_hand(aic, extract):
    rows, _ = extract
    r = _row(rows, system="h200_sxm", op="gemm", dtype="bfloat16", m=4096, n=8192, k=8192)
    flops = 2 * 4096 * 8192 * 8192
    byts = 8192 * 8192 * 2 + 4096 * 8192 * 2 + 4096 * 8192 * 2  # weights + activations in and out (bf16)
    hand = max(flops / (989e12 * 0.80), byts / (4.8e12 * 0.90))
    assert hand == pytest.approx(flops / (989e12 * 0.80))  # compute-bound: 694.8 us
    assert aic.price(r) == pytest.approx(hand, rel=1e-9)
    measured = r.latency_ms * 1e-3
    # the silicon runs this GEMM between 60% and 95% of the bf16 peak: our 80% must land within that
    assert 0.80 / 0.95 < aic.price(r) / measured < 0.80 / 0.60
    # and the table reports exactly that ratio for a one-row group
    (row,) = aic.ratio_table([r])
    assert row[6] == pytest.approx(hand / measured) and row[5] == 1


def test_h200_decode_gemm_streams_its_weights(aic, extract):
    rows, _ = extract
    r = _row(rows, system="h200_sxm", op="gemm", dtype="bfloat16", m=1, n=8192, k=8192)
    hand = (8192 * 8192 * 2 + 8192 * 2 + 8192 * 2) / (4.8e12 * 0.90)  # 31.1 us at 90% of HBM
    assert aic.price(r) == pytest.approx(hand, rel=1e-9)
    assert aic.price(r) < r.latency_ms * 1e-3  # nothing streams 134 MB faster than the roofline


def test_allreduce_by_hand_and_the_extracts_units(aic, extract):
    rows, _ = extract
    r = _row(rows, system="h200_sxm", op="allreduce", kernel="NCCL", gpus=8, elems=64 << 20)
    nbytes = (64 << 20) * 2  # message_size counts bf16 elements
    hand = 2 * 1 * 1e-6 + 2 * 7 / 8 * nbytes / (450e9 * 0.5)
    assert aic.price(r) == pytest.approx(hand, rel=1e-9)
    # elements, not bytes: the measured bus bandwidth 2(n-1)/n x bytes / t must not exceed NVLink4 + NVLS
    # in-switch reduction (~480 GB/s); read as bytes it would be half of a plausible figure
    busbw = 2 * 7 / 8 * nbytes / (r.latency_ms * 1e-3)
    assert 300e9 < busbw < 500e9


def test_paired_rows_between_chips_share_every_shape(aic, extract):
    rows, _ = extract
    gb300 = {(r.dtype, r.m, r.n, r.k) for r in rows if r.system == "gb300" and r.op == "gemm"}
    b200 = {(r.dtype, r.m, r.n, r.k) for r in rows if r.system == "b200_sxm" and r.op == "gemm"}
    assert len(gb300 & b200) > 1000
    q = aic.quantiles([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0])
    assert q == (2.0, statistics.median(range(1, 12)), 10.0)


def test_bad_chip_is_one_line(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "aic_ops.py"), "--chip", "tpu-v9"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "unknown chip 'tpu-v9'" in p.stderr


def test_one_mla_layer_is_priced_like_a_layer_of_the_whole_model(aic):
    """The MLA block is priced on a one-layer DeepSeek-R1 (so it fits on one chip); at TP8 the whole model fits too,
    and its attention operators per layer must be the same seconds."""
    from jalapeno.hardware.catalog import get_chip
    from jalapeno.models import load_model
    from jalapeno.perf import CostModel, Parallelism, Precision, StepShape

    whole = CostModel(load_model("deepseek-r1"), get_chip("h200"), Parallelism(tp=8, ep=8), Precision(kv="bf16"))
    ops = {o.name: o for o in whole.breakdown(StepShape.from_lists(decode_ctx=[4097] * 16)).ops}
    per_layer = sum(ops[n].time_s / ops[n].layers for n in aic.MLA_OPS)
    assert aic.price_mla("h200", 16, 4097, 16, "fp8_block", "bfloat16", prefill=False) == pytest.approx(per_layer)
    assert per_layer > 0 and ops["attention"].layers == 61


def _synthetic(aic, **kw):
    base = dict(system="b200_sxm", op="context_attn", dtype="bfloat16", kv_dtype="bfloat16", kernel="x", m=0, n=0,
                k=0, batch=1, ctx=1024, heads=8, kv_heads=1, head_dim=128, hidden=0, inter=0, topk=0, experts=0,
                moe_tp=0, moe_ep=0, gpus=0, elems=0, latency_ms=1.0)
    return aic.Row(**{**base, **kw})


def test_prefill_kernel_terms_recover_known_attention_and_moe_parameters(aic):
    # rows made with t = 20 us + FLOPs / (2250 TFLOPS x 0.5) + 0.4 ns x (tokens x heads): the fit returns them
    from jalapeno.hardware.catalog import get_chip

    b200 = get_chip("b200")
    pk = b200.peak_flops("bf16")
    rows = []
    for batch in (1, 4, 16):
        for isl in (1024, 4096, 16384):
            for heads, hd in ((8, 128), (32, 128), (64, 64)):
                flops = 4 * hd * heads * isl * (isl + 1) / 2 * batch
                t = 20e-6 + flops / (pk * 0.5) + 0.4e-9 * batch * isl * heads
                rows.append(_synthetic(aic, batch=batch, ctx=isl, heads=heads, head_dim=hd, latency_ms=t * 1e3))
    # MoE: DeepSeek's shape at EP8, 4096 tokens; two kernels, the faster at 0.2 of the FP4 peak
    fl = 2 * 3 * 7168 * 2048 * 4096 * 8 / 8
    for frac, kern in ((0.2, "cutlass"), (0.1, "min_latency")):
        rows.append(_synthetic(aic, op="moe", dtype="nvfp4", kernel=kern, batch=4096, hidden=7168, inter=2048,
                               topk=8, experts=256, moe_tp=1, moe_ep=8,
                               latency_ms=fl / (b200.peak_flops("fp4") * frac) * 1e3))
    v = aic.prefill_kernel_terms(rows, "b200")
    assert v["prefill_attention_compute"] == pytest.approx(0.5, rel=1e-6)
    assert v["prefill_attention_ns_per_query_head"] == pytest.approx(0.4, rel=1e-6)
    kernel = b200.launch_us + b200.efficiency.kernel_overhead_us  # the one kernel the step already charges
    assert v["prefill_attention_layer_us"] == pytest.approx(20.0 - kernel, rel=1e-6)
    assert v["attention_fit_median_err"] < 1e-9
    assert v["moe_compute.fp4"] == pytest.approx(0.2, rel=1e-9)


def test_the_catalogue_carries_the_measured_attention_terms_and_prices_the_silicon(aic, extract):
    rows, _ = extract
    for chip in ("h100", "h200", "b200", "b300", "gb200", "gb300"):
        v = aic.prefill_kernel_terms(rows, chip)
        e = aic._chip(chip).efficiency
        assert e.prefill_attention_compute == pytest.approx(v["prefill_attention_compute"], abs=6e-4)
        assert e.prefill_attention_ns_per_query_head == pytest.approx(v["prefill_attention_ns_per_query_head"],
                                                                      abs=6e-4)
        assert e.prefill_attention_layer_us == pytest.approx(v["prefill_attention_layer_us"], abs=0.06)
    # with them the cost model prices B200's context attention (bf16 KV) within 20% of the silicon at every
    # prompt length (the large-GEMM fraction alone was 4-7x too fast at 1k)
    for isl in (1024, 4096, 16384):
        ratios = [aic.price(r) / (r.latency_ms * 1e-3) for r in rows
                  if r.chip == "b200" and r.op == "context_attn" and r.kv_dtype != "fp8" and r.ctx == isl]
        assert 0.8 < statistics.median(ratios) < 1.2, (isl, statistics.median(ratios))


def test_moe_prefill_terms_recover_known_parameters_per_format(aic):
    # rows made with t = t0 + FLOPs / (peak x f) + c_e x experts / ep (+ c_t x tokens for FP4) over the extract's
    # three shapes, EP 1 / 4 / 8 and 1k-16k tokens; a slower second kernel and decode-count rows are in no fit
    from jalapeno.hardware.catalog import get_chip
    from jalapeno.perf.model import KERNELS

    b200 = get_chip("b200")
    truth = {"bfloat16": ("bf16", "bf16", 50e-6, 0.8, 4.5e-6, 0.0), "fp8_block": ("fp8", "fp8", 30e-6, 0.47, 3.6e-6, 0.0),
             "nvfp4": ("nvfp4", "fp4", 70e-6, 0.3, 1.0e-6, 20e-9)}
    rows = []
    for dtype, (_fmt, d, t0, f, ce, ct) in truth.items():
        for hidden, inter, topk, experts in ((2880, 2880, 4, 128), (4096, 1536, 8, 128), (7168, 2048, 8, 256)):
            for ep in (1, 4, 8):
                for tokens in (1, 64, 256, 1024, 2048, 4096, 8192, 16384):
                    fl = 6 * hidden * inter * tokens * topk / ep
                    t = t0 + fl / (b200.peak_flops(d) * f) + ce * experts / ep + ct * tokens
                    for slow, kern in ((1.0, "a"), (1.5, "b")):
                        rows.append(_synthetic(aic, op="moe", dtype=dtype, kernel=kern, batch=tokens, hidden=hidden,
                                               inter=inter, topk=topk, experts=experts, moe_tp=1, moe_ep=ep,
                                               latency_ms=t * slow * 1e3))
    v = aic.moe_prefill_terms(rows, "b200")
    assert set(v) == {"bf16", "fp8", "nvfp4"}
    kernels = KERNELS["moe"] * (b200.launch_us + b200.efficiency.kernel_overhead_us)
    for dtype, (fmt, _d, t0, f, ce, ct) in truth.items():
        got = v[fmt]
        assert got["compute"] == pytest.approx(f, rel=1e-6)
        assert got["expert_us"] == pytest.approx(ce * 1e6, rel=1e-6)
        assert got["token_ns"] == pytest.approx(ct * 1e9, abs=1e-6)
        assert got["t0_us"] == pytest.approx(t0 * 1e6, rel=1e-6)
        assert got["layer_us"] == pytest.approx(max(0.0, t0 * 1e6 - kernels), abs=1e-6)
        assert got["median_err"] < 1e-9 and got["n"] == 3 * 3 * 5
        assert got["decode_median_err"] < 1e-9 and got["decode_n"] == 3 * 3 * 3  # the form holds by construction


def test_the_blackwell_catalogue_carries_the_measured_prefill_moe_op(aic, extract):
    # the YAMLs state what the extract measures, to their printed digits; Hopper and every other chip state none
    rows, _ = extract
    for chip in ("b200", "b300", "gb200", "gb300"):
        v = aic.moe_prefill_terms(rows, chip)
        e = aic._chip(chip).efficiency
        assert set(e.prefill_moe) == set(v) == {"bf16", "fp8", "nvfp4", "mxfp4"}
        for fmt, k in e.prefill_moe.items():
            assert k.compute == pytest.approx(v[fmt]["compute"], abs=6e-4)
            assert k.expert_us == pytest.approx(v[fmt]["expert_us"], abs=6e-3)
            assert k.token_ns == pytest.approx(v[fmt]["token_ns"], abs=6e-3)
            assert k.layer_us == pytest.approx(v[fmt]["layer_us"], abs=0.06)
        assert v["bf16"]["median_err"] < 0.05 and v["fp8"]["median_err"] < 0.13  # the form fits the 16-bit / FP8 ops
    for chip in ("h100", "h200", "mi355x", "mi300x", "vera-rubin"):
        assert not aic._chip(chip).efficiency.prefill_moe
