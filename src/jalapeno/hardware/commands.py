"""``jalapeno hardware list|show``: browse the chip catalogue (built-ins plus user YAML directories)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from jalapeno.hardware.catalog import ENV_VAR, chip_summary, iter_facts, load_catalog
from jalapeno.hardware.schema import ChipSpec, Fact

HardwareDirs = Annotated[
    list[Path] | None,
    # validated by the catalogue (one-line SpecError), not by click, so every bad path reads the same
    typer.Option("--hardware-dir", help=f"Extra directory of chip YAML files (repeatable; also ${ENV_VAR})."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _num(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}" if digits or x >= 100 or float(x).is_integer() else f"{x:,.3g}"


def _fact_str(f: Fact | None, digits: int = 0) -> str:
    return "-" if f is None else _num(f.value, digits)


def _sram_cell(c: ChipSpec, detail: bool) -> str:
    srams = [lv for lv in c.memory if lv.kind == "sram" and lv.capacity_gb.value]
    sram = max(srams, key=lambda lv: float(lv.capacity_gb), default=None)
    if sram is None:
        return "-"
    gb = float(sram.capacity_gb)
    size = f"{gb:g} GB" if gb >= 1 else f"{gb * 1000:g} MB"
    bw = f" @{_num(sram.bandwidth_tbps.value)} TB/s" if sram.bandwidth_tbps.value and detail else ""
    return size + bw + ("" if sram.resident else " (cache)")


def _scale_up_cell(c: ChipSpec, compact: bool) -> str:
    bw, dom = c.scale_up.bandwidth_gbps.value, c.scale_up.domain_size
    return f"{bw or 0:g}x{dom}" if compact else f"{_num(bw)} x {dom}"


def _confidence_cell(c: ChipSpec, detail: bool) -> str:
    cal = c.calibration
    if not detail or cal.status == "uncalibrated":
        return cal.status
    return f"calibrated ({cal.points} pts)" if cal.status == "calibrated" else f"transferred ({cal.transferred_from})"


_MEDIUM = {"bf16 TF": "bf16", "fp8 TF": "fp8", "fp4 TF": "fp4", "HBM GB": "HBM", "TDP W": "TDP",
           "scale-up GB/s x dom": "up GB/s x N"}
_SHORT = {1: _MEDIUM, 0: {**_MEDIUM, "scale-up GB/s x dom": "scale-up"}}  # column headers by terminal-width tier


def _table(chips: list[ChipSpec], width: int) -> Table:
    """The catalogue table. Columns drop out on narrow terminals (name/vendor below 170, status/SRAM below 110)."""
    tier = 2 if width >= 170 else 1 if width >= 110 else 0

    def main_fact(c: ChipSpec, attr: str, digits: int = 0) -> str:
        return _fact_str(getattr(c.main_memory, attr), digits) if c.main_memory else "-"

    columns: list[tuple[str, int, Callable[[ChipSpec], str]]] = [  # (header, minimum tier, cell)
        ("key", 0, lambda c: c.key),
        ("name", 2, lambda c: c.name),
        ("vendor", 2, lambda c: c.vendor),
        ("status", 1, lambda c: c.status),
        ("bf16 TF", 0, lambda c: _fact_str(c.compute_tflops.get("bf16"))),
        ("fp8 TF", 0, lambda c: _fact_str(c.compute_tflops.get("fp8"))),
        ("fp4 TF", 0, lambda c: _fact_str(c.compute_tflops.get("fp4"))),
        ("HBM GB", 0, lambda c: main_fact(c, "capacity_gb")),
        ("TB/s", 0, lambda c: main_fact(c, "bandwidth_tbps", 2)),
        ("SRAM", 1, lambda c: _sram_cell(c, detail=tier == 2)),
        ("scale-up GB/s x dom", 0, lambda c: _scale_up_cell(c, compact=tier == 0)),
        ("TDP W", 0, lambda c: _fact_str(c.power.tdp_w)),
        ("$/h", 0, lambda c: _fact_str(c.price.usd_per_hour if c.price else None, 2)),
        ("confidence", 0, lambda c: _confidence_cell(c, detail=tier == 2)),
    ]
    columns = [col for col in columns if col[1] <= tier]
    rows = [[cell(c) for _, _, cell in columns] for c in chips]
    title = "Jalapeño hardware catalogue (dense peaks; network GB/s per chip per direction)"
    t = Table(title=title if tier else "hardware (dense TFLOPS; GB/s per chip per direction)",
              box=box.HEAVY_HEAD if tier == 2 else box.SIMPLE_HEAD, pad_edge=tier == 2,
              collapse_padding=tier < 2)
    for i, (header, _, _) in enumerate(columns):
        short = header if tier == 2 else _SHORT[tier].get(header, header)
        wraps = header in ("name", "vendor")
        t.add_column(short, justify="left" if header in ("key", "name", "vendor", "status", "confidence") else "right",
                     no_wrap=not wraps, min_width=None if wraps else max([len(r[i]) for r in rows] + [len(short)]))
    for r in rows:
        t.add_row(*r)
    return t


def _plain(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value)) if value else "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) if value else "-"
    return "-" if value is None or value == "" else str(value)


def _show(spec: ChipSpec, origin: Path | None) -> list[Table | str]:
    head = Table(title=escape(f"{spec.name} [{spec.key}]"), show_header=False)
    head.add_column("field")
    head.add_column("value", overflow="fold")
    for field in ("key", "name", "vendor", "status", "aliases", "description", "system_size"):
        head.add_row(field, _plain(getattr(spec, field)))
    head.add_row("file", str(origin) if origin else "-")

    facts = Table(title="Numbers (each with its source and status)")
    facts.add_column("field")
    facts.add_column("value", justify="right")
    facts.add_column("status")
    facts.add_column("source / reasoning", overflow="fold")
    for path, f in iter_facts(spec):
        src = f.source + (f" — {f.note}" if f.note else "")
        facts.add_row(path, _num(f.value) if f.value is not None else "unknown", f.status, src)

    links = Table(title="Networks (GB/s per chip per direction, latency µs per hop)")
    for col in ("link", "topology", "domain", "max hops"):
        links.add_column(col)
    for name, link in (("scale_up", spec.scale_up), ("scale_out", spec.scale_out)):
        if link is not None:
            links.add_row(name, link.topology, str(link.domain_size or "unbounded"), _plain(link.max_hops))

    mem = Table(title="Memory levels")
    for col in ("name", "kind", "resident"):
        mem.add_column(col)
    for lv in spec.memory:
        mem.add_row(lv.name, lv.kind, "yes" if lv.resident else "no (hardware cache; ignored for placement)")

    eff = Table(title="Efficiency (achievable fraction of peak) and energy (pJ)", show_header=False)
    eff.add_column("field")
    eff.add_column("value", overflow="fold")
    for block in (spec.efficiency, spec.energy):
        prefix = "efficiency" if block is spec.efficiency else "energy"
        for name in type(block).model_fields:
            eff.add_row(f"{prefix}.{name}", _plain(getattr(block, name)))
    cal = Table(title=f"Confidence: {spec.calibration.label()} (how the efficiency block was obtained)", show_header=False)
    cal.add_column("field")
    cal.add_column("value", overflow="fold")
    for name in type(spec.calibration).model_fields:
        cal.add_row(f"calibration.{name}", _plain(getattr(spec.calibration, name)))
    out: list[Table | str] = [head, facts, mem, links, eff, cal]
    if spec.notes:
        out.append("Notes:\n" + "\n".join(f"  • {n}" for n in spec.notes))
    return out


def register(app: typer.Typer) -> None:
    """Attach the ``hardware`` sub-command group to the root CLI."""
    hw = typer.Typer(name="hardware", help="Browse the accelerator catalogue (chips as YAML data).",
                     no_args_is_help=True, rich_markup_mode=None)

    @hw.command("list")
    def list_cmd(hardware_dir: HardwareDirs = None, as_json: AsJson = False) -> None:
        """List every chip: peak compute, memory, scale-up network, power and price."""
        cat = load_catalog(hardware_dir)
        chips = [cat[k] for k in sorted(cat)]
        if as_json:
            typer.echo(json.dumps([chip_summary(c) for c in chips], indent=2, ensure_ascii=False))
            return
        console = Console()
        console.print(_table(chips, console.width))

    @hw.command("show")
    def show_cmd(
        name: Annotated[str, typer.Argument(help="Chip key, name or alias, e.g. h200, gb300, jalapeno.")],
        hardware_dir: HardwareDirs = None,
        as_json: AsJson = False,
    ) -> None:
        """Show every field of one chip with its source and status."""
        cat = load_catalog(hardware_dir)
        spec = cat.resolve(name)
        if as_json:
            data = spec.model_dump(mode="json")
            summary = chip_summary(spec)
            # full model first; summary keys added where they do not clash (memory/scale_up keep their Facts)
            data.update({k: v for k, v in summary.items() if k not in data})
            data["calibration"]["label"] = spec.calibration.label()
            data["summary"] = summary
            data["file"] = str(cat.origin.get(spec.key, ""))
            typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
            return
        console = Console()
        for part in _show(spec, cat.origin.get(spec.key)):
            console.print(part)

    @hw.command("probe")
    def probe_cmd(
        out: Annotated[Path | None, typer.Option("--out", help="Directory for the chip YAML (default: "
                                                 "$JALAPENO_CACHE/hardware, where --hardware local looks).")] = None,
        device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
        quick: Annotated[bool, typer.Option("--quick", help="Small sizes, short runs (< 30 s).")] = False,
        key: Annotated[str, typer.Option("--key", help="Chip key of the written YAML.")] = "local",
        served_model: Annotated[str, typer.Option(
            "--served-model", help="Catalogue name or config.json of the model the chip will serve: its decode "
            "steps (random weights) are timed over the long contexts too (CPU, full probe).")] = "smollm2-135m",
    ) -> None:
        """Measure this machine (bandwidth, matmul, engine overheads, caches, power) and write its chip YAML."""
        from jalapeno.hardware.threads import apply_thread_policy
        from jalapeno.models.catalog import load_model

        load_model(served_model)  # an unknown name or a bad config is one line now, not after minutes of probing

        # before torch loads: the engine steps are timed under the thread policy a server runs (what the chip prices)
        policy = apply_thread_policy(serving=True) if device == "cpu" else ""
        from jalapeno.hardware.probe import default_probe_dir, run_probe, write_chip

        console = Console(stderr=True)
        res = run_probe(device, quick, log=console.print, policy_line=policy, served_model=served_model)
        cmd = f"jalapeno hardware probe --device {device}" + (" --quick" if quick else "")
        path = write_chip(res, out or default_probe_dir(), key, cmd)
        for note in res.notes:
            console.print(f"note: {note}")
        console.print(f"next: jalapeno calibrate --probe {path} fits its small-M terms (GEMM efficiency by rows, "
                      "compute/memory overlap) from these measurements (docs/hardware.md)")
        typer.echo(str(path))

    app.add_typer(hw, name="hardware")
