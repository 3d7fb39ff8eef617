"""``jalapeno calibrate``: fit a chip's named efficiency parameters to measurements, write an overlay YAML."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from jalapeno.errors import CalibrationError


def register(app: typer.Typer) -> None:
    app.command("calibrate", no_args_is_help=True)(calibrate)


def _points(csvs: list[Path], bench: list[Path], model: str | None, hardware: str | None, tp: int, ep: int,
            dp_attention: bool, framework: str, precision: str) -> list:
    from jalapeno.calibration.inputs import read_bench_json, read_measurements

    pts = [p for f in csvs for p in read_measurements(f)]
    if bench:
        if not model or not hardware:
            raise CalibrationError("--bench-json needs the layout it ran: --model and --hardware (and --tp, --ep, "
                                   "--dp-attention, --framework, --precision as run)")
        pts += [read_bench_json(f, model=model, hardware=hardware, tp=tp, ep=ep, dp_attention=dp_attention,
                                framework=framework, precision=precision) for f in bench]
    if not pts:
        raise CalibrationError("no measurements: give --csv FILE (InferenceX format) or --bench-json FILE")
    return pts


def _pick_chip(items: list, chip: str | None) -> str:
    chips = sorted({s.chip for _, s in items})
    if chip:
        from jalapeno.hardware.catalog import get_chip

        key = get_chip(chip).key
        if key not in chips:
            raise CalibrationError(f"--chip {chip}: no usable measurements of it (the data has "
                                   f"{', '.join(chips) or 'no usable points'})")
        return key
    if len(chips) != 1:
        raise CalibrationError(f"the measurements cover {', '.join(chips) or 'no usable chip'}: choose one with --chip")
    return chips[0]


def _print_tables(console, report) -> None:
    from rich.table import Table

    t = Table(title=f"{report.chip}: |error| before -> after (median / p90 %, signed median %)")
    for c in ("set", "metric", "n", "before med", "before p90", "after med", "after p90", "after signed"):
        t.add_column(c, justify="left" if c in ("set", "metric") else "right")
    for name in ("fit", "held-out"):
        b, a = report.tables.get(f"before {name}", {}), report.tables.get(f"after {name}", {})
        for m, s in a.items():
            if not s.n:
                continue
            bs = b[m]
            t.add_row(name, m, str(s.n), f"{bs.median_abs:.1f}", f"{bs.p90_abs:.1f}", f"{s.median_abs:.1f}",
                      f"{s.p90_abs:.1f}", f"{s.median_signed:+.1f}")
    console.print(t)
    p = Table(title="parameters")
    for c in ("name", "before", "fitted", "bounds"):
        p.add_column(c)
    for prm in report.params:
        p.add_row(prm.name, f"{report.start[prm.name]:.4g}", f"{report.fitted[prm.name]:.4g}",
                  f"[{prm.lower:g}, {prm.upper:g}]")
    console.print(p)


def calibrate(
    csv: Annotated[Optional[list[Path]], typer.Option("--csv", help="InferenceX-format measurements (repeatable).")] = None,
    bench_json: Annotated[Optional[list[Path]], typer.Option("--bench-json", help="`jalapeno bench --output` result of a closed-loop run (repeatable); give the layout it ran with --model/--hardware/--tp/...")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Catalogue model of --bench-json runs.")] = None,
    hardware: Annotated[Optional[str], typer.Option("--hardware", help="Chip of --bench-json runs.")] = None,
    tp: Annotated[int, typer.Option("--tp", help="Chips per replica of --bench-json runs.")] = 1,
    ep: Annotated[int, typer.Option("--ep", help="Expert parallelism of --bench-json runs.")] = 1,
    dp_attention: Annotated[bool, typer.Option("--dp-attention", help="--bench-json runs used attention data parallelism.")] = False,
    framework: Annotated[str, typer.Option("--framework", help="Serving framework of --bench-json runs (vllm, sglang, trt, ...).")] = "",
    precision: Annotated[str, typer.Option("--precision", help="Weight precision of --bench-json runs (default: the checkpoint's).")] = "",
    chip: Annotated[Optional[str], typer.Option("--chip", help="Which chip's measurements to fit (needed when the data has several).")] = None,
    params: Annotated[str, typer.Option("--params", help="Comma-separated parameter names: efficiency fields (step_overhead_us, compute.fp8, ...) or request_overhead_ms@<framework>.")] = "step_overhead_us,layer_overhead_us,scale_up",
    split: Annotated[str, typer.Option("--split", help="Held-out set: date:YYYY-MM (from that month on), chip:NAME[,NAME] (fit on --chip, judge on those chips: transfer), or random:F (fraction of configurations).")] = "date:2026-01",
    out: Annotated[Optional[Path], typer.Option("--out", help="Directory for the overlay YAML (use it with --hardware-dir).")] = None,
    hardware_dir: Annotated[Optional[list[Path]], typer.Option("--hardware-dir", help="Extra chip YAML directory (the base chip may come from it).")] = None,
    fit_mtp: Annotated[bool, typer.Option("--fit-mtp", help="Also fit one MTP acceptance rate per (model, framework) on the MTP fit rows.")] = False,
    workers: Annotated[int, typer.Option("--workers", help="Simulation processes.")] = 2,
    search_prompts: Annotated[int, typer.Option("--search-prompts", help="Requests per unit of concurrency during the search.")] = 4,
    final_prompts: Annotated[Optional[int], typer.Option("--final-prompts", help="Requests per unit of concurrency for the final tables (default: each point's own, InferenceX 10).")] = None,
    max_iter: Annotated[int, typer.Option("--max-iter", help="Most Gauss-Newton iterations (each simulates every search point once); it stops earlier when no parameter moves by 1%.")] = 4,
    max_nfev: Annotated[int, typer.Option("--max-nfev", help="Most objective evaluations of the MTP acceptance search (--fit-mtp).")] = 12,
    max_search_points: Annotated[int, typer.Option("--max-search-points", help="The search runs on at most this many configurations, evenly spread (0: all); the tables use all.")] = 150,
    as_json: Annotated[bool, typer.Option("--json", help="Print the fit report as JSON.")] = False,
    probe: Annotated[Optional[Path], typer.Option("--probe", help="A `jalapeno hardware probe` chip YAML: fit its small-M terms (GEMM efficiency by rows, compute/memory overlap) from the measurements it records, and time the serving front end (request_overhead_ms) when it has none; writes the chip to --out (default: replaces it). No other option is used.")] = None,
) -> None:
    """Fit a chip's named efficiency parameters to measured serving points; print error tables, write an overlay."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from jalapeno.calibration.fit import dedupe, fit, fit_mtp_acceptance, prepare, split_items
    from jalapeno.calibration.overlay import write_overlay
    from jalapeno.hardware.catalog import ENV_VAR

    if probe is not None:
        from jalapeno.calibration.probe_fit import refit_probe_file

        if not probe.is_file():
            raise CalibrationError(f"--probe {probe}: no such file (jalapeno hardware probe prints where it wrote)")
        typer.echo(refit_probe_file(probe, out or probe.parent, f"jalapeno calibrate --probe {probe.name}",
                                    front_end=True)[1])
        return
    if workers < 1 or search_prompts < 1 or max_nfev < 1 or max_iter < 1 or max_search_points < 0:
        raise CalibrationError("--workers, --search-prompts, --max-iter and --max-nfev must be >= 1, "
                               "--max-search-points >= 0")
    dirs = [str(d) for d in hardware_dir or []]
    if dirs:  # the simulation processes resolve chips through the catalogue: make the user's dirs visible
        os.environ[ENV_VAR] = os.pathsep.join([*filter(None, [os.environ.get(ENV_VAR, "")]), *dirs])
    pts = _points(list(csv or []), list(bench_json or []), model, hardware, tp, ep, dp_attention, framework, precision)
    prep = prepare(pts)
    key = _pick_chip(prep.items, chip)
    if split.startswith("chip:"):  # transfer: fit on --chip's points, judge on the named chips' points
        others = {c.strip().lower() for c in split[5:].split(",")}
        if key in others:
            raise CalibrationError(f"--split {split} holds out the chip being fitted ({key}): name other chips")
        fit_all = [it for it in prep.items if it[1].chip == key]
        held_all = [it for it in prep.items if it[1].chip in others]
    else:
        fit_all, held_all = split_items([it for it in prep.items if it[1].chip == key], split)
    mtp_fit = [it for it in fit_all if it[1].spec_tokens]
    fit_items, held = dedupe([it for it in fit_all if not it[1].spec_tokens]), \
        dedupe([it for it in held_all if not it[1].spec_tokens])
    names = [n.strip() for n in params.split(",") if n.strip()]
    if not names:
        raise CalibrationError("--params is empty: name at least one parameter, e.g. step_overhead_us")
    err = Console(stderr=True)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("calibrating", total=1)

        def progress(label: str, done: int, total: int) -> None:
            bar.update(task, description=label, completed=done, total=total)

        report = fit(fit_items, held, key, names, workers=workers, search_prompts=search_prompts,
                     final_prompts=final_prompts, max_iter=max_iter, max_search_points=max_search_points or None,
                     progress=progress)
        report.excluded = prep.excluded
        extra = {}
        if fit_mtp:
            from jalapeno.calibration.fit import apply_params
            from jalapeno.calibration.predict import efficiency_of

            eff = apply_params(efficiency_of(key), {k: v for k, v in report.fitted.items() if "@" not in k})
            mtps = fit_mtp_acceptance(dedupe(mtp_fit), eff, workers=workers, search_prompts=search_prompts,
                                      max_nfev=max_nfev, progress=progress)
            extra["mtp_acceptance"] = [m.__dict__ for m in mtps]
    command = " ".join(["jalapeno calibrate", *(f"--csv {shlex.quote(str(f))}" for f in csv or []),
                        *(f"--bench-json {shlex.quote(str(f))}" for f in bench_json or []),
                        f"--chip {key}", f"--params {shlex.quote(params)}", f"--split {split}"])
    sources = [str(f) for f in [*(csv or []), *(bench_json or [])]]
    path = write_overlay(report, out, sources, command, dirs, extra) if out is not None else None
    if as_json:
        typer.echo(json.dumps({**report.to_json(), **extra, "overlay": str(path) if path else None}, indent=1))
        return
    console = Console()
    console.print(f"{len(pts)} measured points; {key}: {report.n_fit} fit (search on {report.n_search}) and "
                  f"{report.n_held} held-out configurations ({split}); {report.simulations} simulations in "
                  f"{report.wall_s:.0f} s; Gauss-Newton {len(report.iterations)} iteration(s), "
                  + (f"converged ({report.stop})" if report.converged else "stopped at --max-iter"))
    _print_tables(console, report)
    for m in extra.get("mtp_acceptance", []):
        console.print(f"MTP acceptance {m['model']} / {m['framework']}: {m['acceptance']:.3f} ({m['points']} points)")
    if path is not None:
        console.print(f"overlay written to {path}: use it with --hardware-dir {path.parent}")
