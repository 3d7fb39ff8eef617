"""Where sweep results live: ``DIR/results.parquet`` (one row per point) plus crash-safe part files.

Each finished point is appended as one JSON line to ``DIR/parts/part-<pid>-<n>.jsonl`` and flushed at once, so
an interrupted sweep (Ctrl-C, a killed process) keeps every finished point. :meth:`ResultStore.compact` merges
``results.parquet`` and all part files into a new ``results.parquet`` (written to a temporary file and renamed,
so a reader never sees half a file) and removes the merged parts. A re-run resumes by skipping the
``point_id`` values already stored.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from jalapeno.report.grid import POINT_KEYS

RESULTS = "results.parquet"
#: types of columns that may be null in every row (pyarrow would otherwise infer the "null" type)
_STRING = {"status", "error", "error_kind", "economics_note", "confidence", "confidence_status", "model", "hardware",
           "mode", "prefill_hardware", "weights", "kv", "spec_method", "point_id", "prefill_weights",
           "decode_weights"}
_INT = {"prefill_workers", "prefill_tp", "decode_workers", "num_prompts", "tp", "ep", "pp", "dp", "isl", "osl",
        "concurrency", "spec_tokens", "seed", "num_chips", "max_num_batched_tokens"}
FIRST_COLUMNS = ("point_id", "status", "error", "error_kind", *POINT_KEYS)


class ResultStore:
    def __init__(self, out_dir: str | Path) -> None:
        self.dir = Path(out_dir)
        self.parts = self.dir / "parts"
        self._fh = None
        self._part_path: Path | None = None

    @property
    def results_path(self) -> Path:
        return self.dir / RESULTS

    # ---- reading ----------------------------------------------------------------------------------------
    def _part_rows(self) -> list[dict]:
        rows: list[dict] = []
        if not self.parts.is_dir():
            return rows
        for f in sorted(self.parts.glob("*.jsonl")):
            for line in f.read_text(encoding="utf-8").splitlines():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:  # a line cut short by a kill: that point simply reruns
                    continue
        return rows

    def rows(self) -> list[dict]:
        """Every stored row (parquet, then parts; a later row with the same point_id wins)."""
        rows: dict[str, dict] = {}
        if self.results_path.exists():
            for r in pq.read_table(self.results_path).to_pylist():
                rows[r["point_id"]] = r
        for r in self._part_rows():
            rows[r["point_id"]] = r
        return list(rows.values())

    def has_results(self) -> bool:
        return self.results_path.exists() or (self.parts.is_dir() and any(self.parts.glob("*.jsonl")))

    def clear(self) -> None:
        """Delete every stored row (results.parquet and part files)."""
        self.close()
        self.results_path.unlink(missing_ok=True)
        for f in self.parts.glob("*.jsonl") if self.parts.is_dir() else ():
            f.unlink()

    def done_ids(self) -> set[str]:
        """Points that need not run again: finished ok or skipped (failed ones are retried)."""
        return {r["point_id"] for r in self.rows() if r.get("status") != "error"}

    # ---- writing ----------------------------------------------------------------------------------------
    def append(self, row: dict) -> None:
        if self._fh is None:
            self.parts.mkdir(parents=True, exist_ok=True)
            n = 0
            while (p := self.parts / f"part-{os.getpid()}-{n}.jsonl").exists():
                n += 1
            self._part_path = p
            self._fh = p.open("a", encoding="utf-8")
        self._fh.write(json.dumps(row, default=_json_default) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def compact(self, enrich: Callable[[dict], dict] | None = None) -> int:
        """Merge everything into ``results.parquet``; ``enrich(row)`` may add derived columns (economics).
        Returns the number of rows written."""
        self.close()
        rows = self.rows()
        if enrich is not None:
            rows = [enrich(r) for r in rows]
        rows.sort(key=lambda r: (str(r.get("model")), str(r.get("hardware")), r.get("_order", 0), r["point_id"]))
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".{RESULTS}.tmp-{os.getpid()}"
        pq.write_table(rows_to_table(rows), tmp)
        os.replace(tmp, self.results_path)
        for f in self.parts.glob("*.jsonl") if self.parts.is_dir() else ():
            f.unlink()
        if self.parts.is_dir() and not any(self.parts.iterdir()):
            self.parts.rmdir()
        return len(rows)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    return str(o)


def rows_to_table(rows: Iterable[dict]) -> pa.Table:
    """Rows with possibly different keys -> one table (missing values null). A column mixing strings and
    numbers is stored as strings; nested values as JSON text."""
    rows = list(rows)
    cols: list[str] = [c for c in FIRST_COLUMNS if any(c in r for r in rows)]
    seen = set(cols)
    for r in rows:
        for k in r:
            if k not in seen:
                seen.add(k)
                cols.append(k)
    arrays = []
    for c in cols:
        vals = [_scalar(r.get(c)) for r in rows]
        try:
            arr = pa.array(vals)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arr = pa.array([None if v is None else str(v) for v in vals], type=pa.string())
        if arr.type == pa.null():
            arr = pa.array(vals, type=pa.string() if c in _STRING else pa.int64() if c in _INT else pa.float64())
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, names=cols)


def _scalar(v: Any) -> Any:
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, default=_json_default)
    if isinstance(v, float) and math.isinf(v):
        return None
    return v
