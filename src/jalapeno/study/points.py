"""Simulated study points: one closed-loop InferenceX point per :class:`Task`, built with the simulator's one
engine factory (:mod:`jalapeno.sim.factory`), run in a process pool."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache

from jalapeno.study.design import BASELINES, CONTEXT, LAYOUTS, Layout, baseline_efficiency

@dataclass(frozen=True)
class Task:
    model: str
    chip: object  # ChipSpec
    series: str  # e.g. "jalapeno", "gb300/catalogue"
    layout: Layout
    isl: int
    osl: int
    concurrency: int
    num_prompts: int
    efficiency: object = None  # Efficiency override or None
    pin: bool | None = None  # sram_pinning override; None = the chip's pin_weights


@lru_cache(maxsize=None)
def _arch(name: str):
    from jalapeno.models import load_model

    return load_model(name)


def simulate(t: Task) -> dict | None:
    """One closed-loop InferenceX point; None when the layout does not fit or is invalid."""
    from jalapeno.errors import JalapenoError
    from jalapeno.sim import build_sim_engine, cost_model_for, run_workload
    from jalapeno.workload import inferencex_workload

    lay = t.layout
    try:
        cm = cost_model_for(_arch(t.model), t.chip, tp=lay.tp, ep=lay.ep, dp_attention=lay.dp_attention,
                            precision=lay.weights, kv="fp8", efficiency=t.efficiency, sram_pinning=t.pin)
        eng = build_sim_engine(cm, in_flight=t.concurrency)
        res = run_workload(eng, inferencex_workload(t.isl, t.osl, concurrency=t.concurrency,
                                                    num_prompts=t.num_prompts))
    except JalapenoError:
        return None
    m = res.metrics(num_chips=cm.chips_per_replica)
    return dict(
        model=t.model, series=t.series, layout=lay.label(), chips=cm.chips_per_replica, isl=t.isl, osl=t.osl,
        concurrency=t.concurrency, tput=m["output_throughput_per_chip"], inter=m["median_interactivity"],
        e2e_s=m["median_e2el_ms"] / 1000, ttft_ms=m["median_ttft_ms"], tpj=m["output_tokens_per_joule"],
        watts=m["avg_power_w_per_chip"], sram_gb=cm.sram_weight_bytes_per_chip / 1e9,
    )


def run_tasks(tasks: list[Task], pool: ProcessPoolExecutor | None) -> list[dict]:
    """Simulate ``tasks`` (the costliest first, for load balance); points that do not fit are dropped."""
    tasks = sorted(tasks, key=lambda t: -t.concurrency * (t.osl + t.isl / 8))
    it = pool.map(simulate, tasks) if pool else map(simulate, tasks)
    return [r for r in it if r is not None]


def tasks_for(model, chip, series, layouts, workloads, concs, factor, eff=None, pin=None) -> list[Task]:
    return [Task(model, chip, series, lay, i, o, c, max(c, int(factor * c)), eff, pin)
            for lay in layouts for (i, o) in workloads for c in concs]


def baseline_points(models, workloads, concs, factor, pool, modes=("catalogue",), context=True) -> list[dict]:
    from jalapeno.hardware import get_chip

    tasks = []
    for m in models:
        for b in BASELINES:
            chip = get_chip(b)
            for mode in modes:
                tasks += tasks_for(m, chip, f"{b}/{mode}", LAYOUTS[m], workloads, concs, factor,
                                   baseline_efficiency(chip, mode))
        if context:
            for c in CONTEXT:
                tasks += tasks_for(m, get_chip(c), c, LAYOUTS[m], workloads[:1], concs, factor)
    return run_tasks(tasks, pool)
