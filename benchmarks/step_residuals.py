"""Served steps by shape, measured / priced, across committed closed-loop runs (issue 16, seventeenth session).

Each run directory (``benchmarks/grid_check.sh``'s ``OUT``) holds its probed chip (``local.yaml``), its points
(``grid.points.jsonl``, with every request's lengths and send times and the drift reference timed before and after
each point) and the served step trace (``served.jsonl[.gz]``). Every point's served steps are rebuilt batch by batch
(:func:`jalapeno.bench.lineup.replay_served`) and priced on the run's own chip (:func:`~jalapeno.bench.lineup.priced_steps`).
A step's measured / priced carries the machine's state at that moment (this VM's speed moved 0.85-1.47x within a
run), so each is normalised by a reference taken at the same point, which cancels it:

* ``/drift``: the point's drift reference (an offline decode step of the served model's shape, timed before and
  after the point) over the probe's own timing of that step (``sim_vs_engine.drift_ratio``): > 1 when the machine
  ran slower than when probed. Applies to every kind of step.
* ``/dec``: the point's own decode-only steps, measured / priced (sum over them): applies to fresh and mixed steps
  (what a prompt costs beside what the point's decode costs, in the same minutes).

Steps are grouped by shape: decode (rows band x mean-context band), fresh prompts alone (prompts x the point's ISL),
mixed (prompts beside decode rows, or a later chunk: prompts x ISL x rows band). Per run and group: the median over
the run's points of the point's (sum measured / sum priced) / reference, with the points' range. A group is
**consistent** when every run that has it lies on the same side of 1 by at least ``--threshold`` (default 5 %).

    python benchmarks/step_residuals.py benchmarks/data/grid_check_{quiet_2219,2231_isl2048,0235_osl256,0413_osl256_quiet,0610_full_median}
    python benchmarks/step_residuals.py DIR... --json steps.json     # also every step (shape, measured, priced, references)

``--hardware YAML`` prices every run on one chip instead of each run's own ``local.yaml``. CPU-light (the
scheduler replayed over a simulated backend; ~1 min for the five committed runs), no serving.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from jalapeno.errors import ConfigError, JalapenoError

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: decode rows bands and mean-context bands of the groups
ROW_BANDS = ((1, 1), (2, 3), (4, 7), (8, 15), (16, 23), (24, 32), (33, 1 << 30))
CTX_BANDS = ((0, 255), (256, 767), (768, 1535), (1536, 1 << 30))


def _band(v: float, bands) -> str:
    for lo, hi in bands:
        if lo <= v < hi + 1:
            return str(lo) if lo == hi else (f"{lo}-{hi}" if hi < 1 << 29 else f">={lo}")
    raise ValueError(v)  # pragma: no cover - the bands cover every non-negative value


def step_group(prefill: list[tuple[int, int, int]], decode: list[tuple[int, int]], isl: int) -> tuple[str, str]:
    """(kind, shape) of a served step: ``decode`` by rows band and mean-context band; ``fresh`` (prompts from 0,
    no decode row) by prompts and the point's ISL; ``mixed`` (prompts beside decode rows, or a later chunk) by
    prompts, ISL, rows band and whether a later chunk (after cached tokens) is in it."""
    if not prefill:
        ctx = float(np.mean([c for _, c in decode]))
        return "decode", f"b {_band(len(decode), ROW_BANDS)}, ctx {_band(ctx, CTX_BANDS)}"
    n = len(prefill)
    prompts = f"{n if n < 4 else '4+'} prompt{'s' if n > 1 else ''} ISL {isl}"
    if not decode and all(p == 0 for _, _, p in prefill):
        return "fresh", prompts
    later = " (a later chunk)" if any(p > 0 for _, _, p in prefill) else ""
    rows = f" + {_band(len(decode), ROW_BANDS)} rows" if decode else ""
    return "mixed", prompts + rows + later


def _trace_path(run: Path, tmp: Path) -> Path:
    for name in ("served.jsonl", "trace/served.jsonl"):
        if (run / name).is_file():
            return run / name
    gz = run / "served.jsonl.gz"
    if not gz.is_file():
        raise ConfigError(f"{run}: no served.jsonl[.gz] step trace; give a grid_check.sh run directory")
    out = tmp / (run.name + ".served.jsonl")
    out.write_bytes(gzip.decompress(gz.read_bytes()))
    return out


def run_steps(run: Path, hardware: str | None = None, max_num_seqs: int | None = None) -> list[dict]:
    """Every served step of every point of ``run`` (a grid_check.sh directory): its shape, measured and priced
    seconds on the run's chip (or ``hardware``), and its point's references (``drift``, ``dec``)."""
    from sim_vs_engine import chip_arg, drift_keys, drift_ratio, point_lengths, read_points

    from jalapeno.bench.lineup import priced_steps, replay_served
    from jalapeno.hardware.catalog import get_chip
    from jalapeno.server.step_trace import load_trace_requests
    from jalapeno.sim import cost_model_for

    if not run.is_dir():
        raise ConfigError(f"{run}: no such directory; give grid_check.sh run directories")
    chip = hardware or str(run / "local.yaml")
    if not hardware and not (run / "local.yaml").is_file():
        raise ConfigError(f"{run}: no local.yaml (the run's probed chip); give --hardware")
    spec = chip_arg(chip)
    spec = get_chip(spec) if isinstance(spec, str) else spec
    cm = cost_model_for("smollm2-135m", spec, precision="fp32", kv="fp32")
    if not (run / "grid.points.jsonl").is_file():
        raise ConfigError(f"{run}: no grid.points.jsonl")
    points = read_points(run / "grid.points.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        _, steps, records = load_trace_requests(_trace_path(run, Path(tmp)))
    if not records:
        raise ConfigError(f"{run}: the step trace has no request records")
    seqs = max_num_seqs or max(int(p["concurrency"]) for p in points)
    rows: list[dict] = []
    for p in points:
        c = p.get("client") or {}
        if not c.get("sent_monotonic"):
            continue
        conc, isl, osl = int(p["concurrency"]), int(p["isl"]), int(p["osl"])
        prompts, outputs = point_lengths(p)
        lined = replay_served(steps, records, c["sent_monotonic"], prompts, outputs, c["t_start_monotonic"],
                              c["t_end_monotonic"], cm, max_num_seqs=seqs, kv_tokens=c.get("served_kv_tokens"))
        got = priced_steps(lined, cm)
        dec = [(m, q) for s, m, q in got if not s.prefill]
        dec_ref = sum(m for m, _ in dec) / sum(q for _, q in dec) if dec else None
        drift = drift_ratio(p.get("drift") or {}, keys=drift_keys(conc, isl))
        for i, (s, m, q) in enumerate(got):
            kind, shape = step_group(s.prefill, s.decode, isl)
            ctx = [x for _, x in s.decode]
            rows.append({"run": run.name, "point": [conc, isl, osl], "step": i, "kind": kind, "shape": shape,
                         "prefill": [[n, pre] for _, n, pre in s.prefill], "rows": len(ctx),
                         "ctx_sum": int(sum(ctx)), "ctx_max": int(max(ctx, default=0)),
                         "measured_s": m, "priced_s": q, "drift": drift, "dec": dec_ref})
    return rows


def rows_fixed(path: Path) -> dict[int, float] | None:
    """Rewrite the chip YAML at ``path`` in place with the ``compute_by_rows`` entry ``jalapeno calibrate --probe``
    writes since the seventeenth session (``probe_fit.rows_table``): one row past the fused crossover, PyTorch's GEMM
    rate at the crossover's rows (``probe_fit.pytorch_rate_at``), scaled as the table's PyTorch entries are (proportional to the
    probe's by-rows TFLOPS). For re-pricing committed runs without re-running calibrate (which reproduces every other
    fitted figure of their chips unchanged); returns the new table, None when the chip has no such table."""
    import yaml

    from jalapeno.calibration.probe_fit import probe_from_chip, pytorch_rate_at
    from jalapeno.hardware.catalog import load_spec_file

    spec = load_spec_file(path)
    table = dict(spec.efficiency.compute_by_rows or {})
    rates = probe_from_chip(spec).rows_tflops
    ex = spec.execution
    if not table or not rates or ex is None or ex.fused_max_batch is None:
        return None
    cap = int(ex.fused_max_batch.value)
    above = [m for m in table if m > cap and m in rates]
    at_cap = pytorch_rate_at(rates, cap)
    if not above or at_cap is None:
        return None
    top = max(above)
    table[cap + 1] = round(table[top] * at_cap / rates[top], 5)
    doc = yaml.safe_load(path.read_text())
    doc["efficiency"]["compute_by_rows"] = dict(sorted(table.items()))
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dict(sorted(table.items()))


def group_table(rows: list[dict], ref: str, kinds: tuple[str, ...]) -> dict[tuple[str, str], dict[str, dict]]:
    """{(kind, shape): {run: {median, lo, hi, points, steps}}}: per point (sum measured / sum priced) / its
    reference ``ref`` (``drift`` or ``dec``), then the median and range over the run's points."""
    per: dict[tuple[str, str, str, tuple], list[float]] = {}
    refs: dict[tuple[str, str, str, tuple], float | None] = {}
    for r in rows:
        if r["kind"] not in kinds:
            continue
        k = (r["kind"], r["shape"], r["run"], tuple(r["point"]))
        acc = per.setdefault(k, [0.0, 0.0, 0])
        acc[0] += r["measured_s"]
        acc[1] += r["priced_s"]
        acc[2] += 1
        refs[k] = r[ref]
    out: dict[tuple[str, str], dict[str, dict]] = {}
    by: dict[tuple[str, str, str], list[tuple[float, int]]] = {}
    for k, (m, q, n) in per.items():
        if refs[k] and q > 0:
            by.setdefault(k[:3], []).append((m / q / refs[k], n))
    for (kind, shape, run), vals in by.items():
        v = np.array([x for x, _ in vals])
        out.setdefault((kind, shape), {})[run] = {"median": float(np.median(v)), "lo": float(v.min()),
                                                  "hi": float(v.max()), "points": len(v),
                                                  "steps": int(sum(n for _, n in vals))}
    return out


