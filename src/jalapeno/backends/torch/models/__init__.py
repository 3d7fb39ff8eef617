"""Model families for the PyTorch backend (one module per family, HF parameter names throughout)."""

from __future__ import annotations

import importlib

from jalapeno.backends.torch.config import ModelConfig
from jalapeno.backends.torch.models.layers import CausalLM


def build_model(cfg: ModelConfig) -> CausalLM:
    """Instantiate the (uninitialised) model for ``cfg``'s family."""
    return importlib.import_module(f"jalapeno.backends.torch.models.{cfg.family}").build(cfg)
