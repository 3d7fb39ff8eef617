"""Memory the way the chips and the serving stacks count it (issue #13 step 12, docs/fidelity.md).

References, independent of the cost model:
* the chips' totals as nvidia-smi / rocm-smi print them (MiB or bytes, typed in from the published logs the YAML
  facts cite), not the vendors' rounded "GB";
* Llama-3.1-8B's parameter count by hand from its config.json (8.03 B, the published total);
* the three stacks' documented budget formulas (vLLM gpu_memory_utilization, SGLang mem_fraction_static,
  TensorRT-LLM free_gpu_memory_fraction), evaluated here in plain float arithmetic.
"""

import csv
import math
from pathlib import Path

import pytest

from jalapeno.errors import CapacityError, ConfigError
from jalapeno.hardware import get_chip
from jalapeno.perf import CostModel, MemoryRule, Parallelism, Precision
from jalapeno.perf.frameworks import memory_rule
from jalapeno.sim.factory import cost_model_for

ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20

#: published totals: nvidia-smi "Memory-Usage" totals (MiB) and rocm-smi "VRAM Total Memory (B)" (bytes)
SMI_TOTAL_BYTES = {
    "h100": 81_559 * MIB,  # NVIDIA H100 80GB HBM3
    "h200": 143_771 * MIB,  # NVIDIA H200
    "b200": 183_359 * MIB,  # NVIDIA B200 (TensorRT-LLM issue 10278)
    "gb200": 189_471 * MIB,
    "b300": 275_040 * MIB,  # NVIDIA B300 SXM6 AC
    "gb300": 284_208 * MIB,
    "mi300x": 206_141_652_992,  # ROCm legacy-rocm-build issue 4750
    "mi355x": 309_220_868_096,
}


@pytest.mark.parametrize("chip", sorted(SMI_TOTAL_BYTES))
def test_gpu_capacity_is_the_smi_total_in_decimal_gb(chip):
    fact = get_chip(chip).main_memory.capacity_gb
    assert abs(fact.value * 1e9 - SMI_TOTAL_BYTES[chip]) < 0.006e9  # the YAML keeps 2 decimals of GB
    # measured where a published log is citable (H100, H200, B200, MI300X), else inferred from logs / GiB sizes
    assert fact.status in ("measured", "inferred")
    assert "vendor figure" in fact.note  # the marketing number stays in the note


def test_mi325x_is_inferred_from_its_binary_capacity():
    fact = get_chip("mi325x").main_memory.capacity_gb
    assert fact.status == "inferred"
    assert abs(fact.value * 1e9 - (256 * 2**30 - 16 * MIB)) < 0.006e9


def test_sram_capacities_keep_their_meaning():
    """Only main-memory facts moved: resident SRAM levels stay decimal GB as published (Groq 230 MB)."""
    assert get_chip("groq-lpu").sram.capacity_gb.value == pytest.approx(0.23)


# ------------------------------------------------------------------------------------------------ the rules
LLAMA8B_PARAMS = (
    2 * 128_256 * 4096  # embedding + LM head
    + 32 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14_336 + 2 * 4096)  # q,o,k,v, MLP, 2 norms
    + 4096  # final norm
)
KV_PER_TOKEN = 32 * 2 * 8 * 128 * 2  # layers x (K, V) x kv heads x head dim x bf16
ACTS = 8192 * 2 * (4 * 4096 + 3 * 14_336) + 1024 * 128_256 * 4  # the activation reserve of an 8192-token step


def test_llama8b_hand_count_is_the_published_total():
    assert LLAMA8B_PARAMS == pytest.approx(8.03e9, rel=1e-3)


