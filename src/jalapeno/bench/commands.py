"""``jalapeno bench``: InferenceX/vLLM-compatible load generator for any OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import typer

from jalapeno.errors import ConfigError


def register(app: typer.Typer) -> None:
    app.command("bench", no_args_is_help=False)(bench)


def bench(
    base_url: str = typer.Option("http://127.0.0.1:8000", "--base-url", help="Server root (…/v1 is appended)."),
    endpoint: str = typer.Option("completions", "--endpoint", help="completions | chat"),
    model: str = typer.Option("", "--model", help="Model name sent in requests (default: the server's first)."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY", help="Bearer token."),
    dataset: str = typer.Option("random", "--dataset", help="random | fixed | file"),
    dataset_path: Path | None = typer.Option(
        None, "--dataset-path", help="JSONL ({prompt, output_len}) or ShareGPT JSON."
    ),
    input_len: int = typer.Option(1024, "--input-len", help="Input length L (tokens)."),
    output_len: int | None = typer.Option(None, "--output-len", help="Output length L (tokens; default 1024)."),
    range_ratio: float = typer.Option(
        0.8, "--random-range-ratio", help="r: lengths in [r·L, L] (ix) or [L(1−r), L(1+r)] (vllm)."
    ),
    range_mode: str = typer.Option("ix", "--range-mode", help="ix (InferenceX) | vllm"),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer", help="Local HF tokenizer folder to decode random ids to text."
    ),
    vocab_size: int = typer.Option(32000, "--vocab-size", help="Random token ids are drawn from [100, vocab-size)."),
    concurrency: int | None = typer.Option(None, "--concurrency", help="Closed loop: requests kept in flight."),
    request_rate: float = typer.Option(
        math.inf, "--request-rate", help="Open loop: requests/s (Poisson); inf = all at once."
    ),
    max_concurrency: int | None = typer.Option(
        None, "--max-concurrency", help="Cap on in-flight requests (open loop)."
    ),
    burstiness: float = typer.Option(1.0, "--burstiness", help="Gamma shape of inter-arrivals (1 = Poisson)."),
    num_prompts: int | None = typer.Option(None, "--num-prompts", help="Requests (default 10 × concurrency)."),
    num_warmups: int = typer.Option(
        1, "--num-warmups", help="Warm-up requests sent first, not measured (1 = vLLM's one warm-up request)."
    ),
    goodput: list[str] = typer.Option([], "--goodput", help="SLOs, e.g. --goodput 'ttft:200 tpot:50'."),
    ignore_eos: bool = typer.Option(True, "--ignore-eos/--no-ignore-eos", help="Send ignore_eos: true (vLLM)."),
    seed: int = typer.Option(0, "--seed"),
    num_chips: int = typer.Option(1, "--num-chips", help="Chips behind the endpoint (per-chip throughput)."),
    power: bool | None = typer.Option(
        None,
        "--power/--no-power",
        help="Sample local NVIDIA GPU power (default: when the server is on 127.0.0.1/localhost).",
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write results JSON here."),
    save_detailed: bool = typer.Option(False, "--save-detailed", help="Add per-request timings to the JSON."),
    compare_sim: bool = typer.Option(False, "--compare-sim", help="Also simulate the same workload and compare."),
    hardware: str | None = typer.Option(None, "--hardware", help="Chip for --compare-sim."),
    sim_model: str | None = typer.Option(
        None, "--sim-model", help="Catalogue model for --compare-sim (default --model)."
    ),
    tp: int = typer.Option(1, "--tp", help="Tensor parallelism for --compare-sim."),
    sim_precision: str | None = typer.Option(None, "--sim-precision", help="Weight precision for --compare-sim."),
    sim_release: str = typer.Option(
        "sent", "--sim-release",
        help="Closed loop, --compare-sim: release the simulated first wave at the times this run sent it ('sent') "
             "or all at t=0 ('together')."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Benchmark an OpenAI-compatible server with vLLM's metric definitions (TTFT, TPOT, ITL, E2EL, goodput)."""
    from rich.console import Console

    from jalapeno.bench.client import EndpointConfig
    from jalapeno.bench.dataset import WorkloadSpec, build_requests, load_tokenizer
    from jalapeno.bench.loadgen import BenchFailed, LoadSpec, run_benchmark
    from jalapeno.metrics import SLO
    from jalapeno.bench.summary import print_summary

    console = Console()
    _check_options(endpoint, dataset, range_mode, num_chips, base_url, compare_sim, hardware)
    chip = sim_chip(hardware) if compare_sim else None
    if sim_release not in ("sent", "together"):
        raise ConfigError(f"--sim-release must be 'sent' or 'together' (got '{sim_release}')")
    load = LoadSpec(concurrency, request_rate, max_concurrency, burstiness, num_warmups, seed)
    load.validate()
    n = num_prompts if num_prompts is not None else 10 * (load.in_flight_cap or 10)
    spec = WorkloadSpec(
        dataset=dataset,  # type: ignore[arg-type]
        num_prompts=n,
        input_len=input_len,
        output_len=output_len if output_len is not None else 1024,
        range_ratio=range_ratio,
        range_mode=range_mode,  # type: ignore[arg-type]
        dataset_path=dataset_path,
        fixed_output_len=output_len is not None,
        vocab_size=vocab_size,
        seed=seed,
    )
    tok = load_tokenizer(tokenizer)
    requests = build_requests(spec, endpoint, tok)  # type: ignore[arg-type]
    key = api_key or os.environ.get("JALAPENO_API_KEY")
    model_name = model or _first_model(base_url, key)
    cfg = EndpointConfig(base_url, model_name, endpoint, key, ignore_eos)  # type: ignore[arg-type]
    slo = SLO.parse(goodput) if goodput else None

    from jalapeno.bench.spec_counters import scrape_spec_counters, spec_decode_delta

    spec_before = scrape_spec_counters(base_url, key)  # the server's speculative counters, if it has any
    result = run_benchmark(
        cfg, requests, load, workload=spec, slo=slo, num_chips=num_chips, power=power, progress=progress
    )
    spec_decode = spec_decode_delta(spec_before, scrape_spec_counters(base_url, key) if spec_before else None)
    if spec_decode is not None:
        result.metadata["spec_decode"] = spec_decode
    failed = sum(1 for o in result.outcomes if not o.success)
    first = next((o.error for o in result.outcomes if o.error), "unknown error")
    if result.metrics["completed"] == 0:
        _write(output, result, save_detailed, console)
        raise BenchFailed(f"no request completed: all {failed} failed; first error: {first}")
    print_summary(console, result.metrics, result.power_note)
    if spec_decode is not None:
        from jalapeno.bench.summary import print_spec_decode

        print_spec_decode(console, spec_decode)
    if failed:
        console.print(f"{failed} of {len(result.outcomes)} requests failed; first error: {first}", markup=False)

    if compare_sim:
        _compare_with_sim(console, result, requests, load, chip, sim_model or model_name, tp, sim_precision, slo,
                          sim_release == "sent", label=hardware, served=(base_url, key))
    _write(output, result, save_detailed, console)


