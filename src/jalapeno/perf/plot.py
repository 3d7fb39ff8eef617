"""The classic roofline chart (matplotlib, Agg backend, imported lazily by the CLI)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jalapeno.perf.types import StepBreakdown

_COLORS = {"prefill": "tab:orange", "decode": "tab:blue"}


def roofline_chart(cm, breakdowns: dict[str, StepBreakdown], path: Path | str, title: str = "") -> Path:
    """Attainable FLOP/s per chip vs arithmetic intensity: one roof per compute dtype, one slope per memory
    level, and every compute/memory operator of each phase at (its intensity, its achieved FLOP/s per chip)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chip = cm.chip
    fig, ax = plt.subplots(figsize=(9, 6))
    xs = np.logspace(-2, 5, 400)
    peaks = {d: chip.peak_flops(d) for d in chip.compute_tflops if chip.peak_flops(d) > 0}
    top = max(peaks.values())
    for lv in chip.memory:
        bw = float(lv.bandwidth_tbps) * 1e12
        if bw <= 0:
            continue
        ax.plot(xs, np.minimum(bw * xs, top), "--", lw=1, label=f"{lv.name} {bw / 1e12:g} TB/s"
                + ("" if lv.resident else " (cache)"))
    by_peak: dict[float, list[str]] = {}
    for d, p in peaks.items():
        by_peak.setdefault(p, []).append(d)
    for p, names in sorted(by_peak.items()):
        ax.axhline(p, color="grey", lw=0.8)
        ax.text(xs[0] * 1.2, p * 1.05, f"{'/'.join(names)} {p / 1e12:g} TFLOP/s", fontsize=8, color="dimgrey")
    n = cm.parallel.tp  # chips working on an operator at once (pipeline stages run one after another)
    for phase, bd in breakdowns.items():
        first = True
        for o in bd.ops:
            if o.bound not in ("compute", "memory") or not o.flops or not o.total_bytes or o.time_s <= 0:
                continue
            y = o.flops / n / o.time_s
            ax.scatter(o.intensity, y, color=_COLORS.get(phase, "k"), s=28, zorder=3,
                       label=f"{phase} ops" if first else None, marker="o" if o.bound == "memory" else "s")
            ax.annotate(o.name, (o.intensity, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
            first = False
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(top * 1e-5, top * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("FLOP/s per chip")
    ax.set_title(title or f"roofline: {chip.key}", fontsize=10)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=8, loc="lower right")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