@pytest.mark.parametrize("kind,frac", [("total", 0.9), ("static", 0.88), ("free", 0.9), ("free", 0.5)])
def test_kv_capacity_under_each_rule_by_hand(kind, frac):
    chip = get_chip("h100")
    total = SMI_TOTAL_BYTES["h100"]
    rule = MemoryRule(kind, frac)
    cm = CostModel(cost_model_for("llama-3.1-8b", "h100").model, chip, Parallelism(), Precision(weights="bf16"),
                   memory_rule=rule)
    plan = cm.memory_plan()
    w = LLAMA8B_PARAMS * 2
    assert plan.weight_bytes_per_chip == pytest.approx(w, rel=1e-4)
    assert plan.activation_reserve_bytes == pytest.approx(ACTS, rel=1e-9)
    kv = {"total": frac * total - w - ACTS, "static": frac * total - w, "free": frac * (total - w - ACTS)}[kind]
    assert plan.kv_bytes_per_token == KV_PER_TOKEN
    assert plan.kv_capacity_tokens == pytest.approx(kv / KV_PER_TOKEN, rel=2e-4)
    assert any(kind in n for n in plan.notes) or (kind, frac) == ("total", 0.9)


def test_framework_defaults_and_overrides():
    assert (memory_rule("vllm").kind, memory_rule("vllm").fraction) == ("total", 0.9)
    assert (memory_rule("sglang").kind, memory_rule("sglang").fraction) == ("static", 0.88)
    assert (memory_rule("trt").kind, memory_rule("trt").fraction) == ("free", 0.9)
    assert memory_rule("dynamo-trt").kind == "free" and memory_rule("mori-sglang").kind == "static"
    assert memory_rule("sglang", 0.95).fraction == 0.95 and memory_rule(None) is None
    # a framework's rule reaches the cost model through cost_model_for
    a = cost_model_for("llama-3.1-8b", "h100", framework="trt-llm").memory_plan().kv_capacity_tokens
    b = cost_model_for("llama-3.1-8b", "h100").memory_plan().kv_capacity_tokens
    assert a > b  # 0.9 of what is free after weights and activations > 0.9 of the total less both


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan")])
def test_a_fraction_outside_0_1_is_refused_in_one_line(bad):
    with pytest.raises(ConfigError) as e:
        MemoryRule("static", bad)
    assert "outside (0, 1]" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError):
        memory_rule("sglang", bad)


def test_simulate_refuses_a_bad_memory_fraction_in_one_line():
    from jalapeno.sim.scenario import Scenario, run_scenario

    with pytest.raises(ConfigError) as e:
        run_scenario(Scenario(model="llama-3.1-8b", hardware="h100", concurrency=1, num_prompts=1,
                              framework="sglang", memory_fraction=1.2))
    assert "--memory-fraction" in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------------ the B200 rows
def _b200_tp4_fp8_specs():
    from jalapeno.calibration.points import group_points, to_sim_spec

    rows = list(csv.DictReader(open(ROOT / "benchmarks" / "data" / "calibration-blackwell-amd.csv")))
    rows = [r for r in rows if r["hardware"] == "b200" and r["model"].startswith("DeepSeek-R1")
            and r["precision"] == "fp8" and r["num_chips"] == "4" and "disagg=True" not in r["notes"]]
    return [to_sim_spec(p) for p in group_points(rows)]


