"""``jalapeno simulate``: serving simulation on the chip twin (the engine's scheduler over SimBackend)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

_SUMMARY = (
    ("completed", "requests completed", "{:d}"),
    ("duration", "duration (s, simulated)", "{:.2f}"),
    ("request_throughput", "requests/s", "{:.3f}"),
    ("output_throughput", "output tokens/s", "{:,.0f}"),
    ("total_token_throughput", "total tokens/s", "{:,.0f}"),
    ("num_chips", "chips", "{:d}"),
    ("output_throughput_per_chip", "output tokens/s per chip", "{:,.1f}"),
    ("total_token_throughput_per_chip", "total tokens/s per chip", "{:,.1f}"),
    ("median_interactivity", "interactivity (tok/s/user, 1000/median TPOT)", "{:.1f}"),
    ("median_ttft_ms", "median TTFT (ms)", "{:.1f}"),
    ("p99_ttft_ms", "p99 TTFT (ms)", "{:.1f}"),
    ("median_tpot_ms", "median TPOT (ms)", "{:.2f}"),
    ("p99_tpot_ms", "p99 TPOT (ms)", "{:.2f}"),
    ("median_itl_ms", "median ITL (ms)", "{:.2f}"),
    ("median_e2el_ms", "median E2E latency (ms)", "{:,.0f}"),
    ("mean_chain_e2el_ms", "mean chain E2E latency (ms)", "{:,.0f}"),
    ("avg_power_w_per_chip", "average power per chip (W, predicted)", "{:,.0f}"),
    ("avg_power_w_deployment", "average power, all chips (W, predicted)", "{:,.0f}"),
    ("output_tokens_per_joule", "output tokens per joule (predicted)", "{:.3f}"),
    ("hourly_cost_usd", "cost of the chips ($/hour)", "{:,.2f}"),
    ("usd_per_mtok", "$ per million output tokens", "{:,.3f}"),
    ("request_goodput", "goodput (requests/s meeting SLOs)", "{:.3f}"),
)


def _print_summary(sc, m: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    where = (
        f"{sc.model} on {sc.hardware} tp={sc.tp} ep={sc.ep}" + (f" dp={sc.dp}" if sc.dp > 1 else "")
        + (" dp-attention" if sc.dp_attention else "")
        if not sc.disaggregated
        else f"{sc.model}: " + ", ".join(
            f"{q.role} {q.workers}x{q.hardware} tp={q.tp}" + (f" ep={q.ep}" if q.ep > 1 else "")
            + (f" pp={q.pp}" if q.pp > 1 else "") + (" dp-attention" if q.dp_attention else "")
            + (f" {q.precision}" if q.precision != sc.precision else "")
            for q in (sc.pool("prefill"), sc.pool("decode")))
    )
    load = f"concurrency {sc.concurrency}" if sc.request_rate is None else f"{sc.request_rate} req/s"
    if sc.power_cap_w is not None:
        where += f", capped at {sc.power_cap_w:g} W"
    t = Table(title=f"{where}, {sc.precision}, ISL {sc.isl} / OSL {sc.osl}, {load}", show_header=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    for key, label, fmt in _SUMMARY:
        v = m.get(key)
        if v is None:
            continue
        t.add_row(label, fmt.format(v))
    s = m.get("sim", {})
    t.add_row("simulated steps / preemptions", f"{s.get('steps', 0):,} / {s.get('preemptions', 0):,}")
    es = m.get("early_stop")
    if es:
        t.add_row("early stop", (f"stopped after {es['requests']:,} of {es['requests_planned']:,} requests"
                                 if es["stopped_early"] else "ran every request (not converged)")
                  + f", tolerance {es['tolerance']:g}")
    conf = m.get("confidence")
    if conf:
        t.add_row("confidence", conf["label"])
    console = Console()
    console.print(t)
    if m.get("economics_note"):
        console.print(f"economics: {m['economics_note']}", markup=False, highlight=False)
    for c in (conf or {}).get("chips", []):
        if c["status"] == "uncalibrated":
            console.print(f"[yellow]warning:[/] {c['chip']} is uncalibrated: no measured serving point checked "
                          f"its parameters, so these numbers are a roofline estimate ({c['note'] or 'see docs/fidelity.md'})",
                          soft_wrap=True)


def _economics(sc, m: dict) -> dict:
    """$/hour of the chips and $ per million output tokens (the report's economics: catalogue prices, SLO
    compliance when --goodput is given); ``economics_note`` says why a number is missing."""
    from jalapeno.economics import chip_group, economics

    kw = dict(power_cap_w=sc.power_cap_w, hardware_dir=sc.hardware_dir or None)
    if sc.disaggregated:
        pools = [sc.pool("prefill"), sc.pool("decode")]  # every chip of a worker: tp·pp (pipeline stages too)
        groups = [chip_group(q.hardware, q.workers * q.chips_per_worker, **kw) for q in pools]
    else:
        groups = [chip_group(sc.hardware, int(m["num_chips"]), **kw)]
    eco = economics(m, groups)
    return {
        "hourly_cost_usd": eco.hourly_cost_usd,
        "usd_per_mtok": eco.usd_per_mtok,
        "economics_note": "; ".join(eco.notes) or None,
    }


def _on_off(text: str) -> bool:
    from jalapeno.errors import ConfigError

    if text not in ("on", "off"):
        raise ConfigError(f"--chip-features {text!r} must be on or off")
    return text == "on"


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    def simulate(
        model: Annotated[str, typer.Option("--model", "-m", help="Model name, HF id or config.json path.")] = "",
        hardware: Annotated[str, typer.Option("--hardware", "-H", help="Chip key or alias.")] = "",
        tp: Annotated[int, typer.Option(help="Tensor-parallel ranks per replica.")] = 1,
        ep: Annotated[int, typer.Option(help="Expert-parallel ranks (inside tp).")] = 1,
        pp: Annotated[int, typer.Option(help="Pipeline stages.")] = 1,
        dp: Annotated[int, typer.Option(help="Replicas; with --dp-attention the attention replicas inside one engine (must equal --tp).")] = 1,
        dp_attention: Annotated[bool, typer.Option("--dp-attention", help="Attention data-parallel over the tp ranks.")] = False,
        precision: Annotated[str, typer.Option(help="Weights: native | bf16 | fp8 (block-scaled) | fp4 (MXFP4; MoE experts only) | fp32 (all float32, as the torch backend).")] = "native",
        kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="KV cache: bf16 | fp8 | fp32.")] = "bf16",
        isl: Annotated[int, typer.Option(help="Input length L (tokens); random in [r·L, L].")] = 1024,
        osl: Annotated[int, typer.Option(help="Output length L (tokens); random in [r·L, L]; EOS ignored.")] = 1024,
        concurrency: Annotated[Optional[int], typer.Option(help="Closed loop: requests in flight.")] = None,
        num_prompts: Annotated[Optional[int], typer.Option(help="Requests (default 10 x concurrency).")] = None,
        random_range_ratio: Annotated[float, typer.Option(help="r of the length range (InferenceX 0.8).")] = 0.8,
        range_mode: Annotated[str, typer.Option(help="ix: [r·L, L]; vllm: [L(1-r), L(1+r)].")] = "ix",
        request_rate: Annotated[Optional[float], typer.Option(help="Open loop: requests/s.")] = None,
        arrival: Annotated[str, typer.Option(help="Open-loop arrivals: poisson | constant.")] = "poisson",
        max_concurrency: Annotated[Optional[int], typer.Option(help="Open loop: cap on requests in flight.")] = None,
        spec_decode: Annotated[Optional[str], typer.Option(help="Speculative decoding: mtp | draft | ngram.")] = None,
        spec_tokens: Annotated[int, typer.Option(help="Draft tokens per step (k).")] = 1,
        acceptance: Annotated[str, typer.Option(help="Acceptance rate, one per draft position (0.8,0.6,0.4), or the JSON file `jalapeno generate --speculative ... --json` wrote (its measured acceptance_chain).")] = "0.7",
        draft_model: Annotated[Optional[str], typer.Option(help="Draft model for --spec-decode draft.")] = None,
        prefill_hardware: Annotated[Optional[str], typer.Option(help="Disaggregated: prefill chip.")] = None,
        prefill_workers: Annotated[Optional[int], typer.Option(help="Disaggregated: prefill replicas.")] = None,
        prefill_tp: Annotated[Optional[int], typer.Option(help="Disaggregated: prefill tp.")] = None,
        prefill_ep: Annotated[Optional[int], typer.Option(help="Disaggregated: prefill ep (need not divide the experts: redundant slots).")] = None,
        prefill_pp: Annotated[Optional[int], typer.Option(help="Disaggregated: prefill pipeline stages.")] = None,
        prefill_chips_per_worker: Annotated[Optional[int], typer.Option(help="Disaggregated: chips one prefill worker spans (its tp·pp).")] = None,
        prefill_dp_attention: Annotated[Optional[bool], typer.Option("--prefill-dp-attention/--no-prefill-dp-attention", help="Disaggregated: prefill attention data-parallel (default: --dp-attention).")] = None,
        prefill_precision: Annotated[Optional[str], typer.Option(help="Disaggregated: prefill weights (default: --precision).")] = None,
        decode_hardware: Annotated[Optional[str], typer.Option(help="Disaggregated: decode chip.")] = None,
        decode_workers: Annotated[Optional[int], typer.Option(help="Disaggregated: decode replicas.")] = None,
        decode_tp: Annotated[Optional[int], typer.Option(help="Disaggregated: decode tp.")] = None,
        decode_ep: Annotated[Optional[int], typer.Option(help="Disaggregated: decode ep (need not divide the experts: redundant slots).")] = None,
        decode_pp: Annotated[Optional[int], typer.Option(help="Disaggregated: decode pipeline stages.")] = None,
        decode_chips_per_worker: Annotated[Optional[int], typer.Option(help="Disaggregated: chips one decode worker spans (its tp·pp).")] = None,
        decode_dp_attention: Annotated[Optional[bool], typer.Option("--decode-dp-attention/--no-decode-dp-attention", help="Disaggregated: decode attention data-parallel (default: --dp-attention).")] = None,
        decode_precision: Annotated[Optional[str], typer.Option(help="Disaggregated: decode weights (default: --precision).")] = None,
        chain_calls: Annotated[int, typer.Option(help="Agentic chains: dependent calls per request.")] = 1,
        goodput: Annotated[Optional[list[str]], typer.Option(help="SLO, repeatable: --goodput ttft:200 --goodput tpot:50.")] = None,
        seed: Annotated[int, typer.Option(help="Workload seed.")] = 0,
        early_stop: Annotated[Optional[float], typer.Option("--early-stop", help="Opt-in statistical early stop: stop sending requests once the 95% batch-means CIs of median/p99 TTFT and TPOT are within this relative tolerance (e.g. 0.05); the JSON's early_stop block reports it. Default: InferenceX-exact.")] = None,
        max_num_seqs: Annotated[Optional[int], typer.Option(help="Engine: most running sequences (default max(1024, concurrency)).")] = None,
        max_num_batched_tokens: Annotated[int, typer.Option(help="Engine: token budget per step.")] = 8192,
        block_size: Annotated[int, typer.Option(help="Engine: KV block size (tokens).")] = 16,
        trace: Annotated[Optional[Path], typer.Option(help="Workload from a CSV/JSONL trace (input_len, output_len[, arrival_s]).")] = None,
        hardware_dir: Annotated[Optional[list[Path]], typer.Option("--hardware-dir", help="Extra chip YAML directory.")] = None,
        framework: Annotated[Optional[str], typer.Option(help="Serving framework profile: vllm | sglang | trt-llm, or a disaggregated stack dynamo-sglang | dynamo-trt | mori-sglang | sglang-disagg (its per-request latency; default: the chip's generic one).")] = None,
        decode_max_num_seqs: Annotated[Optional[int], typer.Option(help="Disaggregated: most sequences one decode worker holds; a prefilled request waits for a slot (and KV room) before its transfer (default: --max-num-seqs).")] = None,
        routing: Annotated[Optional[str], typer.Option(help="Disaggregated: how the router picks each request's prefill and decode worker: least-loaded | random (SGLang PD router --decode-policy random: a request waits for room in its own decode worker). The InferenceX MI355X recipes (mori-sglang, sglang-disagg) launch the random one. Default: least-loaded.")] = None,
        scheduler_recv_interval: Annotated[Optional[int], typer.Option("--scheduler-recv-interval", help="With --framework sglang: decode steps between polls for new requests (SGLang's flag; InferenceX's B200 SGLang runs use 30 at concurrency >= 16, else 10). Default: the profile's 1.")] = None,
        attention_dp_balance: Annotated[Optional[int], typer.Option("--attention-dp-balance", help="With --framework trt-llm --dp-attention: TensorRT-LLM's attention-DP context balancing, holding new requests until every rank has one or this many steps passed (attention_dp_config timeout_iters; InferenceX's TRT-LLM scripts use 60). Default: off.")] = None,
        kv_handoff_ms: Annotated[Optional[float], typer.Option("--kv-handoff-ms", help="Disaggregated: fixed per-request prefill->decode handoff latency (ms; default: the --framework stack's fitted value, e.g. dynamo-trt).")] = None,
        decode_first_token_steps: Annotated[Optional[float], typer.Option("--decode-first-token-steps", help="Disaggregated: decode-loop iterations (each one decode step of the receiving worker) a request waits for its first token beyond the step in progress when its KV lands (default: the --framework stack's; SGLang stacks 3, counted from the source).")] = None,
        prefill_token_ns: Annotated[Optional[float], typer.Option("--prefill-token-ns", help="Disaggregated: the prefill server's time per prompt token beyond the cost model (ns; default: the --framework stack's fitted value, e.g. mori-sglang).")] = None,
        dpa_decode_moe_layer_us: Annotated[Optional[float], typer.Option("--dpa-decode-moe-layer-us", help="Disaggregated: per MoE layer of a dp-attention + EP decode step, the expert all-to-all's fixed cost beyond the cost model (us; default: the --framework stack's fitted value).")] = None,
        power_cap_w: Annotated[Optional[float], typer.Option("--power-cap-w", help="Cap each chip's power (W): clocks lowered until the modelled power fits (DVFS; docs/design.md).")] = None,
        kv_sram_gb: Annotated[float, typer.Option("--kv-sram-gb", help="KV tier: GB of each chip's SRAM that holds KV blocks (chips whose SRAM is kv_resident: jalapeno, tpu-8i); decode reads them at SRAM bandwidth.")] = 0.0,
        kv_offload: Annotated[Optional[str], typer.Option("--kv-offload", help="KV offload tier for preempted sequences (instead of recompute): host:GB[:GBPS] (the chip's host link by default) or ssd:GB:GBPS, per chip.")] = None,
        memory_fraction: Annotated[Optional[float], typer.Option("--memory-fraction", help="The serving stack's memory fraction in (0, 1], under the --framework's rule: vLLM gpu_memory_utilization (weights + activations + KV), SGLang mem_fraction_static (weights + KV), TensorRT-LLM free_gpu_memory_fraction (KV share of the memory free after weights and activations). Default: the framework's (vLLM 0.9, SGLang 0.88, TensorRT-LLM 0.9); no framework: vLLM's rule.")] = None,
        chip_features: Annotated[str, typer.Option("--chip-features", help="The chip's hardware features (spec-verify unit, on-chip KV page table): on | off (study what they buy).")] = "on",
        scenarios: Annotated[Optional[Path], typer.Option(help="CSV of scenarios (columns named like these flags).")] = None,
        output: Annotated[Optional[Path], typer.Option(help="With --scenarios: results CSV.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the metrics JSON.")] = False,
    ) -> None:
        """Simulate serving a model on a chip (InferenceX workload and metrics) with the engine's scheduler."""
        from jalapeno.sim.scenario import Scenario, run_scenario
        from jalapeno.errors import ConfigError

        if scenarios is not None:
            if output is None:
                raise ConfigError("--scenarios needs --output results.csv")
            from rich.progress import Progress

            from jalapeno.sim.batch import run_scenarios

            with Progress(transient=False) as prog:
                task = prog.add_task("simulating", total=None)

                def tick(i: int, n: int) -> None:
                    prog.update(task, completed=i, total=n)

                n, bad = run_scenarios(scenarios, output, progress=tick)
            typer.echo(f"{n} scenarios, {bad} failed -> {output}")
            return
        sc = Scenario(
            model=model, hardware=hardware, tp=tp, ep=ep, pp=pp, dp=dp, dp_attention=dp_attention,
            precision=precision, kv_dtype=kv_dtype, isl=isl, osl=osl, concurrency=concurrency,
            num_prompts=num_prompts, random_range_ratio=random_range_ratio, range_mode=range_mode,
            request_rate=request_rate, arrival=arrival, max_concurrency=max_concurrency, spec_decode=spec_decode,
            spec_tokens=spec_tokens, acceptance=acceptance, draft_model=draft_model,
            prefill_hardware=prefill_hardware, prefill_workers=prefill_workers, prefill_tp=prefill_tp,
            prefill_ep=prefill_ep, decode_hardware=decode_hardware, decode_workers=decode_workers,
            decode_tp=decode_tp, decode_ep=decode_ep, prefill_pp=prefill_pp, decode_pp=decode_pp,
            prefill_chips_per_worker=prefill_chips_per_worker, decode_chips_per_worker=decode_chips_per_worker,
            prefill_dp_attention=prefill_dp_attention, decode_dp_attention=decode_dp_attention,
            prefill_precision=prefill_precision, decode_precision=decode_precision, chain_calls=chain_calls, goodput=list(goodput or []),
            seed=seed, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            block_size=block_size, trace=str(trace) if trace else None,
            hardware_dir=[str(d) for d in hardware_dir or []], framework=framework,
            kv_handoff_ms=kv_handoff_ms, decode_first_token_steps=decode_first_token_steps, prefill_token_ns=prefill_token_ns, scheduler_recv_interval=scheduler_recv_interval,
            attention_dp_balance=attention_dp_balance,
            dpa_decode_moe_layer_us=dpa_decode_moe_layer_us, decode_max_num_seqs=decode_max_num_seqs, routing=routing,
            power_cap_w=power_cap_w, kv_sram_gb=kv_sram_gb, kv_offload=kv_offload,
            chip_features=_on_off(chip_features), early_stop=early_stop, memory_fraction=memory_fraction,
        )
        m = run_scenario(sc)
        m.update(_economics(sc, m))
        if as_json:
            typer.echo(json.dumps(m, indent=2))
        else:
            _print_summary(sc, m)
