"""Sweep YAML parsing, grid expansion, auto layouts and point ids."""

import pytest

from jalapeno.errors import SpecError
from jalapeno.report.grid import ArchDims, auto_layouts, expand, layout_problem, point_id
from jalapeno.report.spec import parse_sweep

BASE = """\
models: [llama-3.1-8b, gpt-oss-120b]
hardware: [h200, b200]
max_chips: 8
workloads: [{isl: 1024, osl: 1024}, {isl: 8192, osl: 1024}]
concurrencies: [4, 64]
"""


def test_auto_layouts_dense_and_moe():
    dense = ArchDims(num_heads=32, num_kv_heads=8, num_experts=0, num_layers=32)
    assert [(l.tp, l.ep, l.dp_attention) for l in auto_layouts(dense, 8)] == [(1, 1, False), (2, 1, False), (4, 1, False), (8, 1, False)]
    moe = ArchDims(num_heads=64, num_kv_heads=8, num_experts=128, num_layers=36)
    got = [(l.tp, l.ep, l.dp_attention) for l in auto_layouts(moe, 4)]
    assert got == [(1, 1, False), (2, 1, False), (2, 2, False), (2, 2, True), (4, 1, False), (4, 4, False), (4, 4, True)]
    # 40 heads do not split 16 ways; 6 experts over ep=4 are padded to 8 slots (2 redundant), ep=8 is too wide
    odd = ArchDims(num_heads=40, num_kv_heads=8, num_experts=6, num_layers=4)
    assert all(l.tp != 16 or l.dp_attention for l in auto_layouts(odd, 16))
    assert layout_problem(odd, 4, ep=4) is None
    assert layout_problem(odd, 8, ep=8) == "not divisible: ep=8 exceeds the 6 experts"
    # e = 2 divides 6; the padded wide-EP layout ep=4 (8 slots) is offered with DP attention
    assert (4, 4, True) in [(l.tp, l.ep, l.dp_attention) for l in auto_layouts(odd, 4)]
    assert layout_problem(odd, 16) == "not divisible: 40 attention heads over tp=16"
    assert layout_problem(odd, 4, ep=3) == "not divisible: ep=3 must divide tp=4"


def test_expand_real_catalogue_counts():
    spec, _ = parse_sweep(BASE)
    pts = expand(spec)
    # llama-3.1-8b (32 heads, dense): tp 1,2,4,8 = 4 layouts; gpt-oss-120b (64 heads, 128 experts):
    # tp1 + 3 layouts for each of tp 2,4,8 = 10; x 2 chips x 2 workloads x 2 concurrencies
    assert len(pts) == (4 + 10) * 2 * 2 * 2
    assert all(p["skip_reason"] is None for p in pts)
    assert len({point_id(p) for p in pts}) == len(pts)
    assert {p["concurrency"] for p in pts} == {4, 64}


def test_explicit_invalid_layout_is_kept_with_a_reason_and_disaggregated_layouts():
    text = BASE.replace("max_chips: 8\n", "parallelism: [{tp: 8}, {tp: 3}]\ndisaggregated:\n"
                        "  - {prefill: {hardware: h200, workers: 2, tp: 4}, decode: {workers: 1, tp: 8, ep: 8}}\n")
    spec, _ = parse_sweep(text)
    pts = expand(spec)
    tp3 = [p for p in pts if p["tp"] == 3]
    assert tp3 and all("not divisible" in p["skip_reason"] for p in tp3)
    dis = [p for p in pts if p["mode"] == "disaggregated"]
    assert {p["prefill_hardware"] for p in dis} == {"h200"}
    # ep=8 on dense llama is not divisible; on gpt-oss it is valid
    assert all(p["skip_reason"] for p in dis if p["model"] == "llama-3.1-8b")
    assert not any(p["skip_reason"] for p in dis if p["model"] == "gpt-oss-120b")


def test_point_id_is_stable_and_input_only():
    spec, _ = parse_sweep(BASE)
    p = expand(spec)[0]
    shuffled = dict(reversed(list(p.items())))
    assert point_id(p) == point_id(shuffled)
    assert point_id({**p, "output_throughput": 5.0, "skip_reason": "x"}) == point_id(p)
    assert point_id({**p, "concurrency": p["concurrency"] + 1}) != point_id(p)
    # a framework profile is an input; leaving it unset keeps the ids results were stored under
    assert p["framework"] is None and point_id({k: v for k, v in p.items() if k != "framework"}) == point_id(p)
    assert point_id({**p, "framework": "vllm"}) != point_id(p)
    fw = expand(parse_sweep(BASE + "framework: trt\n")[0])[0]
    assert fw["framework"] == "trt"