def test_the_b200_tp4_deepseek_rows_now_fit():
    """InferenceX ran DeepSeek-R1 FP8 on 4 B200s (SGLang --mem-fraction-static 0.95; TensorRT-LLM
    free_gpu_memory_fraction 0.75 / 0.8): 169 GB of weights per chip fit 183,359 MiB. With the vendor's "180 GB"
    read as 180e9 bytes they did not."""
    from jalapeno.calibration.launch import launch_memory
    from jalapeno.calibration.predict import cost_model

    specs = _b200_tp4_fp8_specs()
    assert len(specs) == 15
    for spec in specs:
        plan = cost_model(spec).memory_plan()  # no CapacityError
        assert plan.weight_bytes_per_chip == pytest.approx(169.1e9, rel=2e-3)
        assert plan.kv_capacity_tokens >= spec.isl + spec.osl
        rule = launch_memory(spec)
        assert (rule.kind, rule.fraction) in {("static", 0.95), ("free", 0.75), ("free", 0.8)}
        # with the scripts' fp8 KV cache (--kv-cache-dtype fp8_e4m3 / kv_cache_config dtype fp8) the pool holds
        # every request of the run at full length
        cm8 = CostModel(cost_model(spec).model, get_chip("b200"), Parallelism(tp=4), Precision(weights="fp8", kv="fp8"),
                        memory_rule=rule)
        assert cm8.memory_plan().kv_capacity_tokens >= spec.concurrency * (spec.isl + spec.osl)
    # the old reading of the data: 180 GB decimal under vLLM's 0.9 -> 162.0 GB < 169.1 GB
    old = get_chip("b200").model_copy(deep=True)
    hbm = old.main_memory
    object.__setattr__(hbm, "capacity_gb", hbm.capacity_gb.model_copy(update={"value": 180.0}))
    with pytest.raises(CapacityError, match="needs 169.1 GB per chip, has 162.0 GB"):
        CostModel(cost_model(specs[0]).model, old, Parallelism(tp=4), Precision(weights="fp8"))


def test_deepseek_r1_fp8_weights_per_chip_by_hand():
    """DeepSeek-R1 (671 B parameters, no MTP layer: TensorRT-LLM's script sets TLLM_OVERRIDE_LAYER_NUM=61) in FP8,
    embedding and LM head bf16, TP4: everything split 4 ways but the replicated MLA down-projections
    (q_a_proj 7168x1536, kv_a_proj_with_mqa 7168x576) and the routers (256x7168, bf16)."""
    h, layers, moe_layers = 7168, 61, 58
    attn = h * 1536 + 1536 * 128 * 192 + h * 576 + 512 * 128 * 256 + 128 * 128 * h
    dense = 3 * 3 * h * 18_432
    experts = moe_layers * 257 * 3 * h * 2048
    embed = 129_280 * h
    assert layers * attn + dense + experts + 2 * embed + moe_layers * 256 * h == pytest.approx(671e9, rel=2e-3)
    fp8 = layers * attn + dense + experts
    replicated = layers * (h * 1536 + h * 576) + moe_layers * 256 * h * 2
    per_chip = (fp8 + 2 * 2 * embed) / 4 + replicated * 3 / 4
    cm = cost_model_for("deepseek-r1", "b200", tp=4, precision="fp8", framework="sglang", memory_fraction=0.95)
    assert cm.weight_bytes_per_chip == pytest.approx(per_chip, rel=3e-3)
    assert math.isclose(cm.memory_rule.fraction, 0.95)


def test_launch_memory_reads_the_scripts_flags():
    """The InferenceX scripts' memory flags (benchmarks/dsr1_*.sh at the versions calibration.launch cites)."""
    from jalapeno.calibration.launch import launch_memory
    from jalapeno.calibration.points import Layout, SimSpec

    def spec(chip, fw, weights="native", tp=8, isl=1024, osl=1024, conc=64, model="deepseek-r1"):
        return SimSpec(model, chip, Layout(tp=tp), weights, "bf16", isl, osl, conc, 0.8, kind="ix", framework=fw)

    def got(s):
        r = launch_memory(s)
        return None if r is None else (r.kind, r.fraction)

    assert got(spec("h200", "sglang")) == ("static", 0.82)
    assert got(spec("mi355x", "sglang", "fp4")) == ("static", 0.8)
    assert got(spec("b200", "sglang", "fp4")) == ("static", 0.85)
    assert got(spec("b200", "trt", conc=256)) == ("free", 0.7)
    assert got(spec("h200", "trt")) == ("free", 0.75)
    assert got(spec("b200", "vllm", model="gpt-oss-120b")) == ("total", 0.9)  # no flag: the stack's default
    assert got(spec("mi355x", "atom")) is None  # no profile: the simulator's default