def verdict(cells: dict[str, dict], threshold: float, min_steps: int) -> str:
    vals = [c["median"] for c in cells.values() if c["steps"] >= min_steps]
    if len(vals) < 2:
        return "one run"
    lo, hi = min(vals), max(vals)
    if lo >= 1 + threshold or hi <= 1 - threshold:
        return f"CONSISTENT {100 * (np.exp(np.mean(np.log(vals))) - 1):+.0f} %"
    if lo > 1 or hi < 1:
        return "same sign, small"
    return "noise"


def _order(key: tuple[str, str]) -> tuple:
    kind, shape = key
    nums = [int(t) for t in shape.replace("-", " ").replace(",", " ").replace(">=", " ").split() if t.isdigit()]
    return ({"decode": 0, "fresh": 1, "mixed": 2}[kind], nums)


def print_table(title: str, table: dict, runs: list[str], threshold: float, min_steps: int) -> None:
    print(f"\n{title}")
    print(f"| kind | shape | {' | '.join(runs)} | across runs |")
    print("|---|---|" + "---:|" * len(runs) + "---|")
    for key in sorted(table, key=_order):
        cells = table[key]
        if max(c["steps"] for c in cells.values()) < min_steps:
            continue
        txt = []
        for run in runs:
            c = cells.get(run)
            if c is None or c["steps"] < min_steps:
                txt.append("")
            else:
                rng = f" [{c['lo']:.2f}-{c['hi']:.2f}]" if c["points"] > 1 else ""
                txt.append(f"{c['median']:.2f}{rng} ({c['steps']})")
        print(f"| {key[0]} | {key[1]} | {' | '.join(txt)} | {verdict(cells, threshold, min_steps)} |")


