"""``jalapeno serve``: the OpenAI-compatible server over the engine (PyTorch CPU/CUDA or simulated chip)."""

from __future__ import annotations

import typer

from jalapeno.errors import ConfigError


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    backend: str = typer.Option("cpu", "--backend", help="cpu | cuda (PyTorch, real weights) | sim (simulated chip)."),
    model: str | None = typer.Option(
        None, "--model", help="cpu/cuda: model folder or .gguf (default SmolLM2-135M-Instruct); sim: catalogue model."
    ),
    hardware: str | None = typer.Option(None, "--hardware", help="sim: chip from the catalogue (e.g. h200)."),
    tp: int = typer.Option(1, "--tp", help="sim: tensor-parallel chips."),
    precision: str = typer.Option("native", "--precision", help="sim: weight precision (native, bf16, fp8, fp4…)."),
    time_scale: float = typer.Option(
        1.0, "--time-scale", help="sim: wall seconds per simulated second (1 = real time, 0 = as fast as possible)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Bind address (loopback by default)."),
    port: int = typer.Option(8000, "--port"),
    api_key: str | None = typer.Option(None, "--api-key", envvar="JALAPENO_API_KEY", help="Require this Bearer key."),
    served_model_name: str | None = typer.Option(None, "--served-model-name", help="Name in /v1/models."),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs"),
    max_num_batched_tokens: int = typer.Option(8192, "--max-num-batched-tokens"),
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="Context limit (prompt + output)."),
    block_size: int = typer.Option(16, "--block-size"),
    log_level: str = typer.Option("info", "--log-level"),
    speculative: str | None = typer.Option(
        None, "--speculative", help="cpu/cuda: speculative decoding, ngram, self or draft (with --draft-model)."
    ),
    num_speculative_tokens: int | None = typer.Option(
        None, "--num-speculative-tokens", help="Draft tokens verified per step (default 3 with --speculative)."
    ),
    draft_model: str | None = typer.Option(None, "--draft-model", help="--speculative draft: the draft model."),
    draft_layers: int | None = typer.Option(
        None, "--draft-layers", help="--speculative self: layers of the draft (default: a quarter of the model's)."
    ),
) -> None:
    """Serve /v1/completions, /v1/chat/completions, /v1/models, /health and /metrics."""
    if backend not in ("cpu", "cuda", "sim"):
        raise ConfigError(f"--backend must be cpu, cuda or sim (got '{backend}')")
    if not 0 < port < 65536:
        raise ConfigError(f"--port must be in 1..65535 (got {port})")
    from jalapeno.server import build
    from jalapeno.sim import SimLimits
    from jalapeno.spec import spec_config_from_options

    spec = spec_config_from_options(speculative, num_speculative_tokens, draft_model, draft_layers)
    if spec is not None and backend == "sim":
        raise ConfigError("--speculative runs real drafts: use --backend cpu or cuda (the simulator prices it in "
                          "`jalapeno simulate --spec-decode`)")

    if backend == "sim":
        if not hardware or not model:
            raise ConfigError(
                "--backend sim needs --hardware CHIP and --model CATALOGUE_MODEL (e.g. h200 llama-3.1-8b)"
            )
        served = build.build_sim(
            hardware,
            model,
            tp=tp,
            precision=precision,
            time_scale=time_scale,
            api_key=api_key,
            served_name=served_model_name,
            limits=SimLimits(max_num_seqs, max_num_batched_tokens, block_size, max_model_len),
        )
    else:
        from jalapeno.engine.config import EngineConfig

        ecfg = EngineConfig(
            block_size=block_size,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_model_len,
            num_speculative_tokens=spec.num_speculative_tokens if spec is not None else 0,
        )
        served = build.build_torch(
            model,
            device=backend,
            api_key=api_key,
            served_name=served_model_name,
            engine_config=ecfg,
            max_model_len=max_model_len,
            speculative=spec,
        )

    import uvicorn

    from jalapeno.server.app import build_app

    app = build_app(served.engine, served.codec, served.config)
    where = f"http://{host}:{port}"
    typer.echo(
        f"serving '{served.config.model_name}' ({backend}) at {where}/v1"
        + (" (API key required)" if served.config.api_key else ""),
        err=True,
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level)