def sim_chip(hardware: str | None):
    """``--hardware`` for ``--compare-sim``: a chip name, or the path of a chip YAML (a recorded probe, e.g. one with
    the measured front end ``benchmarks/sim_vs_engine.py --write-chip`` wrote), loaded and validated before the run
    (a missing or invalid file is one line)."""
    if hardware is None or not hardware.endswith((".yaml", ".yml")):
        return hardware
    from jalapeno.hardware.catalog import load_spec_file

    if not Path(hardware).is_file():
        raise ConfigError(f"--hardware {hardware}: no such chip file; give a chip name or a chip YAML")
    return load_spec_file(hardware)


def _compare_with_sim(console, result, requests, load, hardware, model: str, tp: int, precision, slo,
                      as_sent: bool = True, label: str | None = None,
                      served: tuple[str, str | None] | None = None) -> None:
    """``--compare-sim``: simulate the same requests (the prompt lengths the server reported; in a closed loop with
    ``as_sent``, the first wave released when this run sent it) and print and keep the comparison in
    ``result.metadata["simulated"]``."""
    from jalapeno.bench.compare import scrape_kv_tokens, simulate_workload
    from jalapeno.bench.loadgen import arrival_offsets
    from jalapeno.bench.summary import print_comparison

    # ``served``: (base URL, API key) of the server measured: its KV capacity (/metrics) caps the simulated one's
    kv_tokens = scrape_kv_tokens(*served) if served is not None else None
    result.metadata["served_kv_tokens"] = kv_tokens

    predicted = simulate_workload(
        requests,
        arrival_offsets(len(requests), load),
        load,
        hardware=hardware,
        model=model,
        tp=tp,
        precision=precision,
        slo=slo,
        prompt_lens=[o.prompt_tokens if o.success else r.prompt_len for o, r in zip(result.outcomes, requests)],
        sent_s=[o.start_s for o in result.outcomes] if as_sent and load.concurrency is not None else None,
        kv_tokens=kv_tokens,
    )
    print_comparison(console, result.metrics, predicted, f"Measured vs simulated ({label or hardware}, TP{tp})")
    result.metadata["simulated"] = predicted


def _check_options(endpoint: str, dataset: str, range_mode: str, num_chips: float, base_url: str,
                   compare_sim: bool, hardware: str | None) -> None:
    """One clear line for each option value ``bench`` cannot use."""
    if endpoint not in ("completions", "chat"):
        raise ConfigError(f"--endpoint must be 'completions' or 'chat' (got '{endpoint}')")
    if dataset not in ("random", "fixed", "file"):
        raise ConfigError(f"--dataset must be random, fixed or file (got '{dataset}')")
    if range_mode not in ("ix", "vllm"):
        raise ConfigError(f"--range-mode must be 'ix' or 'vllm' (got '{range_mode}')")
    if num_chips <= 0:
        raise ConfigError("--num-chips must be > 0")
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"--base-url must start with http:// or https:// (got '{base_url}')")
    if compare_sim and not hardware:
        raise ConfigError("--compare-sim needs --hardware (a chip from `jalapeno hardware list`)")


def _write(output: Path | None, result, detailed: bool, console) -> None:
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(result.to_json(detailed=detailed), indent=2) + "\n")
        console.print(f"results written to {output}", markup=False)


def _first_model(base_url: str, api_key: str | None) -> str:
    """The first model the server lists at /v1/models (so --model may be omitted)."""
    import httpx

    url = base_url.rstrip("/") + ("/models" if base_url.rstrip("/").endswith("/v1") else "/v1/models")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(url, headers=headers, timeout=10)
        r.raise_for_status()
        return r.json()["data"][0]["id"]
    except Exception as exc:  # noqa: BLE001 - any failure means: ask the user for --model
        raise ConfigError(f"could not list models at {url} ({type(exc).__name__}); pass --model") from None
