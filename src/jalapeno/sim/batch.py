"""``jalapeno simulate --scenarios``: run every row of a scenarios CSV (columns named like the flags), write
inputs + metrics (+ ``error``) to a results CSV. A bad row is recorded, not fatal."""

from __future__ import annotations

import csv
from pathlib import Path

from jalapeno.errors import ConfigError, JalapenoError
from jalapeno.sim.scenario import Scenario, flat, run_scenario


def run_scenarios(path: Path, output: Path, progress=None) -> tuple[int, int]:
    """Run every row of the scenarios CSV ``path``; write inputs + metrics (+ ``error``) to ``output``.
    Returns (rows, failed rows)."""
    if not path.is_file():
        raise ConfigError(f"scenarios file {path} does not exist")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        cols = list(reader.fieldnames or [])
    if not rows:
        raise ConfigError(f"scenarios file {path} has no rows")
    Scenario.from_row({c: "" for c in cols})  # a misspelt column fails the whole file, up front
    results: list[dict] = []
    failed = 0
    for i, row in enumerate(rows, 1):
        out = {c: row.get(c, "") for c in cols}
        try:
            m = flat(run_scenario(Scenario.from_row(row)))
            out.update({k: v for k, v in m.items() if k not in out})
            out["error"] = ""
        except JalapenoError as exc:
            failed += 1
            out["error"] = str(exc)
        except (ValueError, ZeroDivisionError) as exc:  # pragma: no cover - defensive: keep the batch going
            failed += 1
            out["error"] = f"{type(exc).__name__}: {exc}"
        results.append(out)
        if progress is not None:
            progress(i, len(rows))
    header: list[str] = list(cols)
    for r in results:
        for k in r:
            if k not in header and k != "error":
                header.append(k)
    header.append("error")
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        for r in results:
            w.writerow({k: ("" if r.get(k) is None else r.get(k, "")) for k in header})
    return len(rows), failed

