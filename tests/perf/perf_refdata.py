"""Reference models and chips for the cost-model tests, written out from public numbers (independent of
jalapeno.models / jalapeno.hardware): model configs from the published Hugging Face config.json files,
chip numbers from vendor datasheets (see /work/shared/reference/hardware-facts.md)."""

from __future__ import annotations

from jalapeno.hardware.schema import ChipSpec
from jalapeno.models.arch import ModelArch


def llama(name: str, h: int, layers: int, heads: int, kv: int, inter: int, vocab: int = 128256) -> ModelArch:
    return ModelArch(
        name=name, family="llama", model_type="llama", vocab_size=vocab, hidden_size=h, num_layers=layers,
        num_heads=heads, num_kv_heads=kv, head_dim=h // heads, intermediate_size=inter,
        max_position_embeddings=131072, rope_theta=500000.0,
    )


LLAMA_8B = llama("llama-3.1-8b", 4096, 32, 32, 8, 14336)
LLAMA_70B = llama("llama-3.1-70b", 8192, 80, 64, 8, 28672)
LLAMA_405B = llama("llama-3.1-405b", 16384, 126, 128, 8, 53248)

DEEPSEEK_R1 = ModelArch(
    name="deepseek-r1", family="deepseek_v3", model_type="deepseek_v3", vocab_size=129280, hidden_size=7168,
    num_layers=61, num_heads=128, num_kv_heads=128, head_dim=192, intermediate_size=18432,
    max_position_embeddings=163840, attention="mla", q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
    qk_rope_head_dim=64, v_head_dim=128, num_experts=256, experts_per_token=8, moe_intermediate_size=2048,
    num_shared_experts=1, shared_expert_intermediate_size=2048, first_dense_layers=3, router="sigmoid_group_topk",
    n_group=8, topk_group=4, router_bias=True, mtp_layers=1, native_weight_dtype="fp8", native_quant_scope="all",
)

GPT_OSS_120B = ModelArch(
    name="gpt-oss-120b", family="gpt_oss", model_type="gpt_oss", vocab_size=201088, hidden_size=2880,
    num_layers=36, num_heads=64, num_kv_heads=8, head_dim=64, intermediate_size=2880,
    max_position_embeddings=131072, attention_bias=True, mlp_bias=True, sliding_window=128,
    layer_types=tuple("sliding" if i % 2 == 0 else "full" for i in range(36)), attention_sinks=True,
    num_experts=128, experts_per_token=4, moe_intermediate_size=2880, router="softmax_topk", router_bias=True,
    native_weight_dtype="mxfp4", native_quant_scope="experts",
)


def _fact(v, status="vendor-peak"):
    return {"value": v, "source": "hardware-facts.md (test fixture)", "status": status}


def chip(key: str, compute: dict, memory: list[dict], up_gbps: float, up_lat_us: float, domain: int,
         tdp: float, topology: str = "switch", out_gbps: float | None = None, efficiency: dict | None = None,
         energy: dict | None = None, idle: float | None = None) -> ChipSpec:
    d = {
        "key": key, "name": key, "vendor": "test", "status": "vendor-peak",
        "compute_tflops": {k: _fact(v) for k, v in compute.items()},
        "memory": [
            {"name": m["name"], "kind": m["kind"], "capacity_gb": _fact(m["gb"]), "bandwidth_tbps": _fact(m["tbps"]),
             "resident": m.get("resident", True)} for m in memory
        ],
        "scale_up": {"bandwidth_gbps": _fact(up_gbps), "latency_us": _fact(up_lat_us), "topology": topology,
                     "domain_size": domain},
        "power": {"tdp_w": _fact(tdp), **({"idle_w": _fact(idle)} if idle is not None else {})},
    }
    if out_gbps:
        d["scale_out"] = {"bandwidth_gbps": _fact(out_gbps), "latency_us": _fact(5.0), "topology": "switch"}
    if efficiency is not None:
        d["efficiency"] = efficiency
    if energy is not None:
        d["energy"] = energy
    return ChipSpec.model_validate(d)


H200_EFF = {"compute": {"bf16": 0.8, "fp8": 0.73}, "memory": {"hbm": 0.9}, "step_overhead_us": 0.0,
            "layer_overhead_us": 0.0}

H200 = chip("h200", {"bf16": 989, "fp8": 1979, "int8": 1979},
            [{"name": "hbm", "kind": "hbm", "gb": 141, "tbps": 4.8},
             {"name": "l2", "kind": "sram", "gb": 0.05, "tbps": 12.0, "resident": False}],
            up_gbps=450, up_lat_us=2.0, domain=8, tdp=700, out_gbps=50, efficiency=H200_EFF)
H100 = chip("h100", {"bf16": 989, "fp8": 1979}, [{"name": "hbm", "kind": "hbm", "gb": 80, "tbps": 3.35}],
            up_gbps=450, up_lat_us=2.0, domain=8, tdp=700, out_gbps=50)
B200 = chip("b200", {"bf16": 2250, "fp8": 4500, "fp4": 9000}, [{"name": "hbm", "kind": "hbm", "gb": 180, "tbps": 8.0}],
            up_gbps=900, up_lat_us=2.0, domain=8, tdp=1000, out_gbps=50)
GROQ_LPU = chip("groq-lpu", {"fp16": 188, "int8": 750}, [{"name": "sram", "kind": "sram", "gb": 0.23, "tbps": 80}],
                up_gbps=240, up_lat_us=0.6, domain=0, tdp=300, topology="switch")
GROQ_LP30 = chip("groq-lp30", {"fp8": 1230}, [{"name": "sram", "kind": "sram", "gb": 0.5, "tbps": 150}],
                 up_gbps=1250, up_lat_us=0.6, domain=256, tdp=500, topology="switch")
