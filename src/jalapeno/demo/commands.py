"""``jalapeno demo``: catalogue → a model and a chip → one simulation on two chips → a small sweep → HTML report.

Everything runs on data shipped inside the package (chip YAMLs, model configs, ``report/quick-sweep.yaml``), so a fresh
``pip install`` can run it with no network and no PyTorch.
"""

from __future__ import annotations

from pathlib import Path

import typer



def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        out: Path = typer.Option(Path("jalapeno-demo"), "--out", "-o", help="Directory for the sweep results and report."),
        workers: int = typer.Option(2, "--workers", "-j", help="Local worker processes for the sweep."),
    ) -> None:
        """Tour the stack on embedded defaults: catalogue, a model, a chip, a simulation, a sweep and its report."""
        from rich.console import Console
        from rich.table import Table
        from rich.markup import escape

        from jalapeno.sim.scenario import Scenario, run_scenario
        from jalapeno.hardware import get_chip, list_chips
        from jalapeno.models import load_model
        from jalapeno.report.sweep import QUICK_SWEEP_PATH, run_quick

        con = Console()
        # 1. the chip catalogue
        chips = list_chips()
        t = Table(title=f"1. hardware catalogue: {len(chips)} chips (jalapeno hardware list)")
        for col in ("key", "vendor", "status", "fp8 TFLOPS", "HBM GB", "TB/s", "TDP W"):
            t.add_column(col, justify="right" if col[0].isupper() or col.startswith("fp") else "left")
        for c in chips:
            hbm = c.main_memory
            t.add_row(
                c.key, c.vendor, c.status,
                f"{c.peak_flops('fp8') / 1e12:,.0f}" if c.peak_flops("fp8") else "-",
                f"{float(hbm.capacity_gb):,.0f}" if hbm else "-",
                f"{float(hbm.bandwidth_tbps):.2f}" if hbm else "-",
                f"{float(c.power.tdp_w):,.0f}",
            )
        con.print(t)
        # 2. a model and a chip
        m = load_model("deepseek-r1")
        con.print(
            f"[bold]2. model[/] deepseek-r1 ({m.family}, {m.attention.upper()}): {m.total_params() / 1e9:,.1f}B total, "
            f"{m.active_params() / 1e9:,.1f}B active per token, KV {int(m.kv_bytes_per_token('bf16')):,} B/token (bf16 latent), "
            f"native weights {m.native_weight_dtype}   (jalapeno models show deepseek-r1)"
        )
        j = get_chip("jalapeno")
        sram = j.sram
        con.print(
            f"[bold]   chip[/] {j.name} [{j.status}]: fp8 {j.peak_flops('fp8') / 1e12:,.0f} TFLOPS, "
            + (f"SRAM {float(sram.capacity_gb):g} GB at {float(sram.bandwidth_tbps):g} TB/s, " if sram else "")
            + f"TDP {float(j.power.tdp_w):,.0f} W — an inferred profile   (jalapeno hardware show jalapeno)"
        )
        # 3. one InferenceX point on two chips
        t = Table(title="3. gpt-oss-120b, InferenceX 1k/1k, concurrency 16 (jalapeno simulate)")
        for col in ("chip", "tok/s/chip", "tok/s/user", "median TTFT ms", "median E2E s", "tok/J"):
            t.add_column(col, justify="right" if col != "chip" else "left")
        for hw in ("h200", "jalapeno"):
            r = run_scenario(Scenario(model="gpt-oss-120b", hardware=hw, tp=1, isl=1024, osl=1024, concurrency=16,
                                      num_prompts=48))
            t.add_row(hw, f"{r['output_throughput_per_chip']:,.0f}", f"{r['median_interactivity']:,.0f}",
                      f"{r['median_ttft_ms']:,.0f}", f"{r['median_e2el_ms'] / 1000:,.2f}",
                      f"{r['output_tokens_per_joule']:.2f}" if r.get("output_tokens_per_joule") else "-")
        con.print(t)
        # 4. a small sweep and its report
        con.print(f"[bold]4. sweep[/] {QUICK_SWEEP_PATH.name} -> {escape(str(out))}   (jalapeno sweep examples/quick-sweep.yaml"
                  f" --out {out} && jalapeno report {out})")
        summary, html = run_quick(out, workers=workers)
        con.print(summary.line())
        con.print(f"[bold green]report:[/] {escape(str(html))}  (open it in a browser; no server needed)")
