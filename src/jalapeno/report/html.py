"""``jalapeno report DIR``: one self-contained HTML file (no server, no external assets).

Sections: summary table per (model, chip); Pareto plots per model (PNG from matplotlib's Agg backend, embedded
as base64); points that were skipped or failed, with reasons; one card per chip with its specs and sources from
the catalogue; the assumptions the numbers rest on (efficiencies, prices, PUE, facility overhead, SLOs); and
every row in a collapsed table.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from jalapeno.errors import SpecError
from jalapeno.economics import DEFAULT_OVERHEAD_FRACTION, DEFAULT_PUE, chip_group
from jalapeno.report.grid import describe_layout
from jalapeno.report.pareto import FRONTS, X_COLUMN, fronts_by_group
from jalapeno.report.store import ResultStore
from jalapeno.report.sweep import make_enricher, read_meta

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;color:#222;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.25rem;border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f5f5f5}td.n,th.n{text-align:right}.muted{color:#777}.warn{background:#fff4d6;padding:.4rem .6rem;border-left:4px solid #e0a800}.cards{display:flex;flex-wrap:wrap;gap:1rem}
.card{border:1px solid #ddd;border-radius:6px;padding:.75rem;flex:1 1 340px;font-size:.85rem}.card h3{margin:.1rem 0 .4rem}
img{max-width:100%}code{background:#f5f5f5;padding:0 .2rem}details{margin:.5rem 0}
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return "–"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 10 ** digits else f"{v:.{digits}g}"
    return str(v)


def _src(s: str) -> str:
    """A source string with its URLs made into short links (host and first path parts; full URL on hover)."""
    parts = re.split(r"(https?://[^\s);,]+)", s or "")
    out = []
    for p in parts:
        if p.startswith("http"):
            short = "/".join(p.split("://", 1)[1].split("/")[:3])
            out.append(f'<a href="{_e(p)}" title="{_e(p)}">{_e(short)}…</a>')
        else:
            out.append(_e(p))
    return "".join(out)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Iterable[int] = ()) -> str:
    """An HTML table; ``numeric`` columns are right-aligned. Cells are already-escaped HTML."""
    num = set(numeric)
    h = "".join(f'<th class="{"n" if i in num else ""}">{_e(x)}</th>' for i, x in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"n" if i in num else ""}">{c}</td>' for i, c in enumerate(r)) + "</tr>" for r in rows
    )
    return f"<table><tr>{h}</tr>{body}</table>"


# ---------------------------------------------------------------------------------------------------------
def summary_rows(rows: Sequence[Mapping]) -> list[list[str]]:
    groups: dict[tuple, list[Mapping]] = defaultdict(list)
    for r in rows:
        if r.get("status") == "ok":
            groups[(r["model"], r["hardware"])].append(r)
    out = []
    for (model, hw), rs in sorted(groups.items()):
        def best(col: str, maximize: bool = True) -> Mapping | None:
            c = [r for r in rs if _num(r.get(col)) is not None]
            if not c:
                return None
            return (max if maximize else min)(c, key=lambda r: _num(r.get(col)))

        def cell(col: str, maximize: bool = True, digits: int = 4) -> str:
            b = best(col, maximize)
            if b is None:
                return "–"
            return f'{_fmt(_num(b.get(col)), digits)} <span class="muted">{_e(describe_layout(b))} @{b["concurrency"]}</span>'

        out.append([
            _e(model), _e(hw), _e(" / ".join(sorted({row_confidence(r)[0] for r in rs}))), str(len(rs)),
            cell("output_throughput_per_chip"), cell(X_COLUMN), cell("usd_per_mtok", maximize=False),
            cell("output_tokens_per_mw"), cell("output_tokens_per_joule"),
        ])
    return out


def row_confidence(r: Mapping) -> tuple[str, str]:
    """(label, status) of a result row: its ``confidence`` columns, else looked up in the catalogue (rows of a
    sweep compacted before the columns existed), else unknown."""
    if r.get("confidence"):
        return str(r["confidence"]), str(r.get("confidence_status") or "")
    try:
        from jalapeno.hardware.confidence import confidence_columns

        c = confidence_columns(r)
        return c["confidence"], c["confidence_status"]
    except Exception:
        return "unknown", ""


def confidence_warning(rows: Sequence[Mapping]) -> str:
    """A paragraph naming the uncalibrated chips of a sweep (empty when there are none)."""
    weak = sorted({str(r["hardware"]) for r in rows if row_confidence(r)[1] == "uncalibrated"})
    if not weak:
        return ""
    return (f"<p class='warn'><b>Confidence:</b> {_e(', '.join(weak))} {'is' if len(weak) == 1 else 'are'} "
            "<b>uncalibrated</b>: no measured serving point has checked their parameters, so their numbers are "
            "roofline estimates; compare them with calibrated or transferred chips with care (docs/fidelity.md).</p>")


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) or math.isinf(x) else x


def pareto_png(rows: Sequence[Mapping], model: str) -> str:
    """Base64 PNG: the three fronts for one model, one line per chip (all points faint, the front bold)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.get("model") == model and r.get("status") == "ok"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    labels = {
        "throughput_per_chip": "output tok/s per chip",
        "throughput_per_mw": "output tok/s per MW provisioned",
        "usd_per_mtok": "$ per million output tokens",
    }
    chips = sorted({str(r["hardware"]) for r in ok})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (name, (ycol, maximize)) in zip(axes, FRONTS.items()):
        fronts = fronts_by_group(ok, ycol, maximize, group_by=("hardware",))
        for i, chip in enumerate(chips):
            col = colors[i % len(colors)]
            pts = [(r.get(X_COLUMN), r.get(ycol)) for r in ok if r["hardware"] == chip and _num(r.get(ycol)) is not None]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, alpha=0.25, color=col)
            f = fronts.get((chip,), [])
            if f:
                ax.plot([r[X_COLUMN] for r in f], [r[ycol] for r in f], "-o", ms=4, color=col, label=chip)
        ax.set_xlabel("tokens/s/user (1000 / median TPOT)")
        ax.set_ylabel(labels[name])
        ax.grid(alpha=0.3)
        if not maximize:
            ax.set_yscale("log")
    if chips:
        axes[0].legend(fontsize=8)
    fig.suptitle(model)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def chip_card(key: str, prices: Mapping[str, float]) -> str:
    try:
        from jalapeno.hardware import get_chip

        c = get_chip(key)
    except Exception:
        return f'<div class="card"><h3>{_e(key)}</h3><p class="muted">not in the hardware catalogue</p></div>'
    rows: list[list[str]] = []

    def fact(label: str, f: Any, unit: str) -> None:
        if f is None:
            return
        rows.append([_e(label), f"{_fmt(f.value)} {unit}" if f.value is not None else "unknown", _e(f.status), _src(f.source)])

    for dt, f in c.compute_tflops.items():
        fact(f"{dt} dense", f, "TFLOPS")
    for lv in c.memory:
        fact(f"{lv.name} capacity", lv.capacity_gb, "GB")
        fact(f"{lv.name} bandwidth", lv.bandwidth_tbps, "TB/s")
    fact(f"scale-up ({c.scale_up.topology}, {c.scale_up.domain_size or '–'} chips)", c.scale_up.bandwidth_gbps, "GB/s/dir")
    if c.scale_out is not None:
        fact("scale-out", c.scale_out.bandwidth_gbps, "GB/s/dir")
    fact("TDP", c.power.tdp_w, "W")
    fact("loaded power", c.power.loaded_w, "W")
    fact("facility overhead", c.power.facility_overhead_w, "W")
    if c.price is not None:
        fact("price", c.price.usd_per_hour, "$/chip-h")
    cal = c.calibration
    conf = f"<p>confidence: <b>{_e(cal.label())}</b>{' — ' + _e(cal.note) if cal.note else ''}</p>"
    over = [v for k, v in prices.items() if k.lower() in {c.key, *c.aliases}]
    extra = f"<p>price overridden: ${over[0]:g}/chip-hour</p>" if over else ""
    return (
        f'<div class="card"><h3>{_e(c.name)}</h3><p class="muted">{_e(c.vendor)} · status {_e(c.status)} · '
        f"system of {c.system_size}</p><p>{_e(c.description)}</p>{conf}{extra}"
        + _table(["item", "value", "status", "source"], rows, numeric=[1])
        + "</div>"
    )


