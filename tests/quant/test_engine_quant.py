"""Quantized checkpoints in the real engine: tiny GPT-OSS (MXFP4 experts, as published) and DeepSeek-V3 (FP8
128x128 block weights) are written to safetensors, loaded by the torch backend's own loader and run through
TorchBackend + the shared scheduler.

Independent references:
* tokens: the same checkpoint decoded with ``dequantize_checkpoint`` (transformers' ``dequantize=True``) and run
  in float32 — the quantized model must produce the identical greedy tokens (same weight values, fp32 math);
* storage: the checkpoint tensors themselves (loaded bit for bit, never cast), hand-computed block counts, and the
  cost model (``BYTES_PER_ELEMENT`` and ``CostModel.memory_plan()`` on the same config.json).
"""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from jalapeno.backends.torch.backend import TorchBackend  # noqa: E402
from jalapeno.backends.torch.generate import generate_tokens  # noqa: E402
from jalapeno.backends.torch.loader import load_model  # noqa: E402
from jalapeno.backends.torch.models.gpt_oss import Mxfp4GptOssExperts  # noqa: E402
from jalapeno.engine import EngineConfig, SamplingParams  # noqa: E402
from jalapeno.errors import ConfigError  # noqa: E402
from jalapeno.hardware import get_chip  # noqa: E402
from jalapeno.models import BYTES_PER_ELEMENT  # noqa: E402
from jalapeno.models import load_model as load_arch  # noqa: E402
from jalapeno.perf.model import CostModel  # noqa: E402
from jalapeno.quant import Fp8BlockLinear, Mxfp4Experts, quantized_bytes  # noqa: E402
from jalapeno.quant.checkpoint import dequantize_checkpoint, fp8_checkpoint, gpt_oss_mxfp4_checkpoint  # noqa: E402

BASE = dict(
    vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, initializer_range=0.2, max_position_embeddings=256, bos_token_id=None,
    eos_token_id=None, pad_token_id=None,
)  # fmt: skip
DEEPSEEK = dict(
    num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, kv_lora_rank=16,
    q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_group=4, topk_group=2,
    first_k_dense_replace=1,
)  # fmt: skip
GPT_OSS = dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=8)
# the quantization_config blocks the published checkpoints carry (the cost model reads them)
FP8_QCFG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
MXFP4_QCFG = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}
MODELS = {
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", GPT_OSS, gpt_oss_mxfp4_checkpoint, MXFP4_QCFG),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", DEEPSEEK, fp8_checkpoint, FP8_QCFG),
}
PROMPTS = [[5, 17, 99, 3], [42, 8, 1, 77, 64, 23, 9, 110, 31]]


def _write(folder, config: dict, tensors: dict) -> None:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    safetensors_torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """family -> (quantized dir, dequantized float32 dir, quantized tensors as written)."""
    out = {}
    for family, (cfg_cls, model_cls, extra, convert, qcfg) in MODELS.items():
        root = tmp_path_factory.mktemp(family)
        cfg = getattr(transformers, cfg_cls)(**{**BASE, **extra})
        torch.manual_seed(0)
        getattr(transformers, model_cls)(cfg).eval().save_pretrained(root / "float")
        config = json.loads((root / "float" / "config.json").read_text())
        ckpt = convert(safetensors_torch.load_file(str(root / "float" / "model.safetensors")))
        _write(root / "quant", {**config, "quantization_config": qcfg}, ckpt)
        _write(root / "dequant", config, dequantize_checkpoint(ckpt, torch.float32))
        out[family] = (root / "quant", root / "dequant", ckpt)
    return out


def _greedy(path, dtype: str = "float32") -> list[list[int]]:
    backend = TorchBackend(path, dtype=dtype, num_blocks=32)
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=4)
    return generate_tokens(backend, PROMPTS, SamplingParams(max_tokens=12, temperature=0.0), cfg)


@pytest.mark.parametrize("family", MODELS)
def test_quantized_checkpoint_generates_like_dequantized_float32(checkpoints, family) -> None:
    quant, dequant, _ = checkpoints[family]
    assert _greedy(quant) == _greedy(dequant)


def test_gpt_oss_experts_load_as_stored(checkpoints) -> None:
    quant, _, ckpt = checkpoints["gpt_oss"]
    model = load_model(quant, "cpu", torch.bfloat16).model  # bf16 model: the MXFP4 bytes must not be touched
    for i, layer in enumerate(model.model.layers):
        experts, p = layer.mlp.experts, f"model.layers.{i}.mlp.experts."
        assert isinstance(experts, Mxfp4GptOssExperts)
        for proj in ("gate_up_proj", "down_proj"):
            stored: Mxfp4Experts = getattr(experts, proj)
            assert stored.blocks.dtype == stored.scales.dtype == torch.uint8
            assert torch.equal(stored.blocks, ckpt[p + proj + "_blocks"].flatten(-2))
            assert torch.equal(stored.scales, ckpt[p + proj + "_scales"])
        assert experts.gate_up_proj_bias.dtype == torch.bfloat16  # float tensors do follow the model dtype
    assert not any(n.endswith(("gate_up_proj", "down_proj")) for n, _ in model.named_parameters())
    assert _greedy(quant, "bfloat16")  # runs in bf16 on the stored bytes


