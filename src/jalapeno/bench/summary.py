"""Human-readable tables for bench results (vLLM's "Serving Benchmark Result" layout)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

#: (label, metrics key, format) of the headline rows
MAIN_ROWS: tuple[tuple[str, str, str], ...] = (
    ("Successful requests", "completed", "{:d}"),
    ("Failed requests", "failed", "{:d}"),
    ("Benchmark duration (s)", "duration", "{:.2f}"),
    ("Total input tokens", "total_input_tokens", "{:d}"),
    ("Total generated tokens", "total_output_tokens", "{:d}"),
    ("Request throughput (req/s)", "request_throughput", "{:.2f}"),
    ("Output token throughput (tok/s)", "output_throughput", "{:.2f}"),
    ("Total token throughput (tok/s)", "total_token_throughput", "{:.2f}"),
    ("Output tok/s per chip", "output_throughput_per_chip", "{:.2f}"),
    ("Median interactivity (tok/s/user)", "median_interactivity", "{:.2f}"),
)

#: the rows compared against the simulator
COMPARE_KEYS: tuple[tuple[str, str], ...] = (
    ("Duration (s)", "duration"),
    ("Output throughput (tok/s)", "output_throughput"),
    ("Total token throughput (tok/s)", "total_token_throughput"),
    ("Request throughput (req/s)", "request_throughput"),
    ("Mean TTFT (ms)", "mean_ttft_ms"),
    ("Median TTFT (ms)", "median_ttft_ms"),
    ("P99 TTFT (ms)", "p99_ttft_ms"),
    ("Mean TPOT (ms)", "mean_tpot_ms"),
    ("Median TPOT (ms)", "median_tpot_ms"),
    ("P99 TPOT (ms)", "p99_tpot_ms"),
    ("Median ITL (ms)", "median_itl_ms"),
    ("Median E2EL (ms)", "median_e2el_ms"),
    ("Median interactivity (tok/s/user)", "median_interactivity"),
)


def _fmt(fmt: str, v) -> str:
    if v is None:
        return "n/a"
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


def print_summary(console: Console, metrics: dict, power_note: str, title: str = "Serving Benchmark Result") -> None:
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for label, key, fmt in MAIN_ROWS:
        t.add_row(label, _fmt(fmt, metrics.get(key)))
    if "request_goodput" in metrics:
        t.add_row("Request goodput (req/s)", _fmt("{:.2f}", metrics["request_goodput"]))
        t.add_row("SLO attainment", _fmt("{:.1%}", metrics["slo_attainment"]))
    for name, label in (
        ("ttft", "Time to First Token"),
        ("tpot", "Time per Output Token (excl. 1st)"),
        ("itl", "Inter-token Latency"),
        ("e2el", "End-to-end Latency"),
    ):
        t.add_section()
        t.add_row(f"[bold]{label}[/]", "")
        for stat in ("mean", "median", "p90", "p99"):
            t.add_row(
                f"  {stat.capitalize() if stat[0] != 'p' else stat.upper()} {name.upper()} (ms)",
                _fmt("{:.2f}", metrics.get(f"{stat}_{name}_ms")),
            )
    t.add_section()
    if metrics.get("power_measured"):
        t.add_row("Average power per chip (W)", _fmt("{:.1f}", metrics.get("avg_power_w_per_chip")))
        t.add_row("Average power, all chips (W)", _fmt("{:.1f}", metrics.get("avg_power_w_deployment")))
        t.add_row("Output tokens per joule", _fmt("{:.3f}", metrics["output_tokens_per_joule"]))
    else:
        t.add_row("Power", "not measured")
    console.print(t)
    console.print(f"[dim]{escape(power_note)}[/]")


def ratio(measured, predicted) -> float | None:
    if measured is None or predicted is None or not predicted:
        return None
    return float(measured) / float(predicted)


def print_comparison(console: Console, measured: dict, predicted: dict, title: str) -> None:
    t = Table(title=title, title_justify="left")
    t.add_column("metric")
    t.add_column("measured", justify="right")
    t.add_column("simulated", justify="right")
    t.add_column("measured / sim", justify="right")
    for label, key in COMPARE_KEYS:
        m, p = measured.get(key), predicted.get(key)
        t.add_row(label, _fmt("{:.2f}", m), _fmt("{:.2f}", p), _fmt("{:.2f}", ratio(m, p)))
    console.print(t)


def print_spec_decode(console: Console, spec: dict) -> None:
    """The run's speculative-decoding acceptance (the server's /metrics counters, before → after)."""
    t = Table(title="Speculative Decoding (server /metrics, warm-up included)", show_header=False, title_justify="left")
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("Drafts", str(spec["num_drafts"]))
    t.add_row("Draft tokens", str(spec["num_draft_tokens"]))
    t.add_row("Accepted tokens", str(spec["num_accepted_tokens"]))
    t.add_row("Acceptance rate", _fmt("{:.1%}", spec["acceptance_rate"]))
    t.add_row("Mean acceptance length", _fmt("{:.2f}", spec["mean_acceptance_length"]))
    if "draft_rate" in spec:
        t.add_row("Drafts per ask (n-gram hits)", _fmt("{:.1%}", spec["draft_rate"]))
    for j, a in enumerate(spec["acceptance_per_pos"]):
        t.add_row(f"  Acceptance at position {j}", _fmt("{:.3f}", a))
    console.print(t)