def assumptions(chips: Sequence[str], meta: Mapping) -> str:
    pue = meta.get("pue", DEFAULT_PUE)
    prices = meta.get("prices") or {}
    rows = []
    eff_rows = []
    for key in chips:
        try:
            g = chip_group(key, 1, prices)
            from jalapeno.hardware import get_chip

            ef = get_chip(key).efficiency
        except Exception:
            continue
        rows.append([
            _e(key), _fmt(g.usd_per_hour), _src(g.price_source), _fmt(g.tdp_w), _fmt(g.facility_overhead_w),
            _src(g.overhead_source if g.overhead_source != "default" else f"default {DEFAULT_OVERHEAD_FRACTION:g} × TDP"),
        ])
        comp = ", ".join(f"{k} {v:g}" for k, v in ef.compute.items()) or f"default {ef.compute_default:g}"
        mem = ", ".join(f"{k} {v:g}" for k, v in ef.memory.items()) or f"default {ef.memory_default:g}"
        eff_rows.append([_e(key), _e(comp), _e(mem), _fmt(ef.scale_up), _fmt(ef.step_overhead_us), _src(ef.source)])
    slo = (meta.get("spec") or {}).get("slo") or {}
    return (
        f"<p>PUE <b>{pue:g}</b> (default {DEFAULT_PUE:g}; <code>--pue</code>). Tokens per MW = output tok/s ÷ "
        "(chips × (TDP + facility overhead) × PUE) × 10⁶. $/Mtok = chips × price per chip-hour ÷ (output tokens per "
        "hour ÷ 10⁶) × compliance factor, compliance factor = 1 ÷ share of requests meeting the SLOs "
        f"(SLOs of this sweep: TTFT {_e(slo.get('ttft_ms') or 'none')} ms, TPOT {_e(slo.get('tpot_ms') or 'none')} ms).</p>"
        + "<h3>Prices and power</h3>"
        + _table(["chip", "$/chip-hour", "price source", "TDP W", "facility overhead W", "overhead source"], rows, numeric=[1, 3, 4])
        + "<h3>Efficiencies (fractions of vendor peak the cost model assumes)</h3>"
        + _table(["chip", "compute", "memory", "scale-up", "step overhead µs", "source"], eff_rows, numeric=[3, 4])
    )


