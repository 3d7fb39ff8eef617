"""``jalapeno design SPEC.yaml --out DIR``: search the chip design space, judged by serving simulation."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from jalapeno import native


def run_design(spec_path: Path, out: Path, search: str = "grid", workers: int | None = None,
               interactivity_weight: float = 0.0, progress: bool = False, ray: str | None = None) -> dict:
    """Run a design search; writes designs/, chips/ (the fronts' YAMLs), designs.json, design.html."""
    from jalapeno.design import search as S
    from jalapeno.design.html import render
    from jalapeno.design.reference import error_table
    from jalapeno.design.spec import grid_designs, load_design_spec
    from jalapeno.errors import ConfigError

    if search not in ("grid", "de"):
        raise ConfigError(f"--search {search!r} must be grid or de")
    spec = load_design_spec(spec_path)
    out.mkdir(parents=True, exist_ok=True)
    n = workers or S.default_workers()
    t0 = time.perf_counter()
    tick = (lambda r: typer.echo(f"{r['key']}: {r['status']} {r.get('reason') or ''}", err=True)) if progress else None
    if search == "grid":
        rows = S.score_many(grid_designs(spec), spec, out, n, tick, ray=ray)
    else:
        rows = S.de_search(spec, out, n, interactivity_weight, ray=ray)
    wall = time.perf_counter() - t0
    rows = S.dedupe(rows)
    fronts = S.pareto(rows)
    if not any(fronts.values()):
        raise ConfigError(S.empty_reason(rows))
    chips = out / "chips"
    chips.mkdir(exist_ok=True)
    on_front = {r["id"]: r for f in fronts.values() for r in f}
    for r in on_front.values():
        src = out / "designs" / r["id"] / f"{r['key']}.yaml"
        (chips / src.name).write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    meta = {"search": search, "wall_s": round(wall, 1), "designs": len(rows), "workers": n,
            "machine": f"Ray {ray}" if ray else f"{platform.node()} ({n} workers)"}
    (out / "designs.json").write_text(json.dumps({"meta": meta, "rows": rows, "fronts": {k: [r["id"] for r in v] for k, v in fronts.items()}},
                                                 default=float, indent=1))
    (out / "design.html").write_text(render(spec, rows, fronts, error_table(), meta), encoding="utf-8")
    return {"meta": meta, "rows": rows, "fronts": fronts}


def register(app: typer.Typer) -> None:
    @app.command("design")
    def design(
        spec: Annotated[Path, typer.Argument(help="Design spec YAML (workloads, grid/ranges, limits; docs/design.md).")],
        out: Annotated[Path, typer.Option("--out", "-o", help="Output directory (re-running skips scored designs).")],
        search: Annotated[str, typer.Option(help="grid (every grid combination) or de (scipy differential evolution over ranges).")] = "grid",
        workers: Annotated[Optional[int], typer.Option(help="Local processes (default: all cores).")] = None,
        interactivity_weight: Annotated[float, typer.Option(help="de: minimise log $/Mtok - w log tokens/s/user.")] = 0.0,
        ray: Annotated[Optional[str], typer.Option(help="Run designs as Ray tasks: 'auto' (local or running cluster) or an address; needs jalapeno[ray].")] = None,
        verbose: Annotated[bool, typer.Option("--verbose", "-v", help="One line per scored design.")] = False,
    ) -> None:
        """Search the chip design space under area/power/cost limits, each design judged by serving simulation."""
        res = run_design(spec, out, search, workers, interactivity_weight, verbose, ray)
        m = res["meta"]
        typer.echo(f"{m['designs']} designs in {m['wall_s']} s; Pareto fronts: "
                   + ", ".join(f"{k}: {', '.join(r['key'] for r in v)}" for k, v in res["fronts"].items()))
        typer.echo(f"chips: {out / 'chips'} (use --hardware-dir); report: {out / 'design.html'}")
        hint = native.speed_hint(float(m["wall_s"])) if m["designs"] else None
        if hint:
            typer.echo(hint, err=True)