def test_deepseek_fp8_linears_load_as_stored(checkpoints) -> None:
    quant, _, ckpt = checkpoints["deepseek_v3"]
    model = load_model(quant, "cpu", torch.bfloat16).model
    fp8 = {n: m for n, m in model.named_modules() if isinstance(m, Fp8BlockLinear)}
    assert set(fp8) == {k.removesuffix(".weight_scale_inv") for k in ckpt if k.endswith("weight_scale_inv")}
    assert any(".mlp.experts.7.down_proj" in n for n in fp8) and any("kv_b_proj" in n for n in fp8)
    for name, m in fp8.items():
        assert m.weight.dtype == torch.float8_e4m3fn and m.weight_scale_inv.dtype == torch.float32
        assert torch.equal(m.weight.view(torch.uint8), ckpt[name + ".weight"].view(torch.uint8))
        assert torch.equal(m.weight_scale_inv, ckpt[name + ".weight_scale_inv"])
    # quantized layers are not fused into float q/k/v or gate/up GEMMs
    assert all(getattr(m, "_gate_up", None) is None for m in model.modules() if hasattr(m, "_gate_up"))
    assert _greedy(quant, "bfloat16")


def test_gpt_oss_bytes_match_cost_model(checkpoints) -> None:
    """MXFP4 has no partial blocks (K % 32 == 0), so every byte count agrees exactly."""
    quant, _, ckpt = checkpoints["gpt_oss"]
    model = load_model(quant, "cpu", torch.bfloat16).model
    e, h, i = GPT_OSS["num_local_experts"], BASE["hidden_size"], BASE["intermediate_size"]
    numel = BASE["num_hidden_layers"] * e * (h * 2 * i + i * h)  # gate_up [2I, H] + down [H, I] per expert
    engine = quantized_bytes(model)
    assert engine == sum(t.nbytes for k, t in ckpt.items() if k.endswith(("_blocks", "_scales")))
    assert engine == numel / 2 + numel / 32 == BYTES_PER_ELEMENT["mxfp4"] * numel
    arch = load_arch(quant / "config.json")
    assert (arch.native_weight_dtype, arch.native_quant_scope) == ("mxfp4", "experts")
    assert arch.param_counts().routed_expert_weights == numel
    # everything else is bf16 in the engine and in the cost model (embedding + untied lm_head, attention, norms,
    # biases, sinks, router): the whole plan equals what the engine holds
    float_bytes = sum(p.nbytes for p in model.parameters())
    plan = CostModel(arch, get_chip("h100")).memory_plan()
    assert plan.weight_bytes_per_chip == arch.weight_bytes("native") == engine + float_bytes


def test_deepseek_bytes_match_cost_model(checkpoints) -> None:
    """FP8 block scales: the cost model charges 4 bytes per 16384 elements (full 128x128 blocks); the tiny
    model's layers are each one *partial* block, which still stores a whole fp32 scale. Everything else agrees
    exactly, so the engine exceeds the cost model by precisely that padding overhead."""
    quant, _, ckpt = checkpoints["deepseek_v3"]
    model = load_model(quant, "cpu", torch.bfloat16).model
    fp8 = [m for m in model.modules() if isinstance(m, Fp8BlockLinear)]
    numel = sum(m.in_features * m.out_features for m in fp8)
    blocks = sum(math.ceil(m.out_features / 128) * math.ceil(m.in_features / 128) for m in fp8)
    engine = quantized_bytes(model)
    assert engine == numel + 4 * blocks  # 1 byte per E4M3 code + one fp32 per (partial) block
    arch = load_arch(quant / "config.json")
    assert (arch.native_weight_dtype, arch.native_quant_scope) == ("fp8", "all")
    assert arch.param_counts().quantizable("all") == numel
    cost = BYTES_PER_ELEMENT["fp8"] * numel
    assert cost == pytest.approx(numel + 4 * numel / 16384)
    float_bytes = sum(p.nbytes for p in model.parameters())
    plan = CostModel(arch, get_chip("h100")).memory_plan()
    assert plan.weight_bytes_per_chip == pytest.approx(arch.weight_bytes("native"))
    assert plan.weight_bytes_per_chip == pytest.approx(engine + float_bytes - (4 * blocks - 4 * numel / 16384))


def test_non_fp8_weight_with_scales_is_a_config_error(checkpoints, tmp_path) -> None:
    quant, _, ckpt = checkpoints["deepseek_v3"]
    bad = dict(ckpt)
    name = next(k for k in ckpt if k.endswith("q_b_proj.weight"))
    bad[name] = ckpt[name].to(torch.bfloat16)  # scale present, codes upcast: not the DeepSeek layout
    _write(tmp_path / "bad", json.loads((quant / "config.json").read_text()), bad)
    with pytest.raises(ConfigError, match="float8_e4m3fn"):
        load_model(tmp_path / "bad")
