"""Measurements a user gives ``jalapeno calibrate``: InferenceX-format CSV files, checked row by row, or
``jalapeno bench`` result JSON files with the layout they ran.

Every problem is one :class:`~jalapeno.errors.CalibrationError` line naming the file, the row (line number and
id) and the field. Rows of metrics the simulator does not compare (MLPerf percentiles, ...) pass unchecked; the
metrics it compares must carry a known unit, and InferenceX layouts must parse.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from jalapeno.calibration.points import (
    REQUIRED_COLUMNS,
    Point,
    group_points,
    parse_disagg_layout,
    parse_layout,
    source_of,
)
from jalapeno.errors import CalibrationError

#: compared metric -> units it may be given in (lower case)
UNITS: dict[str, tuple[str, ...]] = {
    "output_tput_per_gpu": ("tok/s/gpu", "tok/s/chip"),
    "total_tput_per_gpu": ("tok/s/gpu", "tok/s/chip"),
    "median_interactivity": ("tok/s/user",),
    "median_tpot": ("s", "ms"),
    "median_ttft": ("s", "ms"),
    "median_e2e_latency": ("s", "ms"),
}
_DISAGG_FORM = ("'disagg P: <n> worker(s) x TP<a> EP<b> DPattn=<True|False> (<N> GPUs); "
                "D: <m> worker(s) x TP<c> EP<d> DPattn=<True|False> (<M> GPUs)'")


def _where(path: Path, line: int, row: dict[str, str]) -> str:
    return f"{path} line {line} (id {row.get('id') or '?'})"


def check_row(path: Path, line: int, row: dict[str, str]) -> None:
    """Raise :class:`CalibrationError` naming the row and field when ``row`` cannot be used."""
    where = _where(path, line, row)
    metric, unit = row["metric"].strip(), row["unit"].strip()
    try:
        float(row["value"])
    except ValueError:
        raise CalibrationError(f"{where}: field 'value': {row['value']!r} is not a number") from None
    if metric in UNITS and unit.lower() not in UNITS[metric]:
        raise CalibrationError(f"{where}: field 'unit': {unit!r} is not a unit of {metric} "
                               f"(use {' or '.join(UNITS[metric])})")
    if source_of(row["id"]) not in ("IXAPI", "IXRUN"):
        return
    lay = row["parallelism"]
    if "disagg=True" in row["notes"]:
        if parse_disagg_layout(lay) is None and "legacy" not in lay.lower():
            raise CalibrationError(f"{where}: field 'parallelism': disaggregated layout {lay!r} does not parse "
                                   f"(expected {_DISAGG_FORM}, or LEGACY)")
    elif parse_layout(lay) is None:
        raise CalibrationError(f"{where}: field 'parallelism': layout {lay!r} does not parse "
                               "(expected e.g. 'TP8 EP8 DPattn=True', 'TP2' or 'DEP8')")
    for col in ("isl", "osl", "concurrency_or_batch"):
        if not row[col].strip().isdigit():
            raise CalibrationError(f"{where}: field '{col}': {row[col]!r} is not a whole number")


def read_measurements(path: str | Path) -> list[Point]:
    """Points of an InferenceX-format CSV (``benchmarks/data/README.md`` has the columns), checked row by row."""
    p = Path(path)
    if not p.is_file():
        raise CalibrationError(f"measurements file {p} does not exist")
    with p.open(newline="") as f:
        reader = csv.DictReader(f)
        cols = list(reader.fieldnames or [])
        unknown = [c for c in cols if c not in REQUIRED_COLUMNS]
        if unknown:
            raise CalibrationError(f"{p} line 1: unknown column(s) {', '.join(map(repr, unknown))} "
                                   f"(columns: {', '.join(REQUIRED_COLUMNS)})")
        missing = [c for c in REQUIRED_COLUMNS if c not in cols]
        if missing:
            raise CalibrationError(f"{p} line 1: missing column(s) {', '.join(missing)}")
        rows = []
        for line, row in enumerate(reader, start=2):
            if None in row or any(v is None for v in row.values()):
                raise CalibrationError(f"{_where(p, line, row)}: wrong number of fields "
                                       f"({len(cols)} columns expected)")
            check_row(p, line, row)
            rows.append(row)
    return group_points(rows)


#: bench JSON key -> (compared metric, factor to SI units)
_BENCH_METRICS = {
    "output_throughput_per_chip": ("output_tput_per_gpu", 1.0),
    "total_token_throughput_per_chip": ("total_tput_per_gpu", 1.0),
    "median_tpot_ms": ("median_tpot", 1e-3),
    "median_ttft_ms": ("median_ttft", 1e-3),
    "median_e2el_ms": ("median_e2e_latency", 1e-3),
}


def read_bench_json(path: str | Path, *, model: str, hardware: str, tp: int, ep: int = 1,
                    dp_attention: bool = False, framework: str = "", precision: str = "") -> Point:
    """One point from a ``jalapeno bench --output`` file of a closed-loop run, with the layout it ran."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except OSError as exc:
        raise CalibrationError(f"bench result {p}: cannot read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise CalibrationError(f"bench result {p}: not JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise CalibrationError(f"bench result {p}: expected a JSON object as `jalapeno bench --output` writes")

    def need(key: str, hint: str):
        v = data.get(key)
        if v is None:
            raise CalibrationError(f"bench result {p}: field '{key}' is missing ({hint})")
        return v

    conc = need("concurrency", "calibrate needs closed-loop runs: `jalapeno bench --concurrency N`")
    isl, osl = need("input_len", "run with --dataset random"), need("output_len", "run with --dataset random")
    dataset = data.get("dataset", "random")
    if dataset not in ("random", "fixed") or data.get("range_mode", "ix") != "ix":
        raise CalibrationError(f"bench result {p}: field 'dataset': calibrate needs --dataset random "
                               "(--range-mode ix) or fixed")
    ratio = 1.0 if dataset == "fixed" else float(data.get("random_range_ratio", 0.8))
    metrics = {}
    for key, (name, f) in _BENCH_METRICS.items():
        v = data.get(key)
        if v is not None:
            if not isinstance(v, (int, float)) or v < 0:
                raise CalibrationError(f"bench result {p}: field '{key}': {v!r} is not a non-negative number")
            metrics[name] = float(v) * f
    if "output_tput_per_gpu" not in metrics:
        raise CalibrationError(f"bench result {p}: field 'output_throughput_per_chip' is missing (not a "
                               "`jalapeno bench` result file?)")
    per = max(1, round(int(data.get("num_prompts", 10 * conc)) / max(1, int(conc))))
    layout = f"TP{tp} EP{ep} DPattn={dp_attention}"
    notes = f"bench; range_ratio={ratio}; prompts_per_concurrency={per}"
    key = (str(p), "jalapeno bench", str(data.get("date", "")), model, precision, hardware, str(tp), layout,
           framework, str(isl), str(osl), str(conc), notes)
    return Point("BENCH", key, (f"BENCH-{p.name}",), metrics)