def main() -> None:
    try:
        _main()
    except JalapenoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", type=Path, metavar="DIR", help="grid_check.sh run directories")
    ap.add_argument("--rows-fix", type=Path, default=None, metavar="CHIP.yaml",
                    help="only rewrite this chip YAML's compute_by_rows with the entry past the fused crossover that "
                         "calibrate writes since the seventeenth session (to re-price committed runs), and stop")
    ap.add_argument("--hardware", default=None, help="price every run on this chip (default: each run's local.yaml)")
    ap.add_argument("--max-num-seqs", type=int, default=None,
                    help="the server's --max-num-seqs (default: each run's largest concurrency, as grid_check.sh serves)")
    ap.add_argument("--threshold", type=float, default=0.05, help="a consistent residual's least |ratio - 1|")
    ap.add_argument("--min-steps", type=int, default=3, help="fewest steps of a run's group to show it")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="write every step row as JSON")
    args = ap.parse_args()
    if args.rows_fix is not None:
        if not args.rows_fix.is_file():
            raise ConfigError(f"--rows-fix {args.rows_fix}: no such chip file")
        table = rows_fixed(args.rows_fix)
        print(f"{args.rows_fix}: compute_by_rows {table}" if table else f"{args.rows_fix}: no probed rows table to fix")
        return
    if not args.runs:
        raise ConfigError("give grid_check.sh run directories (or --rows-fix CHIP.yaml)")
    if args.threshold < 0 or args.min_steps < 1:
        raise ConfigError("--threshold must be >= 0 and --min-steps >= 1")
    rows: list[dict] = []
    for run in args.runs:
        got = run_steps(run, args.hardware, args.max_num_seqs)
        print(f"{run.name}: {len(got)} served steps, {len({tuple(r['point']) for r in got})} points", flush=True)
        rows += got
    runs = list(dict.fromkeys(r["run"] for r in rows))
    print_table("served steps measured / priced / drift (the point's reference step now / at the probe); "
                "median over the run's points [range] (steps)", group_table(rows, "drift", ("decode", "fresh", "mixed")),
                runs, args.threshold, args.min_steps)
    print_table("prompt steps measured / priced / the same point's decode-only steps measured / priced",
                group_table(rows, "dec", ("fresh", "mixed")), runs, args.threshold, args.min_steps)
    if args.json is not None:
        args.json.write_text(json.dumps(rows) + "\n")
        print(f"\n{len(rows)} steps written to {args.json}")


if __name__ == "__main__":
    main()
