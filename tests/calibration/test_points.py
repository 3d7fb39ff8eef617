"""Grouping of calibration rows into points, name/layout mapping, and the error statistics."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest

from jalapeno.calibration import (
    Excluded,
    Layout,
    config_key,
    group_points,
    load_points,
    map_chip,
    map_model,
    map_weights,
    parse_layout,
    pct_error,
    spread_pct,
    summarize,
    to_sim_spec,
)
from jalapeno.calibration.points import REQUIRED_COLUMNS, read_rows
from jalapeno.errors import SpecError

REPO_CSV = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "calibration.csv"

BASE = {
    "source_url": "u", "source_title": "SemiAnalysis InferenceX", "date": "2025-12-13", "model": "DeepSeek-R1-0528",
    "precision": "fp8", "hardware": "h200", "num_chips": "8",
    "parallelism": "TP8 EP8 DPattn=True (single node, aggregated)", "framework": "sglang (x)", "isl": "1024",
    "osl": "1024", "concurrency_or_batch": "64", "notes": "spec_decoding=none; disagg=False; ...",
}


def rows_of(*metrics: tuple[str, str, float, str], **over: str) -> list[dict[str, str]]:
    out = []
    for rid, metric, value, unit in metrics:
        out.append({**BASE, **over, "id": rid, "metric": metric, "value": str(value), "unit": unit})
    return out


def test_rows_of_one_point_are_grouped_and_units_normalised():
    rows = rows_of(("IXAPI-1", "median_tpot", 0.02, "s"), ("IXAPI-2", "output_tput_per_gpu", 300.0, "tok/s/GPU"))
    rows += rows_of(("IXAPI-3", "median_tpot", 0.05, "s"), concurrency_or_batch="128")
    pts = group_points(rows)
    assert len(pts) == 2
    a = next(p for p in pts if p.col("concurrency_or_batch") == "64")
    assert a.ids == ("IXAPI-1", "IXAPI-2")
    assert a.metrics == {"median_tpot": 0.02, "output_tput_per_gpu": 300.0}
    assert a.source == "IXAPI"


def test_group_total_throughput_and_nim_units():
    # TRT-LLM v1.0 table: output tok/s of the whole TP group -> per GPU; NIM ttft/itl in ms -> mean, seconds
    trt = rows_of(("TRTLLM-1", "total_output_tput", 8000.0, "tok/s (all GPUs in the TP group)"), num_chips="4")
    nim = rows_of(("NIM-1", "ttft", 406.77, "ms"), ("NIM-2", "itl", 18.58, "ms"), ("NIM-3", "throughput", 51.67, "tok/s"),
                  num_chips="2", model="Llama-3.3-70B-Instruct")
    (t,) = group_points(trt)
    assert t.metrics == {"output_tput_per_gpu": 2000.0}
    (n,) = group_points(nim)
    assert n.metrics["mean_ttft"] == pytest.approx(0.40677)
    assert n.metrics["mean_itl"] == pytest.approx(0.01858)
    assert n.metrics["output_tput_per_gpu"] == pytest.approx(51.67 / 2)


@pytest.mark.parametrize(
    "text, want",
    [
        ("TP8 EP8 DPattn=True (single node, aggregated)", Layout(8, 8, True)),
        ("TP4 EP1 DPattn=False (single node, aggregated)", Layout(4, 1, False)),
        ("TP2", Layout(2, 1, False)),
        ("DEP8 (DEP = attention DP + expert parallel)", Layout(8, 8, True)),
        ("disagg P: 1 worker(s) x TP8 EP1 DPattn=False (8 GPUs); D: ...", None),
    ],
)
def test_parse_layout(text, want):
    assert parse_layout(text) == want


def test_name_mapping():
    assert map_model("DeepSeek-R1-0528") == "deepseek-r1"
    assert map_model("Llama-3.3-70B-Instruct") == "llama-3.3-70b"
    assert map_model("Llama-4-Maverick-17B-128E") is None
    assert map_chip("H100 80GB") == "h100" and map_chip("NVIDIA H200-SXM-141GB") == "h200"
    assert map_chip("NVIDIA H100-PCIe-80GB") is None  # the catalogue's h100 is the SXM part
    assert map_weights("fp4", "gpt-oss-120b") == "native"  # MXFP4 checkpoint
    assert map_weights("FP8", "gpt-oss-120b") == "native"  # TRT-LLM's FP8 label = activations/KV
    assert map_weights("fp8", "deepseek-r1") == "native"
    assert map_weights("FP8", "llama-3.3-70b") == "fp8"


def test_to_sim_spec_inferencex_mtp_disagg_and_mlperf():
    (p,) = group_points(rows_of(("IXAPI-1", "median_tpot", 0.02, "s")))
    s = to_sim_spec(p)
    assert not isinstance(s, Excluded)
    assert (s.model, s.chip, s.layout, s.concurrency, s.range_ratio, s.spec_tokens) == (
        "deepseek-r1", "h200", Layout(8, 8, True), 64, 0.8, 0)
    (m,) = group_points(rows_of(("IXAPI-2", "median_tpot", 0.02, "s"), notes="spec_decoding=mtp; disagg=False"))
    assert to_sim_spec(m).spec_tokens > 0
    (d,) = group_points(rows_of(("IXAPI-3", "median_tpot", 0.02, "s"), notes="spec_decoding=none; disagg=True"))
    assert isinstance(to_sim_spec(d), Excluded)
    (ml,) = group_points([{**r, "id": "MLPERFv51-9"} for r in rows_of(("x", "system_throughput_offline", 1.0, "Tokens/s"))])
    assert "MLPerf" in to_sim_spec(ml).reason
    # TRT-LLM / NIM FP8 rows of a 16-bit model run NVIDIA's FP8 checkpoint: FP8 weights and FP8 KV cache
    nim = rows_of(("NIM-1", "itl", 18.58, "ms"), num_chips="2", model="Llama-3.3-70B-Instruct", precision="FP8",
                  hardware="H100 80GB", parallelism="TP2", concurrency_or_batch="5")
    (n,) = group_points(nim)
    ns = to_sim_spec(n)
    assert (ns.kind, ns.weights, ns.kv, ns.layout, ns.concurrency) == ("nim", "fp8", "fp8", Layout(2), 5)
    # reruns of one configuration share a config key; another concurrency does not
    (q,) = group_points(rows_of(("IXAPI-4", "median_tpot", 0.03, "s"), date="2026-01-02"))
    assert config_key(to_sim_spec(q)) == config_key(s)


def test_mtp_rows_run_the_draft_length_their_script_launched():
    # InferenceX scripts: TensorRT-LLM num_nextn_predict_layers 3 (1 with attention DP), SGLang EAGLE 2 steps
    mtp = "spec_decoding=mtp; disagg=False"
    cases = [("trt", "TP8 EP8 DPattn=False", 3), ("trt", "TP8 EP8 DPattn=True", 1), ("sglang", "TP8 EP1 DPattn=False", 2),
             ("atom", "TP8 EP1 DPattn=False", 1)]
    for i, (fw, par, k) in enumerate(cases):
        (m,) = group_points(rows_of((f"IXAPI-{10 + i}", "median_tpot", 0.02, "s"), notes=mtp, framework=fw,
                                    parallelism=par))
        s = to_sim_spec(m)
        assert (s.framework, s.spec_tokens, len(s.spec_acceptance)) == (fw, k, k)
        assert len(set(s.spec_acceptance)) == 1  # one fitted acceptance, the same at every draft position


def test_repo_csv_points_and_exclusions():
    pts = load_points(REPO_CSV)
    rows = read_rows(REPO_CSV)
    assert sum(len(p.ids) for p in pts) == len(rows)  # every row lands in exactly one point
    specs = [to_sim_spec(p) for p in pts]
    usable = [s for s in specs if not isinstance(s, Excluded)]
    assert usable and all(s.chip in ("h100", "h200") for s in usable)
    # every InferenceX aggregated point carries the six InferenceX metrics
    ix = [p for p, s in zip(pts, specs) if not isinstance(s, Excluded) and s.kind == "ix"]
    assert all({"median_tpot", "median_ttft", "output_tput_per_gpu"} <= set(p.metrics) for p in ix)


def test_missing_file_and_column_are_user_errors(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        read_rows(tmp_path / "nope.csv")
    f = tmp_path / "bad.csv"
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([c for c in REQUIRED_COLUMNS if c != "unit"])
    f.write_text(buf.getvalue())
    with pytest.raises(SpecError, match="unit"):
        read_rows(f)


def test_error_statistics_against_hand_values():
    assert pct_error(110.0, 100.0) == pytest.approx(10.0)
    assert pct_error(50.0, 100.0) == pytest.approx(-50.0)
    s = summarize([10.0, -20.0, 30.0, float("nan"), -40.0, 50.0])
    assert s.n == 5
    assert s.median_abs == pytest.approx(30.0)  # |10, 20, 30, 40, 50|
    assert s.median_signed == pytest.approx(10.0)  # -40, -20, 10, 30, 50
    assert s.p90_abs == pytest.approx(46.0)  # linear interpolation between 40 and 50
    assert spread_pct([90.0, 100.0, 120.0]) == pytest.approx(30.0)
    assert math.isnan(summarize([]).median_abs)
