"""``jalapeno sweep``: spec file -> grid -> runs -> ``DIR/results.parquet`` (+ ``DIR/sweep.json``).

``sweep.json`` records the spec, price overrides and PUE, so ``jalapeno report DIR`` can say which assumptions
the numbers rest on and recompute the economics the same way.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Mapping

from jalapeno.errors import ConfigError
from jalapeno.economics import DEFAULT_PUE, economics, point_groups
from jalapeno.report.grid import ArchDims, expand
from jalapeno.report.pool import PointFn, SweepSummary, run_sweep
from jalapeno.report.spec import SweepSpec
from jalapeno.report.store import ResultStore

META = "sweep.json"
#: spec fields that change a point's results without changing its id: a folder's rows must share them
RESULT_SETTINGS = ("slo", "seed", "num_prompts", "framework")


def make_enricher(prices: Mapping[str, float] | None = None, pue: float = DEFAULT_PUE) -> Callable[[dict], dict]:
    """A row -> row function adding the economics columns (recomputed from metrics at every compaction)."""

    def enrich(row: dict) -> dict:
        row = _with_confidence(row)
        if row.get("status") != "ok":
            return row
        try:
            eco = economics(row, point_groups(row, prices), pue)
            return {**row, **eco.as_columns()}
        except Exception as exc:  # an unknown chip here only loses the economics, not the row
            return {**row, "economics_note": f"economics unavailable: {exc}"}

    return enrich


def _with_confidence(row: dict) -> dict:
    """The row with its chips' confidence columns (``confidence`` label, ``confidence_status``) when it has none
    yet (skipped points, fake point functions, rows stored before the columns existed)."""
    if row.get("confidence"):
        return row
    from jalapeno.hardware.confidence import confidence_columns

    try:
        return {**row, **confidence_columns(row)}
    except Exception:  # a chip not in the catalogue: its confidence is unknown, the row is kept
        return {**row, "confidence": "unknown", "confidence_status": "uncalibrated"}


def run_spec(
    spec: SweepSpec,
    out_dir: str | Path,
    *,
    workers: int | None = None,
    ray: str | None = None,
    prices: Mapping[str, float] | None = None,
    pue: float = DEFAULT_PUE,
    point_fn: PointFn | None = None,
    dims_fn: Callable[[str], ArchDims] | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> SweepSummary:
    """Run ``spec`` into ``out_dir``, resuming the points already there. A grown or shrunk grid resumes (only
    new points run); results made under different per-point settings (SLO, seed, prompts, framework: not part
    of a point's id) are refused, since they would be mixed with the new ones, unless ``overwrite``, which
    deletes them first."""
    points = expand(spec, dims_fn)
    store = ResultStore(out_dir)
    new_spec = spec.model_dump(mode="json")
    if store.has_results():
        old = read_meta(out_dir).get("spec")
        changed = sorted(k for k in RESULT_SETTINGS if old is None or old.get(k) != new_spec.get(k))
        if changed and not overwrite:
            raise ConfigError(
                f"{store.dir} holds results made with a different {', '.join(changed)} (see its {META}); "
                "use another --out, or --overwrite to delete them"
            )
        if changed:
            store.clear()
    store.dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "spec": new_spec,
        "prices": dict(prices or {}),
        "pue": pue,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (store.dir / META).write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return run_sweep(points, store, point_fn=point_fn, workers=workers, ray=ray, progress=progress, enrich=make_enricher(prices, pue))


def read_meta(out_dir: str | Path) -> dict:
    p = Path(out_dir) / META
    if not p.exists():
        return {"prices": {}, "pue": DEFAULT_PUE}
    return json.loads(p.read_text(encoding="utf-8"))


#: The quick sweep, shipped inside the package so ``jalapeno demo`` runs from an installed copy (same grid as
#: examples/quick-sweep.yaml; a test keeps the two in step).
QUICK_SWEEP_PATH = Path(__file__).with_name("quick-sweep.yaml")


def run_quick(out_dir: str | Path, *, workers: int | None = None, progress: bool = True) -> tuple[SweepSummary, Path]:
    """Run the embedded quick sweep into ``out_dir`` and write ``out_dir/report.html`` (for ``jalapeno demo``).
    Returns the sweep summary and the report path."""
    from jalapeno.report.html import write_report
    from jalapeno.report.spec import load_sweep

    spec = load_sweep(QUICK_SWEEP_PATH)
    summary = run_spec(spec, out_dir, workers=workers, progress=progress)
    return summary, write_report(out_dir)
