"""Chips without serving calibration, checked against published single-stream figures (docs/fidelity.md,
section "Chips without serving calibration").

    python benchmarks/nongpu_check.py            # predict every check with the catalogue as it is
    python benchmarks/nongpu_check.py --fit      # also print the per-layer latency each FIT row implies
    python benchmarks/nongpu_check.py --write    # and rewrite the section in docs/fidelity.md (nongpu_check.md)

Each check simulates one request stream (closed loop at concurrency 1, ISL 1024 / OSL 512, the engine's token
budget 256 tokens so small-SRAM chips can hold the model) with ``jalapeno simulate``'s code path and compares the
predicted tokens/s per user (1000 / median TPOT) with the published figure. ``role`` says how a row is used:
``fit`` = the one figure a chip's named parameter (``efficiency.layer_overhead_us``) was fitted to,
``held-out`` = a published figure of the same chip not used in the fit, ``roofline`` = no published figure: the
prediction and its share of the chip's memory roofline only (what the doc flags). Single-stream decode of a
weight-resident model is ``step_overhead + layers x layer_overhead + roofline``, so the fit is closed form:
``layer_overhead = (1 / published - TPOT without it) / layers``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from jalapeno.sim.scenario import Scenario, run_scenario
from jalapeno.errors import JalapenoError
from jalapeno.hardware import get_chip
from jalapeno.models import load_model

TECHPOWERUP = "https://techpowerup.com/news-tags/Processor?page=3"  # [S20] of hardware-facts.md
CEREBRAS = "https://cerebras.ai/blog/introducing-cerebras-inference-ai-at-instant-speed"


@dataclass(frozen=True)
class Check:
    chip: str
    model: str
    tp: int = 1
    pp: int = 1
    ep: int = 1
    precision: str = "native"
    published: float | None = None  # tokens/s per user, single stream
    what: str = ""  # what was published, and the proxy model when ours differs
    source: str = ""
    role: str = "roofline"  # fit | held-out | roofline


CHECKS: tuple[Check, ...] = (
    Check("cerebras-wse3", "llama-3.1-8b", published=1800, role="fit", source=CEREBRAS,
          what="Llama 3.1 8B, native 16-bit weights, one CS-3 (Cerebras Inference launch, Aug 2024)"),
    Check("groq-lpu", "llama-3.1-70b", tp=16, pp=32, precision="fp8", published=300, role="fit", source=TECHPOWERUP,
          what="Llama 2 70B (proxy: Llama-3.1-70B, same 80 layers / 8192 hidden / GQA-8), 8-bit weights: the "
               "reported ~576-chip deployment holds 132 GB of SRAM, too little for 138 GB of 16-bit weights"),
    Check("groq-lpu", "llama-3.1-8b", tp=8, pp=16, published=750, role="held-out", source=TECHPOWERUP,
          what="Llama 2 7B (proxy: Llama-3.1-8B, same 32 layers / 4096 hidden)"),
    Check("groq-lpu", "mixtral-8x7b", tp=16, pp=32, published=480, role="held-out", source=TECHPOWERUP,
          what="Mixtral 8x7B"),
    Check("groq-lp30", "llama-3.1-8b", tp=8, pp=8),
    Check("tpu-v5e", "llama-3.1-8b", tp=2),
    Check("tpu-v6e", "llama-3.1-8b"),
    Check("tpu-v7", "llama-3.1-8b"),
    Check("tpu-8t", "llama-3.1-8b"),
    Check("tpu-8i", "llama-3.1-8b"),
    Check("trainium2", "llama-3.1-8b"),
    Check("inferentia2", "llama-3.1-8b"),
    Check("mtia-v2", "llama-3.1-8b"),
    Check("jalapeno", "llama-3.1-8b"),
    Check("h200", "llama-3.1-8b"),  # the calibrated reference: what a fitted per-layer overhead does
)


def scenario(c: Check) -> Scenario:
    return Scenario(model=c.model, hardware=c.chip, tp=c.tp, pp=c.pp, ep=c.ep, precision=c.precision, isl=1024,
                    osl=512, concurrency=1, num_prompts=4, max_num_seqs=1, max_num_batched_tokens=256)


def predict(c: Check) -> float:
    """Predicted tokens/s per user (1000 / median TPOT) of a single stream."""
    return float(run_scenario(scenario(c))["median_interactivity"])


def roofline_share(c: Check, tok_s: float) -> float:
    """Share of the memory roofline the prediction reaches: (weight bytes per chip / achievable-free peak
    bandwidth of the level holding them) / TPOT."""
    from jalapeno.sim.scenario import _cost_model

    cm = _cost_model(scenario(c), load_model(c.model), c.chip, c.tp, c.ep, False)
    plan = cm.memory_plan(max_batch_tokens=256)
    lv = get_chip(c.chip).level(plan.weight_location)
    t_min = plan.weight_bytes_per_chip * c.pp / (float(lv.bandwidth_tbps) * 1e12)  # stages run one after another
    return t_min * tok_s


def fitted_layer_overhead_us(c: Check, tok_s: float) -> float:
    """The per-layer latency that makes the prediction equal the published figure (closed form)."""
    chip = get_chip(c.chip)
    layers = load_model(c.model).num_layers
    tpot0 = 1.0 / tok_s - layers * chip.efficiency.layer_overhead_us * 1e-6
    return (1.0 / float(c.published) - tpot0) / layers * 1e6


def table_lines(fit: bool = False) -> list[str]:
    """The markdown table of every check (``fit``: also the per-layer latency each fit row implies)."""
    out = ["| chip | confidence | model | layout | published tok/s/user | predicted | pred / pub | "
           "share of memory roofline | role | what was published (source) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for c in CHECKS:
        lay = f"tp{c.tp}" + (f" pp{c.pp}" if c.pp > 1 else "") + (f" {c.precision}" if c.precision != "native" else "")
        try:
            tok_s = predict(c)
        except JalapenoError as exc:
            out.append(f"| {c.chip} | – | {c.model} | {lay} | – | {exc} | | | {c.role} | |")
            continue
        ratio = f"{tok_s / c.published:.2f}" if c.published else "–"
        pub = f"{c.published:,.0f}" if c.published else "none published"
        src = f"{c.what} ({c.source})" if c.source else "–"
        label = get_chip(c.chip).calibration.label()
        n = c.tp * c.pp
        out.append(f"| {c.chip} | {label} | {c.model} | {lay} ({n} chip{'s' if n > 1 else ''}) | {pub} | {tok_s:,.0f} | "
                   f"{ratio} | {roofline_share(c, tok_s):.0%} | {c.role} | {src} |")
        if fit and c.role == "fit":
            out.append(f"    fit: layer_overhead_us = {fitted_layer_overhead_us(c, tok_s):.2f}")
    return out


DOC = Path(__file__).resolve().parents[1] / "docs" / "fidelity.md"
#: the section this script owns in docs/fidelity.md (the last one; benchmarks/fidelity.py keeps it)
HEADING = "## Chips without serving calibration"


def write_section(table: list[str]) -> None:
    """Replace (or append) the section from :data:`HEADING` to the end of docs/fidelity.md."""
    text = DOC.read_text(encoding="utf-8")
    head = text.split(HEADING)[0].rstrip("\n")
    template = (Path(__file__).with_name("nongpu_check.md")).read_text(encoding="utf-8")
    DOC.write_text(head + "\n\n" + template.replace("{table}", "\n".join(table)), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", action="store_true", help="print the per-layer latency each fit row implies")
    ap.add_argument("--write", action="store_true", help=f"write the table into docs/fidelity.md ({HEADING})")
    args = ap.parse_args()
    lines = table_lines(fit=args.fit)
    print("\n".join(lines))
    if args.write:
        write_section([x for x in lines if x.startswith("|")])
        print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
