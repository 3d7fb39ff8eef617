"""Shared helpers: tiny random-weight Hugging Face models of every supported family, saved as safetensors.

The reference for every model test is Hugging Face transformers itself (the model object that wrote the
checkpoint). Weights use initializer_range=0.2 so logits are far from flat and greedy ties are unlikely.
"""

from __future__ import annotations

import torch
import transformers

BASE = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    initializer_range=0.2,
    max_position_embeddings=256,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)

FAMILIES = {
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=10000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=16,
            )
        ),
    ),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=16)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=4, num_experts_per_tok=2)),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=16, norm_topk_prob=True),
    ),
    "gpt_oss": (
        "GptOssConfig",
        "GptOssForCausalLM",
        dict(
            num_local_experts=4,
            num_experts_per_tok=2,
            head_dim=16,
            sliding_window=8,
            rope_parameters=dict(
                rope_type="yarn", rope_theta=150000.0, factor=4.0, original_max_position_embeddings=64,
                beta_fast=32.0, beta_slow=1.0, truncate=False,
            ),
        ),
    ),
    "deepseek_v3": (
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        dict(
            num_key_value_heads=4,
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            kv_lora_rank=16,
            q_lora_rank=24,
            qk_rope_head_dim=8,
            qk_nope_head_dim=16,
            v_head_dim=16,
            n_group=4,
            topk_group=2,
            first_k_dense_replace=1,
            rope_parameters=dict(
                rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64,
                mscale=1.0, mscale_all_dim=1.0, beta_fast=32, beta_slow=1,
            ),
        ),
    ),
}


def build_hf(family: str):
    cfg_name, model_name, extra = FAMILIES[family]
    cfg = getattr(transformers, cfg_name)(**{**BASE, **extra})
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(cfg).eval()
    if family == "deepseek_v3":  # make the routing bias matter (HF initialises it to zero)
        for layer in model.model.layers[cfg.first_k_dense_replace :]:
            layer.mlp.gate.e_score_correction_bias.normal_(0, 0.1)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    """Reference: transformers ``generate`` (greedy, one prompt at a time, no EOS stop)."""
    ids = torch.tensor([prompt])
    mask = torch.ones_like(ids)  # explicit: HF would otherwise treat pad-id tokens in the prompt as padding
    out = model.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False, eos_token_id=None)
    return out[0, len(prompt) :].tolist()


def is_progress(line: str) -> bool:
    """A progress line of ``generate`` on stderr (what loads, then tokens/s)."""
    return line.startswith(("loading ", "loaded in ")) or " tok/s, prefill included" in line


def run_generate(args: list[str], capsys, progress: bool = False) -> tuple[int, str, str]:
    """``jalapeno generate ARGS`` in-process: (exit code, stdout, stderr), fixtures' earlier output dropped;
    stderr without the progress lines unless ``progress``."""
    from jalapeno.cli import main

    capsys.readouterr()  # drop what fixtures printed (e.g. save_pretrained's progress bar)
    code = 0
    try:
        main(["generate", *args])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    err = out.err if progress else "".join(ln for ln in out.err.splitlines(True) if not is_progress(ln))
    return code or 0, out.out, err
