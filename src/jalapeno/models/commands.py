"""``jalapeno models list`` and ``jalapeno models show``: the model catalogue on the command line."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from jalapeno.errors import ConfigError, UnknownNameError
from jalapeno.models.arch import BYTES_PER_ELEMENT, KV_BYTES_PER_ELEMENT, ModelArch
from jalapeno.models.catalog import list_models, load_model

#: weight formats ``models show`` prices, besides "native"
SHOW_WEIGHT_DTYPES = ("bf16", "fp8", "mxfp4", "int4")


def _experts(a: ModelArch) -> str:
    if not a.num_experts:
        return "-"
    shared = f"+{a.num_shared_experts}s" if a.num_shared_experts else ""
    return f"{a.experts_per_token}/{a.num_experts}{shared}"


def _attention(a: ModelArch) -> str:
    kind = f"MLA {a.num_heads}h" if a.attention == "mla" else f"GQA {a.num_heads}/{a.num_kv_heads}"
    if a.sliding_window and any(a.is_sliding_layer(i) for i in range(a.num_layers)):
        kind += f" SWA{a.sliding_window}"
    if a.num_linear_layers:
        kind += f", GDN linear on {a.num_linear_layers} of {a.num_layers}"
    if a.index_topk:
        kind += f", DSA top-{a.index_topk}"
    return kind


def summary_row(name: str, a: ModelArch) -> dict[str, Any]:
    """One catalogue row (the ``models list --json`` record)."""
    return {
        "name": name,
        "family": a.family,
        "attention": _attention(a),
        "layers": a.num_layers,
        "hidden": a.hidden_size,
        "experts": _experts(a),
        "total_params": a.total_params(),
        "active_params": a.active_params(),
        "native_weight_dtype": a.native_weight_dtype,
        "max_context": a.max_position_embeddings,
    }


def show_record(a: ModelArch, kv_dtype: str = "bf16", context: int | None = None) -> dict[str, Any]:
    """Everything ``models show`` reports, JSON-ready."""
    fields = {f.name: getattr(a, f.name) for f in dataclasses.fields(a) if f.name != "extra"}
    fields["layer_types"] = list(a.layer_types)
    fields["moe_layers"] = list(a.moe_layers)
    fields["rope_scaling"] = {k: v for k, v in dataclasses.asdict(a.rope_scaling).items() if v is not None}
    counts = dataclasses.asdict(a.param_counts())
    weight_bytes = {"native": a.weight_bytes("native")}
    weight_bytes.update({d: a.weight_bytes(d) for d in SHOW_WEIGHT_DTYPES})
    rec: dict[str, Any] = {
        "name": a.name,
        "total_params": a.total_params(),
        "active_params": a.active_params(),
        "active_params_incl_embedding": a.active_params(include_embedding=True),
        "mtp_params": a.mtp_params(),
        "kv_dtype": kv_dtype,
        "context_len": context,
        "kv_bytes_per_token": a.kv_bytes_per_token(kv_dtype, context),
        "kv_bytes_per_sequence": a.kv_bytes(context, kv_dtype) if context else None,
        "kv_layers": a.num_layers - a.num_linear_layers,
        "linear_attention_layers": a.num_linear_layers,
        "state_bytes_per_sequence": a.state_bytes_per_sequence(),
        "indexer_bytes_per_token_layer": a.indexer_bytes_per_token_layer,
        "native_weight_dtype": a.native_weight_dtype,
        "native_quant_scope": a.native_quant_scope,
        "weight_bytes": weight_bytes,
        "active_weight_bytes_native": a.active_weight_bytes("native"),
        "param_counts": counts,
        "arch": fields,
        "extra": {k: v for k, v in a.extra.items() if k != "provenance"},
    }
    prov = a.extra.get("provenance")  # catalogue entries and wrapped config files carry their sources
    if prov:
        rec["provenance"] = {k: prov.get(k) for k in ("model", "sources", "confidence")}
    return rec


def _b(n: float) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def register(app: typer.Typer) -> None:
    models_app = typer.Typer(help="The model catalogue: architectures, parameter counts, KV and weight bytes.",
                             no_args_is_help=True, rich_markup_mode=None)

    @models_app.command("list")
    def list_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON records instead of a table.")):
        """List the shipped models. 'active' excludes the input embedding (see docs/models.md)."""
        rows = [summary_row(n, load_model(n)) for n in list_models()]
        if as_json:
            typer.echo(json.dumps(rows, indent=1))
            return
        t = Table(title="Jalapeño model catalogue (active params exclude the input embedding)")
        for col, just in [("name", "left"), ("family", "left"), ("attention", "left"), ("layers", "right"),
                          ("hidden", "right"), ("k/E", "right"), ("total", "right"),
                          ("active", "right"), ("dtype", "left"), ("max ctx", "right")]:
            t.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
        for r in rows:
            t.add_row(r["name"], r["family"], r["attention"], str(r["layers"]), str(r["hidden"]), r["experts"],
                      _b(r["total_params"]), _b(r["active_params"]), r["native_weight_dtype"],
                      f"{r['max_context'] // 1024}K")
        _console().print(t)

    @models_app.command("show")
    def show_cmd(
        name_or_path: str = typer.Argument(..., help="Catalogue name, HF id, or path to a config.json / its dir."),
        kv_dtype: str = typer.Option("bf16", "--kv-dtype", help="KV-cache storage format: bf16 or fp8."),
        context: int | None = typer.Option(None, "--context", help="Context length (tokens): averages KV "
                                           "bytes per token with sliding-window layers capped at the window."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ):
        """Show one model: parameter counts, KV bytes per token, weight bytes per dtype, every arch field."""
        if kv_dtype not in KV_BYTES_PER_ELEMENT:
            raise UnknownNameError(f"unknown --kv-dtype {kv_dtype!r}; use one of: {', '.join(KV_BYTES_PER_ELEMENT)}")
        if context is not None and context <= 0:
            raise ConfigError(f"--context must be a positive number of tokens, got {context}")
        a = load_model(name_or_path)
        rec = show_record(a, kv_dtype, context)
        if as_json:
            typer.echo(json.dumps(rec, indent=1, default=str))
            return
        c = _console()
        t = Table(title=f"{a.name} ({a.family}, model_type {a.model_type})", show_header=False)
        t.add_column("key")
        t.add_column("value")
        t.add_row("total params", f"{_b(rec['total_params'])} ({rec['total_params']:,})")
        t.add_row("active params", f"{_b(rec['active_params'])} excl. embedding, "
                  f"{_b(rec['active_params_incl_embedding'])} incl.")
        if rec["mtp_params"]:
            t.add_row("MTP module", f"{_b(rec['mtp_params'])} ({a.mtp_layers} layer(s), not in total)")
        ctx = f" avg at {context:,} tokens" if context else ""
        t.add_row(f"KV bytes/token ({kv_dtype}{ctx})", f"{rec['kv_bytes_per_token']:,.0f}")
        if context:
            t.add_row("KV bytes/sequence", _gb(rec["kv_bytes_per_sequence"]))
        if a.num_linear_layers:
            t.add_row("linear-attention state/sequence", f"{_gb(rec['state_bytes_per_sequence'])} "
                      f"({a.num_linear_layers} layers, {a.linear_state_dtype} state; no KV in those layers)")
        t.add_row("native weights", f"{a.native_weight_dtype} (scope {a.native_quant_scope})")
        for d, v in rec["weight_bytes"].items():
            t.add_row(f"weights {d}", _gb(v) + (f"  ({BYTES_PER_ELEMENT[d]:.4g} B/elem)" if d != "native" else ""))
        for k, v in rec["arch"].items():
            if k in ("layer_types", "moe_layers"):
                v = _runs(v)
            t.add_row(k, str(v))
        if "provenance" in rec:
            t.add_row("sources", "\n".join(rec["provenance"]["sources"]))
            t.add_row("confidence", rec["provenance"]["confidence"])
        c.print(t)

    app.add_typer(models_app, name="models")


def _console() -> Console:
    """Rich console; when piped (no terminal) wide enough that tables are not truncated."""
    c = Console()
    return c if c.is_terminal else Console(width=160)


def _runs(values: list) -> str:
    """Run-length summary of a per-layer list, e.g. ``sliding,full x18``."""
    if not values:
        return "-"
    if len(set(values)) == 1:
        return f"{values[0]} x{len(values)}"
    if len(values) % 2 == 0 and values[0::2] == [values[0]] * (len(values) // 2) and \
            values[1::2] == [values[1]] * (len(values) // 2):
        return f"{values[0]},{values[1]} x{len(values) // 2}"
    out, prev, n = [], values[0], 0
    for v in values + [object()]:
        if v == prev:
            n += 1
            continue
        out.append(f"{prev} x{n}")
        prev, n = v, 1
    return ", ".join(out)