RESULT_COLUMNS = (
    "model", "hardware", "confidence", "layout", "weights", "kv", "isl", "osl", "concurrency", "num_chips", "status",
    "output_throughput_per_chip", X_COLUMN, "median_ttft_ms", "median_tpot_ms", "usd_per_mtok",
    "output_tokens_per_mw", "output_tokens_per_joule", "slo_attainment", "error",
)


def render(rows: Sequence[Mapping], meta: Mapping, title: str | None = None) -> str:
    spec = meta.get("spec") or {}
    title = title or f"Jalapeño sweep report — {spec.get('name', 'sweep')}"
    ok = [r for r in rows if r.get("status") == "ok"]
    bad = [r for r in rows if r.get("status") != "ok"]
    models = sorted({str(r["model"]) for r in ok})
    chips = sorted({str(r["hardware"]) for r in rows} | {str(r["prefill_hardware"]) for r in rows if r.get("prefill_hardware")})
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>{_e(spec.get('description', ''))}</p>",
        f"<p class='muted'>{len(rows)} points: {len(ok)} ok, {len(bad)} skipped or failed. Written {_e(meta.get('written_at', ''))}. "
        "All numbers are simulated by the jalapeno cost model unless the sweep ran a real backend.</p>",
        "<h2>Summary</h2><p class='muted'>Best value per model and chip, with the layout and concurrency that reached it.</p>",
        _table(
            ["model", "chip", "confidence", "points", "best tok/s/chip", "best tok/s/user", "lowest $/Mtok", "best tok/s/MW", "best tok/J"],
            summary_rows(rows), numeric=range(3, 9),
        ),
        confidence_warning(rows),
        "<h2>Pareto fronts</h2><p class='muted'>Per model: each chip's non-dominated configurations against interactivity "
        "(InferenceX's axes). Faint dots are all points.</p>",
    ]
    for m in models:
        parts.append(f'<h3>{_e(m)}</h3><img alt="Pareto fronts for {_e(m)}" src="data:image/png;base64,{pareto_png(rows, m)}">')
    if bad:
        parts.append("<h2>Skipped and failed points</h2>")
        reasons: dict[tuple, int] = defaultdict(int)
        for r in bad:
            reasons[(r["model"], r["hardware"], describe_layout(r), r["status"], r.get("error"))] += 1
        parts.append(_table(["model", "chip", "layout", "status", "reason", "points"],
                            [[_e(k[0]), _e(k[1]), _e(k[2]), _e(k[3]), _e(k[4]), str(n)] for k, n in sorted(reasons.items(), key=str)], numeric=[5]))
    parts.append("<h2>Chips</h2><div class='cards'>" + "".join(chip_card(c, meta.get("prices") or {}) for c in chips) + "</div>")
    parts.append("<h2>Assumptions</h2>" + assumptions(chips, meta))
    parts.append(f"<h2>All results</h2><details><summary>{len(rows)} rows</summary>")
    table_rows = []
    for r in rows:
        table_rows.append([_e(describe_layout(r)) if c == "layout" else _e(row_confidence(r)[0]) if c == "confidence"
                           else _e(_fmt(r.get(c))) for c in RESULT_COLUMNS])
    parts.append(_table(RESULT_COLUMNS, table_rows, numeric=range(6, len(RESULT_COLUMNS) - 1)) + "</details>")
    parts.append("<p class='muted'>Generated by <code>jalapeno report</code>. Query the data with DuckDB: "
                 "<code>SELECT * FROM 'results.parquet'</code>.</p></body></html>")
    return "\n".join(parts)


def write_report(out_dir: str | Path, out_file: str | Path | None = None) -> Path:
    store = ResultStore(out_dir)
    if not store.results_path.exists() and not store.parts.is_dir():
        raise SpecError(f"{out_dir}: no results.parquet here; run `jalapeno sweep SWEEP.yaml --out {out_dir}` first")
    meta = read_meta(out_dir)
    enrich = make_enricher(meta.get("prices") or {}, meta.get("pue", DEFAULT_PUE))
    rows = [enrich(r) for r in store.rows()]
    rows.sort(key=lambda r: (str(r.get("model")), str(r.get("hardware")), r.get("_order", 0)))
    out = Path(out_file) if out_file else Path(out_dir) / "report.html"
    out.write_text(render(rows, meta), encoding="utf-8")
    return out
