"""``jalapeno roofline``: per-operator roofline of one prefill or decode step of a model on a chip group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from jalapeno.errors import CapacityError, ConfigError
from jalapeno.fmt import num as _num


def _shape(phase: str, batch: int, context: int, window: int | None):
    from jalapeno.perf.shape import StepShape

    if phase == "decode":
        return StepShape.from_lists(decode_ctx=[context] * batch, window=window)
    return StepShape.from_lists(prefill=[(context, 0)] * batch, window=window)


def _op_dict(o) -> dict:
    return {
        "name": o.name, "layers": o.layers, "dtype": o.dtype, "flops": o.flops, "bytes": dict(o.bytes),
        "net_bytes": o.net_bytes, "time_s": o.time_s, "bound": o.bound, "share": o.share,
        "arithmetic_intensity": o.intensity if o.total_bytes else None,
    }


def _si(x: float, unit: str = "") -> str:
    for f, p in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= f:
            return f"{_num(x / f)} {p}{unit}"
    return f"{_num(x)} {unit}".rstrip()


def _time(s: float) -> str:
    if s >= 1:
        return f"{_num(s)} s"
    if s >= 1e-3:
        return f"{_num(s * 1e3)} ms"
    return f"{_num(s * 1e6)} µs"


DpAttention = Annotated[bool, typer.Option("--dp-attention", help="Attention data-parallel over the tp ranks.")]
WeightDtype = Annotated[str, typer.Option("--weight-dtype", help="native | bf16 | fp8 | fp4 | mxfp4 | int4")]
Context = Annotated[int, typer.Option(help="Decode: context per sequence; prefill: prompt tokens per sequence.")]
Plot = Annotated[Path | None, typer.Option("--plot", help="Write a roofline chart (PNG) of both phases.")]
HardwareDir = Annotated[list[Path] | None, typer.Option("--hardware-dir", help="Extra chip YAML directory.")]


def register(app: typer.Typer) -> None:
    @app.command("roofline")
    def roofline(
        model: Annotated[str, typer.Option("--model", "-m", help="Model name, HF id or config.json path.")],
        hardware: Annotated[str, typer.Option("--hardware", "-H", help="Chip key or alias.")],
        tp: Annotated[int, typer.Option(help="Tensor-parallel ranks.")] = 1,
        ep: Annotated[int, typer.Option(help="Expert-parallel ranks (inside the tp group).")] = 1,
        pp: Annotated[int, typer.Option(help="Pipeline stages.")] = 1,
        dp: Annotated[int, typer.Option(help="Data-parallel replicas (per-chip reporting only).")] = 1,
        dp_attention: DpAttention = False,
        weight_dtype: WeightDtype = "native",
        kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="bf16 | fp8")] = "bf16",
        phase: Annotated[str, typer.Option(help="prefill | decode")] = "decode",
        batch: Annotated[int, typer.Option(help="Sequences in the step.")] = 1,
        context: Context = 1024,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON (ops + totals).")] = False,
        plot: Plot = None,
        hardware_dir: HardwareDir = None,
    ) -> None:
        """Roofline of one step: FLOPs, bytes per memory level, network bytes, time and bound per operator."""
        from jalapeno.hardware import get_chip
        from jalapeno.models import load_model
        from jalapeno.perf.model import CostModel
        from jalapeno.perf.types import Parallelism, Precision

        if phase not in ("prefill", "decode"):
            raise ConfigError(f"--phase {phase!r} must be 'prefill' or 'decode'")
        if batch < 1 or context < 1:
            raise ConfigError(f"--batch ({batch}) and --context ({context}) must be at least 1")
        arch = load_model(model)
        chip = get_chip(hardware, hardware_dir) if hardware_dir else get_chip(hardware)
        cm = CostModel(arch, chip, Parallelism(tp=tp, ep=ep, pp=pp, dp=dp, dp_attention=dp_attention),
                       Precision(weights=weight_dtype, kv=kv_dtype))
        shape = _shape(phase, batch, context, arch.attention_window)
        bd = cm.breakdown(shape)
        try:  # KV capacity with an activation reserve sized for this step
            kv_cap: int | str = cm.memory_plan(max_batch_tokens=max(1, shape.tokens)).kv_capacity_tokens
        except CapacityError as exc:
            kv_cap = f"0 ({exc})"
        totals = bd.totals()
        if plot is not None:
            from jalapeno.perf.plot import roofline_chart

            other = "prefill" if phase == "decode" else "decode"
            bds = {phase: bd, other: cm.breakdown(_shape(other, batch, context, arch.attention_window))}
            title = (f"{arch.name} on {cm.chips_per_replica}x{chip.key} ({cm.parallel.describe()}), "
                     f"batch {batch}, context {context}")
            roofline_chart(cm, bds, plot, title=title)
        if as_json:
            out = {
                "model": arch.name, "hardware": chip.key, "parallelism": cm.parallel.describe(),
                "num_chips": cm.num_chips, "chips_per_replica": cm.chips_per_replica, "phase": phase,
                "batch": batch, "context": context, "weight_dtypes": cm.weight_dtypes,
                "weights_location": cm.weight_location, "kv_capacity_tokens": kv_cap,
                "ops": [_op_dict(o) for o in bd.ops], **totals,
            }
            if plot is not None:
                out["plot"] = str(plot)
            typer.echo(json.dumps(out, indent=2))
            return
        _print_table(cm, bd, kv_cap, phase, batch, context, plot)


_SHORT_BOUND = {"memory": "mem", "compute": "comp", "network": "net", "overhead": "ovh"}


def _print_table(cm, bd, kv_cap, phase, batch, context, plot) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    c = Console()
    narrow = c.width < 120  # an 80-column terminal: fewer columns, no borders, short words
    levels = sorted({k for o in bd.ops for k in o.bytes})
    t = Table(title=f"{cm.model.name} on {cm.chips_per_replica}x{cm.chip.key} ({cm.parallel.describe()}) — {phase}, "
                    f"batch {batch}, context {context}; weights in {cm.weight_location}",
              box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, collapse_padding=narrow, pad_edge=not narrow)
    cells = {
        "op": lambda o: o.name,
        "layers": lambda o: str(o.layers or ""),
        "dtype": lambda o: o.dtype,
        "FLOPs": lambda o: _si(o.flops) if o.flops else "",
        **{f"bytes {lv}": (lambda o, lv=lv: _si(o.bytes[lv], "B") if o.bytes.get(lv) else "") for lv in levels},
        "net bytes": lambda o: _si(o.net_bytes, "B") if o.net_bytes else "",
        "FLOP/B": lambda o: _num(o.intensity) if o.total_bytes else "",
        "time": lambda o: _time(o.time_s),
        "bound": lambda o: _SHORT_BOUND.get(o.bound, o.bound) if narrow else o.bound,
        "share": lambda o: f"{o.share:.1%}",
    }
    rows = {col: [f(o) for o in bd.ops] for col, f in cells.items()}
    cols = [col for col in cells if any(rows[col]) and not (narrow and col in ("layers", "dtype"))]
    for col in cols:
        t.add_column(col, justify="left" if col in ("op", "bound", "dtype") else "right", no_wrap=True)
    for i in range(len(bd.ops)):
        t.add_row(*[rows[col][i] for col in cols])
    c.print(t)
    tot = bd.totals()
    cap = f"{kv_cap:,}" if isinstance(kv_cap, int) else kv_cap
    c.print(
        f"step_time_s {_num(tot['step_time_s'], 4)}  flops {_si(tot['flops'])}  bytes {_si(tot['bytes'], 'B')}  "
        f"arithmetic_intensity {_num(tot['arithmetic_intensity'])} FLOP/B  energy_j {_num(tot['energy_j'], 4)}  "
        f"avg_power_w {_num(tot['avg_power_w'], 4)} ({cm.chips_per_replica} chips)  "
        f"tokens_per_s {_num(tot['tokens_per_s'], 4)}  joules_per_token {_num(tot['joules_per_token'], 4)}  "
        f"kv_capacity_tokens {cap}"
    )
    if plot is not None:
        c.print(f"roofline chart written to {plot}", markup=False)
