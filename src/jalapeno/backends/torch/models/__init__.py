"""Model families for the PyTorch backend (one module per family, HF parameter names throughout).

Every module builds from :class:`~jalapeno.models.arch.ModelArch`, the one model description the cost model
and the simulator read too (built from ``config.json`` by :func:`jalapeno.models.hf_config.arch_from_config`,
whose ``FAMILIES`` is the one table of model types). :data:`IMPLEMENTATIONS` says which module runs each
family; a family without one (the simulator may know more families than this backend runs) is refused with
one clear line.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from jalapeno.backends.torch.models.layers import CausalLM
from jalapeno.errors import ConfigError
from jalapeno.models.arch import Family, ModelArch
from jalapeno.models.hf_config import arch_from_config

#: architecture family -> module in this package that implements it
IMPLEMENTATIONS: dict[Family, str] = {
    "llama": "llama",  # Llama, SmolLM2, Mistral
    "qwen2": "llama",
    "qwen3": "llama",
    "mixtral": "moe",
    "qwen3_moe": "moe",
    "gpt_oss": "gpt_oss",
    "deepseek_v3": "deepseek",  # DeepSeek-V3/R1, Kimi K2
}


def torch_arch(config: Mapping[str, Any], name: str | None = None) -> ModelArch:
    """The :class:`ModelArch` of a ``config.json`` dict, checked to be one this backend runs."""
    arch = arch_from_config(config, name)
    if arch.extra.get("multimodal"):
        raise ConfigError(
            f"model_type {arch.model_type!r} is a multimodal wrapper; the torch backend runs text-only "
            "checkpoints (a language model's own config.json and weights)"
        )
    if arch.family not in IMPLEMENTATIONS:
        raise ConfigError(
            f"model_type {arch.model_type!r} (family {arch.family}) is not supported by the torch backend; it "
            f"runs the families: {', '.join(sorted(IMPLEMENTATIONS))} (the simulator covers more)"
        )
    return arch


def build_model(arch: ModelArch) -> CausalLM:
    """Instantiate the (uninitialised) model for ``arch``'s family."""
    module = IMPLEMENTATIONS.get(arch.family)
    if module is None:
        raise ConfigError(f"family {arch.family!r} is not supported by the torch backend")
    return importlib.import_module(f"jalapeno.backends.torch.models.{module}").build(arch)