@pytest.mark.parametrize(
    "text, line, words",
    [
        (BASE + "bogus: 1\n", 6, "unknown key 'bogus'"),
        (BASE.replace("[{isl: 1024, osl: 1024}, {isl: 8192, osl: 1024}]", "\n  - {isl: 1024, osl: 1024}\n  - {isl: 8192, osl: 1024, foo: 2}"), 6, "unknown key 'foo'"),
        (BASE.replace("hardware: [h200, b200]", "hardware:\n  - h200\n  - h9000"), 4, "unknown chip 'h9000'"),
        (BASE.replace("models: [llama-3.1-8b, gpt-oss-120b]", "models:\n  - nope-7b"), 2, "unknown model 'nope-7b'"),
        (BASE.replace("concurrencies: [4, 64]", "concurrencies: []"), 5, "empty list"),
        (BASE.replace("concurrencies: [4, 64]", "concurrencies: [4, 64"), 6, "YAML syntax error"),
        (BASE + "precisions: [{weights: fp7}]\n", 6, "weights 'fp7'"),
        (BASE + "framework: tgi\n", 6, "unknown serving framework 'tgi'"),
    ],
)
def test_bad_yaml_names_the_line(text, line, words):
    with pytest.raises(SpecError) as ei:
        parse_sweep(text, "s.yaml")
    msg = str(ei.value)
    assert msg.startswith(f"s.yaml:{line}:"), msg
    assert words in msg and "\n" not in msg


def test_examples_parse_and_the_embedded_quick_sweep_matches_the_example():
    from pathlib import Path

    from jalapeno.report.spec import load_sweep
    from jalapeno.report.sweep import QUICK_SWEEP_PATH

    root = Path(__file__).resolve().parents[2] / "examples"
    quick = load_sweep(root / "quick-sweep.yaml")
    assert quick == load_sweep(QUICK_SWEEP_PATH)
    study = load_sweep(root / "jalapeno-study.yaml")
    assert set(study.models) == {"gpt-oss-120b", "deepseek-r1", "kimi-k2.5"}
    assert {"jalapeno", "gb200", "gb300"} <= set(study.hardware)
    assert {(w.isl, w.osl) for w in study.workloads} == {(1024, 1024), (1024, 8192), (8192, 1024)}
    assert len(expand(quick)) == 36


def test_wide_ep_nvl72_layout_is_offered():
    """DeepSeek-R1's 256 experts over EP 72 on an NVL72 (288 slots, 32 redundant): the grid keeps the layout and
    the sweep's point runner simulates it with 288 // 72 = 4 slots per GPU."""
    text = ("models: [deepseek-r1]\nhardware: [gb200]\nprecisions: [fp4]\n"
            "parallelism: [{tp: 72, ep: 72, dp_attention: true}]\n"
            "workloads: [{isl: 1024, osl: 128}]\nconcurrencies: [64]\n")
    spec, _ = parse_sweep(text)
    (pt,) = expand(spec)
    assert pt["skip_reason"] is None and (pt["tp"], pt["ep"], pt["dp_attention"]) == (72, 72, True)
    from jalapeno.sim.factory import cost_model_for

    cm = cost_model_for("deepseek-r1", "gb200", tp=72, ep=72, dp_attention=True, precision="fp4")
    assert cm.expert_slots == 288


def test_disaggregated_decode_pool_with_pipeline_stages_on_lpx():
    """Rubin prefill (its own FP4 weights) + a 10-rack LPX decode pool (TP128 EP128 PP20, FP8): the point carries
    the decode pool's pp and each pool's precision, its chips and $/hour count every stage, and the point runs."""
    from jalapeno.economics import point_chips, point_groups
    from jalapeno.report.pool import point_scenario

    text = ("models: [deepseek-r1]\nhardware: [groq-lp30]\nprecisions: [fp8]\n"
            "disaggregated:\n  - {prefill: {hardware: vera-rubin, workers: 1, tp: 8, precision: fp4}, "
            "decode: {workers: 1, tp: 128, ep: 128, pp: 20}}\n"
            "max_num_batched_tokens: 1024\nworkloads: [{isl: 1024, osl: 128}]\nconcurrencies: [8]\n")
    spec, _ = parse_sweep(text)
    (pt,) = [p for p in expand(spec) if p["mode"] == "disaggregated"]
    assert pt["skip_reason"] is None and (pt["tp"], pt["ep"], pt["pp"]) == (128, 128, 20)
    assert point_chips(pt) == 8 + 2560 and [g.count for g in point_groups(pt)] == [8, 2560]
    sc = point_scenario(pt)
    assert sc.pool("decode").chips_per_worker == 2560
    assert (sc.pool("prefill").precision, sc.pool("decode").precision) == ("fp4", "fp8")  # per pool
    assert point_id(pt) != point_id({**pt, "prefill_weights": None})
    assert point_id({**pt, "prefill_weights": None}) == point_id({k: v for k, v in pt.items() if k != "prefill_weights"})
    from jalapeno.report.pool import run_point

    m = run_point({**pt, "num_prompts": 16})
    assert m["completed"] == 16 and m["num_chips"] == 2568


def test_pool_precision_typo_names_the_line():
    text = BASE + "disaggregated:\n  - {prefill: {workers: 1, tp: 8, precision: fp3}, decode: {workers: 1, tp: 8}}\n"
    with pytest.raises(SpecError, match=r"<sweep>:7: disaggregated\[0\]\.prefill\.precision: precision 'fp3' is not one of"):
        parse_sweep(text)
