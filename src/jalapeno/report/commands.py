"""CLI: ``jalapeno sweep``, ``jalapeno recommend``, ``jalapeno report``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import List, Optional

import typer

from jalapeno import native
from jalapeno.errors import ConfigError


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_cmd)
    app.command("recommend")(recommend_cmd)
    app.command("report")(report_cmd)


def sweep_cmd(
    spec_file: Path = typer.Argument(..., help="sweep YAML (see examples/quick-sweep.yaml, docs/report.md)"),
    out: Path = typer.Option(..., "--out", "-o", help="results directory (results.parquet, sweep.json)"),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", help="local worker processes [default: CPU count]"),
    ray: Optional[str] = typer.Option(None, "--ray", help="run as Ray tasks: 'auto' or a cluster address (needs jalapeno[ray])"),
    price: List[str] = typer.Option([], "--price", help="override a chip's price, CHIP=USD per chip-hour (repeatable)"),
    pue: float = typer.Option(1.2, "--pue", help="power usage effectiveness for tokens per MW"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
    overwrite: bool = typer.Option(False, "--overwrite", help="delete results of a different spec already in DIR"),
    hardware_dir: List[Path] = typer.Option([], "--hardware-dir", help="extra chip YAML directory, e.g. a `jalapeno design` DIR/chips (repeatable)"),
) -> None:
    """Run a grid of simulations (models × chips × layouts × workloads × concurrencies) into DIR/results.parquet.

    Re-running the same spec resumes: points already in DIR are skipped. Ctrl-C keeps finished points. A
    different spec into a DIR that holds results is refused unless --overwrite.
    """
    from jalapeno.economics import parse_prices
    from jalapeno.report.spec import load_sweep
    from jalapeno.report.sweep import run_spec

    from jalapeno.hardware.catalog import use_hardware_dirs

    use_hardware_dirs(hardware_dir)
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers} must be >= 1")
    if pue < 1.0:
        raise ConfigError(f"--pue {pue} must be >= 1.0")
    prices = parse_prices(price)
    spec = load_sweep(spec_file)
    t0 = time.perf_counter()
    try:
        summary = run_spec(
            spec, out, workers=workers, ray=ray, prices=prices, pue=pue, progress=not quiet, overwrite=overwrite
        )
    except KeyboardInterrupt:
        from jalapeno.report.store import ResultStore

        n = len(ResultStore(out).rows())
        typer.echo(f"interrupted: {n} finished points kept in {out}; run the same command again to resume", err=True)
        raise typer.Exit(130) from None
    typer.echo(summary.line())
    for e in summary.first_errors:
        typer.echo(f"  error: {e}", err=True)
    typer.echo(f"results: {out / 'results.parquet'}  (next: jalapeno report {out})")
    hint = native.speed_hint(time.perf_counter() - t0) if summary.ran else None
    if hint:
        typer.echo(hint, err=True)


def recommend_cmd(
    model: str = typer.Option(..., "--model", "-m", help="model name (see `jalapeno models list`)"),
    isl: Optional[int] = typer.Option(None, "--isl", help="input tokens per request"),
    osl: Optional[int] = typer.Option(None, "--osl", help="output tokens per request"),
    ttft_slo_ms: Optional[float] = typer.Option(None, "--ttft-slo-ms", help="p90 time-to-first-token bound, ms"),
    tpot_slo_ms: Optional[float] = typer.Option(None, "--tpot-slo-ms", help="p90 time-per-output-token bound, ms"),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="comma-separated chips [default: h200,b200,jalapeno]"),
    max_chips: int = typer.Option(8, "--max-chips", help="largest layout tried (powers of two)"),
    objective: Optional[str] = typer.Option(None, "--objective", help="cost | energy | latency [default: preset's, else cost]"),
    preset: Optional[str] = typer.Option(None, "--preset", help="interactive-agent | batch-throughput | long-context-128k"),
    price: List[str] = typer.Option([], "--price", help="override a chip's price, CHIP=USD per chip-hour"),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", help="local worker processes"),
    framework: Optional[str] = typer.Option(None, "--framework", help="serving framework profile: vllm | sglang | trt-llm"),
    trust: str = typer.Option("transferred", "--trust", help="any | transferred | calibrated: chips at least this trusted are ranked first (docs/report.md)"),
    as_json: bool = typer.Option(False, "--json", help="print the ranking as JSON"),
    hardware_dir: List[Path] = typer.Option([], "--hardware-dir", help="extra chip YAML directory, e.g. a `jalapeno design` DIR/chips (repeatable)"),
) -> None:
    """Recommend the chip and layout that meet TTFT/TPOT SLOs best, and say why each other option lost."""
    from jalapeno.hardware.catalog import use_hardware_dirs
    from jalapeno.economics import parse_prices

    use_hardware_dirs(hardware_dir)
    from jalapeno.report.recommend import recommend

    chips = [h.strip() for h in hardware.split(",") if h.strip()] if hardware else None
    rec = recommend(
        model, isl=isl, osl=osl, ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms, hardware=chips,
        max_chips=max_chips, objective=objective, preset=preset, prices=parse_prices(price), workers=workers,
        framework=framework, trust=trust,
    )
    if as_json:
        typer.echo(json.dumps(rec.as_dict(), indent=2))
        return
    _print_recommendation(rec)


def _print_recommendation(rec, top: int = 10) -> None:  # noqa: ANN001 - Recommendation, imported lazily
    from jalapeno.report.recommend import describe_value

    echo = typer.echo
    echo(
        f"{rec.model}: ISL {rec.isl} / OSL {rec.osl}, SLOs p90 TTFT <= {rec.ttft_slo_ms:g} ms and p90 TPOT <= "
        f"{rec.tpot_slo_ms:g} ms, objective {rec.objective}" + (f" (preset {rec.preset})" if rec.preset else "")
    )
    if rec.best is None:
        echo("no chip and layout met the SLOs; the closest misses are below")
    else:
        b = rec.best
        echo(f"recommended: {b.hardware} {b.layout} ({b.num_chips} chip{'s' if b.num_chips > 1 else ''}) at concurrency "
             f"{b.concurrency}: {describe_value(b.objective_value, rec.objective)} [{b.confidence}]")
    for w in rec.warnings:
        echo(f"warning: {w}")
    if rec.best is not None:
        echo("")
        head = ("rank", "chip", "layout", "confidence", "chips", "conc", "tok/s/chip", "tok/s/user", "p90 TTFT ms",
                "p90 TPOT ms", "$/Mtok", "tok/J")
        rows = [
            (str(c.rank), c.hardware, c.layout, c.confidence_status + ("" if c.trusted else " *"), str(c.num_chips),
             str(c.concurrency), _g(c.output_throughput_per_chip), _g(c.median_interactivity), _g(c.p90_ttft_ms),
             _g(c.p90_tpot_ms), _g(c.usd_per_mtok), _g(c.output_tokens_per_joule))
            for c in rec.ranked[:top]
        ]
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        for r in [head, *rows]:
            echo("  ".join(x.ljust(w) if i < 4 else x.rjust(w) for i, (x, w) in enumerate(zip(r, widths))))
        if len(rec.ranked) > top:
            echo(f"({len(rec.ranked) - top} more meet the SLOs; --json lists all)")
        if any(not c.trusted for c in rec.ranked[:top]):
            echo(f"* below --trust {rec.trust}: ranked after the chips that meet it (--trust any ranks by score alone)")
    echo("")
    echo("why the others lost:")
    for c in rec.ranked[1:]:
        echo(f"  #{c.rank} {c.hardware} {c.layout}: {c.reason}")
    for c in rec.losers:
        echo(f"  -- {c.hardware} {c.layout}: {c.reason}")


def _g(v: float | None) -> str:
    from jalapeno.fmt import num

    return "–" if v is None else num(v, 4)


def report_cmd(
    out_dir: Path = typer.Argument(..., help="a sweep's results directory"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="HTML file [default: DIR/report.html]"),
    hardware_dir: List[Path] = typer.Option([], "--hardware-dir", help="extra chip YAML directory, e.g. a `jalapeno design` DIR/chips (repeatable)"),
) -> None:
    """Write a self-contained HTML report (summary, Pareto plots, chip cards, assumptions) for a sweep."""
    from jalapeno.hardware.catalog import use_hardware_dirs
    from jalapeno.report.html import write_report

    use_hardware_dirs(hardware_dir)
    path = write_report(out_dir, out)
    typer.echo(f"report: {path}")
