"""The design report: one self-contained HTML page in the sweep report's style (report/html.py)."""

from __future__ import annotations

import base64
import io
from typing import Sequence

from jalapeno.report.html import CSS, _e, _fmt, _table


def _knob_cells(r: dict) -> list[str]:
    k = r.get("knobs", {})
    ph = r.get("physical") or {}
    return [_e(r["key"]), _e(f"{k.get('arch', 'gpu')} {k.get('node', '')}"), _e(_fmt(k.get("fp8_tflops"))), _e(_fmt(k.get("sram_mb"))),
            _e(f"{k.get('stacks', '')} {k.get('memory', '')}"), _e(_fmt(ph.get("area_mm2"))), _e(_fmt(ph.get("peak_w"))),
            _e(_fmt(ph.get("unit_cost_usd")))]


KNOB_HEAD = ["design", "class, node", "FP8 TFLOPS", "SRAM MB", "memory", "area mm²", "peak W", "unit $"]


def _plot(rows: Sequence[dict], front: Sequence[dict], x: str, xlabel: str, title: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.get("status") == "ok"]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.scatter([r[x] for r in ok], [r["usd_per_mtok"] for r in ok], s=10, alpha=0.35, label="designs")
    ax.plot([r[x] for r in front], [r["usd_per_mtok"] for r in front], "o-", color="C3", label="Pareto front")
    for r in front:
        ax.annotate(r["key"], (r[x], r["usd_per_mtok"]), fontsize=6)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("$/Mtok at SLA (geo-mean)")
    ax.set_yscale("log")
    ax.set_title(title, fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def render(spec, rows: Sequence[dict], fronts: dict[str, list[dict]], errors: Sequence[dict], meta: dict) -> str:
    title = f"Jalapeño chip design — {spec.name}"
    plot_title = f"{spec.name}: modelled (physical model + serving simulator), scored on {meta.get('machine', '')}"
    ok = [r for r in rows if r.get("status") == "ok"]
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1><p>{_e(spec.description)}</p>",
        f"<p class='muted'>{len(rows)} designs scored, {len(ok)} feasible. Search: {_e(meta.get('search'))}; "
        f"{_e(meta.get('wall_s', 0))} s wall on {_e(meta.get('machine', ''))}. Every number is modelled: the "
        "physical model (docs/design.md) and the serving simulator; designs are chip YAMLs under chips/.</p>",
        "<h2>Workloads (the judge)</h2>",
        _table(["workload", "model", "ISL", "OSL", "concurrencies", "TTFT SLO ms", "TPOT SLO ms", "weight"],
               [[_e(w.name), _e(w.model), str(w.isl), str(w.osl), _e(w.concurrencies), _e(w.slo.ttft_ms),
                 _e(w.slo.tpot_ms), _e(w.weight)] for w in spec.workloads]),
    ]
    for name, x, label in (("interactivity", "interactivity", "tokens/s/user (geo-mean)"),
                           ("tokens_per_joule", "tokens_per_joule", "output tokens per joule (geo-mean)")):
        front = fronts.get(name, [])
        parts.append(f"<h2>Pareto front: $/Mtok vs {_e(label)}</h2>")
        if front:
            parts.append(f'<img alt="front {name}" src="data:image/png;base64,{_plot(rows, front, x, label, plot_title)}">')
            parts.append(_table(KNOB_HEAD + ["$/Mtok", "tok/s/user", "tok/J", "layouts"],
                                [_knob_cells(r) + [_e(_fmt(r["usd_per_mtok"])), _e(_fmt(r["interactivity"])),
                                                   _e(_fmt(r["tokens_per_joule"])),
                                                   _e("; ".join(f"{w}: {v.get('layout')} c{v.get('concurrency')}"
                                                                for w, v in r.get("workloads", {}).items()))]
                                 for r in front], numeric=range(2, 11)))
        else:
            parts.append("<p>No feasible design.</p>")
    bad = [r for r in rows if r.get("status") != "ok"]
    if bad:
        parts.append(f"<h2>Infeasible designs</h2><details><summary>{len(bad)} designs</summary>")
        parts.append(_table(KNOB_HEAD + ["status", "reason"], [_knob_cells(r) + [_e(r["status"]), _e(r.get("reason"))] for r in bad]))
        parts.append("</details>")
    parts.append("<h2>Physical model against published chips</h2><p class='muted'>Model vs published (train = "
                 "the one chip per architecture class the class's two coefficients are fitted on; the rest held out). docs/design.md has the sources.</p>")
    parts.append(_table(["chip", "class", "set", "area mm² (model / pub.)", "err %", "TDP W (model / pub.)", "err %", "cost $ (model / pub.)", "err %"],
                        [[_e(r["chip"]), _e(r["arch"]), _e(r["set"])] + sum(([_e(f"{_fmt(r[w + '_model'])} / {_fmt(r[w + '_published'])}"),
                                                               _e(_fmt(r[w + "_err_pct"], 2))] for w in ("area_mm2", "tdp_w", "cost_usd")), [])
                         for r in errors]))
    parts.append("<p class='muted'>Generated by <code>jalapeno design</code>.</p></body></html>")
    return "\n".join(parts)
