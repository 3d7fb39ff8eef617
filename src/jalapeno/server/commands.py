"""``jalapeno serve``: the OpenAI-compatible server over the engine (PyTorch CPU/CUDA or simulated chip)."""

from __future__ import annotations

import typer

from jalapeno.errors import ConfigError

#: what `serve --backend sim` serves without --model
DEFAULT_SIM_MODEL = "llama-3.1-8b"


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    backend: str = typer.Option("cpu", "--backend", help="cpu | cuda (PyTorch, real weights) | sim (simulated chip)."),
    model: str | None = typer.Option(
        None,
        "--model",
        help=f"cpu/cuda: model folder or .gguf (default SmolLM2-135M-Instruct); sim: catalogue model (default "
        f"{DEFAULT_SIM_MODEL}).",
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
    max_request_bytes: int = typer.Option(
        16 * 2**20, "--max-request-bytes", help="Refuse request bodies larger than this (413)."
    ),
    shutdown_timeout: float = typer.Option(
        5.0, "--shutdown-timeout", help="On SIGTERM, seconds open requests may finish before they are ended."
    ),
    header_timeout: float = typer.Option(10.0, "--header-timeout", help="Close connections whose headers stall."),
    body_timeout: float = typer.Option(30.0, "--body-timeout", help="408 when a request body stalls this long."),
    keep_alive_timeout: float = typer.Option(
        30.0, "--keep-alive-timeout", help="Close idle connections after this (above clients' own 5-15 s idle expiry)."
    ),
    allowed_hosts: str | None = typer.Option(
        None,
        "--allowed-hosts",
        help="Comma-separated Host names to accept ('*' = any); default: the names of the bound address.",
    ),
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
    threads: int | None = typer.Option(
        None, "--threads", help="cpu: torch compute threads of the served engine (default: the probe's choice)."
    ),
    step_trace: str | None = typer.Option(
        None, "--step-trace", help="Write every engine step's times, shape and thread CPU here (JSON lines)."
    ),
) -> None:
    """Serve /v1/completions, /v1/chat/completions, /v1/models, /health and /metrics."""
    _check_args(backend, port, api_key, threads, step_trace, {
        "--max-request-bytes": max_request_bytes, "--shutdown-timeout": shutdown_timeout,
        "--header-timeout": header_timeout, "--body-timeout": body_timeout, "--keep-alive-timeout": keep_alive_timeout})
    from jalapeno.server import build
    from jalapeno.sim import SimLimits
    from jalapeno.speculative import spec_config_from_options

    spec = spec_config_from_options(speculative, num_speculative_tokens, draft_model, draft_layers)
    if spec is not None and backend == "sim":
        raise ConfigError("--speculative runs real drafts: use --backend cpu or cuda (or `simulate --spec-decode`)")
    if backend == "sim":
        if not hardware:
            raise ConfigError("--backend sim needs --hardware CHIP (e.g. h200; `jalapeno hardware list`)")
        served = build.build_sim(
            hardware,
            model or DEFAULT_SIM_MODEL,
            tp=tp,
            precision=precision,
            time_scale=time_scale,
            api_key=api_key,
            served_name=served_model_name,
            limits=SimLimits(max_num_seqs, max_num_batched_tokens, block_size, max_model_len),
        )
    else:
        served = _build_torch(backend, model, api_key, served_model_name, spec, max_model_len,
                              block_size, max_num_seqs, max_num_batched_tokens)
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
    tracer = _tracer(step_trace, backend)

    from dataclasses import replace

    from jalapeno.server.app import build_app
    from jalapeno.server.lifecycle import make_server

    scfg = replace(
        served.config,
        max_request_bytes=max_request_bytes,
        body_timeout_s=body_timeout,
        allowed_hosts=hosts_for(host, allowed_hosts),
    )
    app = build_app(served.engine, served.codec, scfg, tracer=tracer)
    where = f"http://{host}:{port}"
    typer.echo(
        f"serving '{served.config.model_name}' ({backend}) at {where}/v1"
        + (" (API key required)" if served.config.api_key else ""),
        err=True,
    )
    server = make_server(
        app,
        host=host,
        port=port,
        log_level=log_level,
        drain=app.state.jalapeno.drain,
        shutdown_timeout_s=shutdown_timeout,
        header_timeout_s=header_timeout,
        keep_alive_s=keep_alive_timeout,
    )
    server.run()


def _check_args(backend: str, port: int, api_key: str | None, threads: int | None, step_trace: str | None,
                positive: dict[str, float]) -> None:
    """One clear line for a bad ``serve`` argument, before anything loads or binds."""
    if backend not in ("cpu", "cuda", "sim"):
        raise ConfigError(f"--backend must be cpu, cuda or sim (got '{backend}')")
    if not 0 < port < 65536:
        raise ConfigError(f"--port must be in 1..65535 (got {port})")
    if api_key is not None and not api_key.strip():
        raise ConfigError("--api-key is empty (which would serve without a key): give a key, or leave it out")
    for name, v in positive.items():
        if not v > 0:
            raise ConfigError(f"{name} must be > 0 (got {v})")
    if threads is not None and (threads < 1 or backend != "cpu"):
        raise ConfigError(f"--threads must be >= 1 and needs --backend cpu (got {threads} with --backend {backend})")
    if step_trace is not None:
        from jalapeno.server.step_trace import StepTracer

        StepTracer.check_path(step_trace)  # before a model loads


def _tracer(path: str | None, backend: str):
    """The step tracer ``--step-trace`` asks for (None without it); its header names the compute threads."""
    if path is None:
        return None
    from jalapeno.server.step_trace import StepTracer

    header: dict = {"backend": backend}
    if backend != "sim":
        import torch

        header["torch_threads"] = torch.get_num_threads()
    return StepTracer(path, header)


def _build_torch(device, model, api_key, served_name, spec, max_model_len, block_size, max_num_seqs,
                 max_num_batched_tokens):
    """The PyTorch engine ``serve`` runs (``spec``: speculative decoding, reserved per decode)."""
    from jalapeno.engine.config import EngineConfig
    from jalapeno.server import build

    ecfg = EngineConfig(
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        num_speculative_tokens=spec.num_speculative_tokens if spec is not None else 0,
    )
    return build.build_torch(model, device=device, api_key=api_key, served_name=served_name, engine_config=ecfg,
                             max_model_len=max_model_len, speculative=spec)


_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def hosts_for(bind: str, allowed: str | None) -> frozenset[str] | None:
    """Host names a request may name: ``--allowed-hosts`` ('*' = any), else the bound address's names (a
    loopback address: every loopback name; a wildcard address: any, since its names are unknown)."""
    if allowed is not None:
        names = frozenset(h.strip().lower() for h in allowed.split(",") if h.strip())
        if not names:
            raise ConfigError("--allowed-hosts is empty: name at least one host, or '*' for any")
        return None if "*" in names else names
    b = bind.strip().lower().strip("[]")
    if b in ("0.0.0.0", "::", ""):
        return None
    if b in _LOOPBACK or b.startswith("127."):
        return _LOOPBACK | {b}
    return frozenset({b})
