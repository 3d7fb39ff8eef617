"""Disaggregated InferenceX points (B200, MI355X): how many simulate, and the median |error| of TPOT and TTFT.

    python benchmarks/disagg_fidelity.py [--csv benchmarks/data/calibration-blackwell-amd.csv]
        [--max-requests N] [--workers 2] [--json out.json] [--fit | --fit-prefill]

Every point of the file whose notes say ``disagg=True`` is mapped by ``calibration.to_sim_spec`` (layout parsed
into pools) and predicted by ``calibration.predict.simulate`` (which runs the per-pool scenario of
``calibration.disagg``). Prints markdown tables (by chip, by framework, by concurrency band) for
``docs/fidelity.md``. ``--max-requests`` caps the requests of one point (InferenceX runs 10 x concurrency; the
cap keeps at least 4 x concurrency) so the whole file runs in minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "benchmarks" / "data" / "calibration-blackwell-amd.csv"
COMPARED = ("median_tpot", "median_ttft", "output_tput_per_gpu")


def _predict(args):
    spec, per, ttft_per_slot = args if len(args) == 3 else (*args, None)
    from jalapeno.calibration.disagg import simulate_disagg

    t0 = time.perf_counter()
    try:
        return (simulate_disagg(spec, prompts_per_concurrency=per, ttft_per_slot=ttft_per_slot), None,
                time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - a failure is a result here (counted and named)
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:140]}", time.perf_counter() - t0


def _band(c: int) -> str:
    return "1-16" if c <= 16 else "17-128" if c <= 128 else "129-1024" if c <= 1024 else ">1024"


def _decode_kind(r: dict) -> str:
    """A row's chip, decode pool kind (dp-attention or not, from the layout's ``D:`` part) and MTP."""
    dec = r["layout"].split(";")[-1]
    return (f"{r['chip']} {'dp-attention' if 'DPattn=True' in dec else 'no dp-attention'} decode, "
            f"{'MTP' if r['mtp'] else 'no MTP'}")


def _table(rows: list[dict], key) -> list[str]:
    """Markdown: per group, signed median / median |error| / p90 |error| of TTFT, TPOT and output tok/s per GPU."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[key(r)].append(r)
    out = ["| group | points | TTFT signed | TTFT abs | TTFT p90 | TPOT signed | TPOT abs | TPOT p90 "
           "| tput/GPU signed | tput/GPU abs | tput/GPU p90 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in sorted(groups):
        rs = groups[g]
        cells = []
        for m in ("median_ttft", "median_tpot", "output_tput_per_gpu"):
            e = np.array([r["err"][m] for r in rs if m in r["err"]])
            cells += ([f"{np.median(e):+.0f}%", f"{np.median(np.abs(e)):.0f}%", f"{np.percentile(np.abs(e), 90):.0f}%"]
                      if e.size else ["-"] * 3)
        out.append(f"| {g} | {len(rs)} | " + " | ".join(cells) + " |")
    return out


def _breakdown(items: list, max_concurrency: int = 4) -> list[str]:
    """Markdown: per chip, stack and ISL, the median of each idle-path TTFT component (ms) of the points at
    concurrency <= ``max_concurrency``: the front end's fixed latency and per-prompt-token time, one prefill step
    of the mean prompt, the stack's handoff, the KV wire time; their sum against the measured median TTFT."""
    from jalapeno.calibration.disagg import disagg_scenario
    from jalapeno.models import load_model
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim import scenario as S

    groups: dict[tuple, list] = defaultdict(list)
    for p, s in items:
        if not s.concurrency or s.concurrency > max_concurrency or "median_ttft" not in p.metrics:
            continue
        sc = disagg_scenario(s)
        arch = load_model(sc.model)
        qp, qd = sc.pool("prefill"), sc.pool("decode")
        cm_p, cm_d = S._prefill_pool_model(sc, arch, qp), S._decode_pool_model(sc, arch, qd)
        isl = int(s.isl * (1 + s.range_ratio) / 2)
        link = S._kv_link(cm_p, cm_d, qp.workers, qd.workers)
        groups[(s.chip, s.framework, s.isl)].append((
            cm_p.eff.request_overhead_ms, cm_p.eff.request_overhead_us_per_token * isl * 1e-3,
            cm_p.step(StepShape.from_lists([(isl, 0)])).time_s * 1e3, S.handoff_ms(sc),
            link.transfer_s(isl) * 1e3, p.metrics["median_ttft"] * 1e3))
    out = ["| chip stack | ISL | points | front fixed | front per-token | prefill | handoff | wire | sum | "
           "measured (median) | sum / measured |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (chip, stack, isl), vals in sorted(groups.items()):
        m = np.median(np.array(vals), axis=0)
        tot = float(m[:5].sum())
        out.append(f"| {chip} {stack} | {isl} | {len(vals)} | " + " | ".join(f"{v:.0f}" for v in m[:5])
                   + f" | {tot:.0f} | {m[5]:.0f} | {100 * (tot / m[5] - 1):+.0f}% |")
    return out


def _occupancy(items: list, min_c: int = 32, max_c: int = 1024, min_ttft_s: float = 1.0) -> list[str]:
    """Markdown: Little's law on the measured points (``calibration.disagg.decode_occupancy``) at concurrency
    ``min_c``..``max_c`` whose median TTFT is at least ``min_ttft_s``, by prompt length: how many, the median and
    largest share of the decode pool's recipe slots in use, the median share of the loop waiting for a first token."""
    from jalapeno.calibration.disagg import decode_occupancy

    groups: dict[str, list] = defaultdict(list)
    for p, s in items:
        m = p.metrics
        if (not s.concurrency or not min_c <= s.concurrency <= max_c or m.get("median_ttft", 0) < min_ttft_s
                or "median_tpot" not in m or "output_tput_per_gpu" not in m):
            continue
        o = decode_occupancy(p, s)
        groups[f"{s.isl}/{s.osl}"].append(o)
        groups["all"].append(o)
    out = ["| ISL/OSL | points (TTFT >= 1 s) | with recipe slots | slot share median | slot share max "
           "| waiting / concurrency median |", "|---|---|---|---|---|---|"]
    for g in sorted(groups):
        os_ = groups[g]
        sh = [o.slot_share for o in os_ if o.slot_share is not None]
        cells = [f"{np.median(sh):.2f}", f"{max(sh):.2f}"] if sh else ["-", "-"]
        out.append(f"| {g} | {len(os_)} | {len(sh)} | " + " | ".join(cells)
                   + f" | {np.median([o.waiting / o.concurrency for o in os_]):.2f} |")
    return out


def _decode_gap(items: list, max_c: int = 128) -> list[str]:
    """Markdown: per measured non-MTP point at concurrency <= ``max_c`` (``calibration.disagg.decode_gap``): the decode
    worker's Little's-law batch, the cost model's decode step there against the measured median TPOT (ms), then the
    median per chip, stack and decode layout."""
    from jalapeno.calibration.disagg import decode_gap

    gaps = []
    for p, s in items:
        if s.concurrency and s.concurrency <= max_c:
            g = decode_gap(p, s)
            if g is not None:
                gaps.append((g, s.isl, s.osl))
    out = ["| chip stack | decode pool | ISL/OSL | c | batch per worker | model step ms | measured TPOT ms | gap ms "
           "| measured / model |", "|---|---|---|---|---|---|---|---|---|"]
    groups: dict[str, list] = defaultdict(list)
    for g, isl, osl in sorted(gaps, key=lambda x: (x[0].chip, x[0].stack, x[0].layout, x[0].concurrency)):
        out.append(f"| {g.chip} {g.stack} | {g.layout} | {isl}/{osl} | {g.concurrency} | {g.batch} | "
                   f"{g.model_s * 1e3:.2f} | {g.measured_s * 1e3:.2f} | {g.gap_ms:+.2f} | {g.measured_s / g.model_s:.2f} |")
        groups[f"{g.chip} {g.stack} {g.layout.rsplit(' x', 1)[0]}"].append(g)
    out += ["", "| group | points | median gap ms | median measured / model |", "|---|---|---|---|"]
    for k in sorted(groups):
        gs = groups[k]
        out.append(f"| {k} | {len(gs)} | {np.median([g.gap_ms for g in gs]):+.2f} | "
                   f"{np.median([g.measured_s / g.model_s for g in gs]):.2f} |")
    return out


def _aggregated_decode_gap(points: list, model: str = "deepseek-r1", max_c: int = 8) -> list[str]:
    """Markdown: the ``--decode-gap`` statistic on the AGGREGATED rows of ``points`` (non-MTP ``model`` rows at
    concurrency <= ``max_c``): measured median TPOT against the serving replica's modelled decode step at the
    Little's-law batch, median over each configuration's reruns (the aggregated baseline for the disaggregated pools)."""
    from jalapeno.calibration import Excluded, to_sim_spec
    from jalapeno.models import load_model
    from jalapeno.perf.frameworks import get_framework
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.factory import cost_model_for

    arch = load_model(model)
    groups: dict[str, list] = defaultdict(list)
    for p in points:
        s = to_sim_spec(p)
        m = p.metrics
        if (isinstance(s, Excluded) or s.disagg is not None or s.model != model or s.spec_tokens or not s.concurrency
                or s.concurrency > max_c or "median_tpot" not in m or "median_ttft" not in m):
            continue
        isl, osl = s.isl * (1 + s.range_ratio) / 2, s.osl * (1 + s.range_ratio) / 2
        b = max(1, round(s.concurrency * (osl - 1) * m["median_tpot"] / (m["median_ttft"] + (osl - 1) * m["median_tpot"])))
        L = s.layout
        cm = cost_model_for(arch, s.chip, tp=L.tp, ep=L.ep, dp_attention=L.dp_attention, precision=s.weights,
                            kv=s.kv, framework=get_framework(s.framework).key if s.framework else None)
        t = cm.step(StepShape.from_lists(decode_ctx=[int(isl + osl / 2)] * b)).time_s
        key = (f"{s.chip} {s.framework} TP{L.tp} EP{L.ep}{' dp-attention' if L.dp_attention else ''} | "
               f"{s.isl}/{s.osl} | {s.concurrency}")
        groups[key].append((b, t * 1e3, m["median_tpot"] * 1e3))
    out = ["| chip stack layout | ISL/OSL | c | reruns | batch | model step ms | measured TPOT ms (median) | gap ms |",
           "|---|---|---|---|---|---|---|---|"]
    for k in sorted(groups):
        a = np.median(np.array(groups[k]), axis=0)
        out.append(f"| {k} | {len(groups[k])} | {a[0]:.0f} | {a[1]:.2f} | {a[2]:.2f} | {a[2] - a[1]:+.2f} |")
    return out


def _prefill_load(items: list, run: Path | None, isl: int = 8192, min_c: int = 32, max_c: int = 1024,
                  min_ttft_s: float = 1.0) -> list[str]:
    """Markdown: per measured point at ``isl`` and concurrency ``min_c``..``max_c`` with median TTFT >= ``min_ttft_s``
    (``calibration.disagg.prefill_load``): measured and simulated TTFT and request rate, the prefill pool's price of
    one prompt alone and per prompt in a full batch, the utilisation the measured (and simulated) rate implies at
    those prices, and the requests in prefill per worker by Little's law. ``run``: a ``--json`` file of this
    script (its predictions, by label); without it the simulated columns are blank."""
    from jalapeno.calibration.disagg import prefill_load

    pred = {r["label"]: r["predicted"] for r in json.loads(run.read_text())["rows"]} if run else {}
    out = ["| chip stack | prefill layout | w | MTP | c | TTFT s meas | sim | req/s meas | sim | 1 prompt ms "
           "| per prompt in a batch ms | rho meas (1 prompt) | rho meas (batch) | rho sim (batch) | in prefill per worker |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for p, s in items:
        m = p.metrics
        if (s.isl != isl or not s.concurrency or not min_c <= s.concurrency <= max_c
                or m.get("median_ttft", 0) < min_ttft_s or "output_tput_per_gpu" not in m):
            continue
        pr = pred.get(p.label) or {}
        ld = prefill_load(p, s, pr.get("output_tput_per_gpu"))
        sim_ttft = f"{pr['median_ttft']:.2f}" if pr.get("median_ttft") else "-"
        rows.append((f"{s.chip} {s.framework}", p.col("parallelism").split(";")[0].replace("disagg P: ", ""),
                     s.weights, "y" if s.spec_tokens else "n", s.concurrency,
                     f"{m['median_ttft']:.2f} | {sim_ttft} | {ld.rate:.2f} | "
                     + (f"{ld.sim_rate:.2f}" if ld.sim_rate else "-")
                     + f" | {ld.one_s * 1e3:.0f} | {ld.batch_s * 1e3:.0f} | {ld.rho_one:.2f} | {ld.rho_batch:.2f} | "
                     + (f"{ld.sim_rho:.2f}" if ld.sim_rho is not None else "-") + f" | {ld.in_prefill:.1f} |"))
    for r in sorted(rows):
        out.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]}")
    return out


def _gap(runs: list[Path], isl: int = 1024, min_c: int = 1) -> list[str]:
    """Markdown: per point of the ``--json`` runs ``runs`` (the first is "before"; the labels of the first run) at
    prompt length ``isl`` and concurrency >= ``min_c``: measured TTFT minus each run's simulated TTFT (ms), and that
    gap in units of the measured TPOT (the decode step the SGLang decode loop's iterations cost), with the median
    per chip, stack, decode layout (dp-attention or not) and concurrency band."""
    loaded = [{r["label"]: r for r in json.loads(p.read_text())["rows"]} for p in runs]
    out = ["| chip stack | decode layout | c | MTP | TTFT meas ms | " + " | ".join(
        f"sim {i} ms | gap {i} ms | gap {i} / TPOT" for i in range(len(runs))) + " |",
        "|---|---|---|---|---|" + "---|---|---|" * len(runs)]
    groups: dict[str, list] = defaultdict(list)
    for label, r in sorted(loaded[0].items(), key=lambda kv: (kv[1]["chip"], kv[1]["framework"], kv[1]["concurrency"])):
        m = r["measured"]
        if r["isl"] != isl or r["concurrency"] < min_c or not m.get("median_ttft") or not m.get("median_tpot"):
            continue
        dec = r["layout"].split(";")[-1].strip().replace("D: ", "")
        cells, gaps = [], []
        for run in loaded:
            pr = (run.get(label) or {}).get("predicted") or {}
            if not pr.get("median_ttft"):
                cells.append("- | - | -")
                gaps.append(float("nan"))
                continue
            g = m["median_ttft"] - pr["median_ttft"]
            gaps.append(g / m["median_tpot"])
            cells.append(f"{pr['median_ttft'] * 1e3:.0f} | {g * 1e3:+.0f} | {g / m['median_tpot']:+.1f}")
        out.append(f"| {r['chip']} {r['framework']} | {dec} | {r['concurrency']} | {'y' if r['mtp'] else 'n'} | "
                   f"{m['median_ttft'] * 1e3:.0f} | " + " | ".join(cells) + " |")
        dpa = "DPattn=True" in dec
        groups[f"{r['chip']} {r['framework']} {'dp-attention' if dpa else 'no dp-attention'} decode, "
               f"c {_band(r['concurrency'])}"].append(gaps)
    out += ["", "| group | points | " + " | ".join(f"median gap {i} / TPOT" for i in range(len(runs))) + " |",
            "|---|---|" + "---|" * len(runs)]
    for g in sorted(groups):
        a = np.array(groups[g])
        out.append(f"| {g} | {len(a)} | " + " | ".join(f"{np.nanmedian(a[:, i]):+.1f}" for i in range(len(runs))) + " |")
    return out


def split_sets(all_points: list, split: str = "random:0.5") -> tuple[list, list]:
    """(fit, held-out) disaggregated configurations (deduplicated) of ``all_points``: each stack's configurations
    split on their own (stratified; ``jalapeno.calibration.fit.split_items``, seed 0)."""
    from jalapeno.calibration.disagg import disagg_items
    from jalapeno.calibration.fit import dedupe, split_items

    fit_set, held_set = [], []
    by_stack: dict[str, list] = defaultdict(list)
    for it in dedupe(disagg_items(all_points)):
        by_stack[it[1].framework].append(it)
    for stack in sorted(by_stack):
        f, h = split_items(by_stack[stack], split, seed=0)
        fit_set += f
        held_set += h
    return fit_set, held_set


def point_jobs(points: list, held_keys: set[str] | None = None, *, max_concurrency: int = 0,
               min_per_concurrency: int = 4, max_requests: int = 4096) -> tuple[list, dict]:
    """``([(point, spec, requests per slot)], {reason: points left out})`` for the disaggregated ``points``: only
    the configurations in ``held_keys`` (``repr(config_key)``) when given; none above ``max_concurrency`` (> 0)."""
    from jalapeno.calibration import Excluded, to_sim_spec
    from jalapeno.calibration.fit import config_key

    jobs, excluded = [], defaultdict(int)
    for p in points:
        s = to_sim_spec(p)
        if isinstance(s, Excluded):
            excluded[s.reason] += 1
            continue
        if held_keys is not None and repr(config_key(s)) not in held_keys:
            continue
        if max_concurrency and s.concurrency > max_concurrency:
            excluded[f"concurrency above {max_concurrency} (not run: CPU time)"] += 1
            continue
        per = max(min_per_concurrency, min(s.num_prompts_per_concurrency, max_requests // max(1, s.concurrency)))
        jobs.append((p, s, per))
    return jobs, excluded


def point_errors(p, pred: dict) -> dict[str, float]:
    """Signed % error of each compared metric (:data:`COMPARED`) the point measures and the run predicts."""
    return {m: 100 * (pred[m] / p.metrics[m] - 1) for m in COMPARED if m in p.metrics and m in pred and p.metrics[m] > 0}


def main(argv: list[str] | None = None) -> int:
    from jalapeno.calibration import load_points

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", type=Path, default=CSV)
    ap.add_argument("--max-requests", type=int, default=4096)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sample", type=int, default=0,
                    help="error tables on N points evenly spread over the file (0: all); every point is still "
                         "checked to simulate: its pools built and one request run through them")
    ap.add_argument("--min-per-concurrency", type=int, default=4, help="requests per slot never below this")
    ap.add_argument("--ttft-per-slot", type=int, default=0,
                    help="report each point's median TTFT as a run of this many requests per slot would (InferenceX: "
                         "10), its first wave weighted accordingly (calibration.disagg.weighted_median_ttft); 0: the "
                         "run's plain median")
    ap.add_argument("--max-concurrency", type=int, default=0,
                    help="leave out points above this concurrency (0: none left out); they are counted")
    ap.add_argument("--split", default="random:0.5",
                    help="fit / held-out split of the configurations (jalapeno.calibration.fit.split_items)")
    ap.add_argument("--held-out-only", action="store_true", help="error tables on the held-out configurations only")
    ap.add_argument("--fit", action="store_true",
                    help="fit each stack's kv_handoff_ms on the fit split (points at concurrency <= "
                         "--fit-max-concurrency), print the report JSON and stop")
    ap.add_argument("--fit-max-concurrency", type=int, default=64)
    ap.add_argument("--fit-prefill", action="store_true",
                    help="each stack's prefill_token_ns from the fit split's prefill-saturated points (Little's law "
                         "against the cost model's full prefill step; calibration.disagg.fit_prefill_token_ns; with the EP-only prefill "
                         "workers' prefill_ep_token_ns, keys '<stack>@<weights>/ep-only') and "
                         "dpa_decode_moe_layer_us from its dp-attention decode pools' TPOT (fit_dpa_decode_moe_layer_us), "
                         "the held-out split's the same way as a check; print JSON and stop")
    ap.add_argument("--breakdown", action="store_true",
                    help="idle-system TTFT by component (front end fixed and per token, prefill, handoff, wire) of "
                         "every point at concurrency <= 4 against its measured median TTFT; print a table and stop")
    ap.add_argument("--decode-gap", action="store_true",
                    help="per non-MTP point at concurrency <= --decode-gap-max-c: the cost model's decode step at the decode worker's "
                         "Little's-law batch against the measured TPOT (ms); print tables and stop")
    ap.add_argument("--decode-gap-aggregated", action="store_true",
                    help="the --decode-gap statistic on the file's aggregated DeepSeek-R1 rows (no MTP, concurrency <= 8), "
                         "per configuration: the aggregated baseline; print a table and stop")
    ap.add_argument("--decode-gap-max-c", type=int, default=128, help="--decode-gap: highest concurrency tabled")
    ap.add_argument("--occupancy", action="store_true",
                    help="Little's law on the measured points: the decode pool's recipe slots in use and the share "
                         "of the loop waiting for a first token, at concurrency 32-1024 with TTFT >= 1 s")
    ap.add_argument("--prefill-load", action="store_true",
                    help="Little's law on the prefill side of the 8k-prompt points at concurrency 32-1024 with TTFT >= 1 s "
                         "(calibration.disagg.prefill_load), against the simulation in --run; print a table and stop")
    ap.add_argument("--run", type=Path, help="a --json file of this script, for --prefill-load's simulated columns")
    ap.add_argument("--gap", type=Path, nargs="+",
                    help="--json files of this script (before, after, ...): per 1k-prompt point (--gap-isl), measured "
                         "minus simulated TTFT in ms and in measured TPOTs; print tables and stop")
    ap.add_argument("--gap-isl", type=int, default=1024)
    ap.add_argument("--filter", default="", help="only the points whose label matches this regular expression "
                                                  "(e.g. 'mi355x.*c=(32|64)'), for quick looks")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    if a.gap:
        print("\n".join(_gap(a.gap, a.gap_isl)))
        return 0
    if a.ttft_per_slot < 0:
        ap.error(f"--ttft-per-slot must be >= 0 (got {a.ttft_per_slot})")

    from jalapeno.calibration.disagg import disagg_items, fit_dpa_decode_moe_layer_us, fit_handoff, fit_prefill_token_ns
    from jalapeno.calibration.fit import config_key, dedupe

    all_points = load_points(a.csv)
    fit_set, held_set = split_sets(all_points, a.split)
    if a.breakdown:
        print("\n".join(_breakdown(dedupe(disagg_items(all_points)))))
        return 0
    if a.decode_gap_aggregated:
        print("\n".join(_aggregated_decode_gap(all_points)))
        return 0
    if a.decode_gap:
        print("\n".join(_decode_gap(disagg_items(all_points), a.decode_gap_max_c)))
        return 0
    if a.occupancy:
        print("\n".join(_occupancy(disagg_items(all_points))))
        return 0
    if a.prefill_load:
        print("\n".join(_prefill_load(disagg_items(all_points), a.run)))
        return 0
    if a.fit_prefill:
        print(json.dumps({"prefill_token_ns": {"fit": fit_prefill_token_ns(fit_set),
                                               "held-out": fit_prefill_token_ns(held_set)},
                          "dpa_decode_moe_layer_us": {"fit": fit_dpa_decode_moe_layer_us(fit_set),
                                                      "held-out": fit_dpa_decode_moe_layer_us(held_set)}}, indent=1))
        return 0
    if a.fit:
        def progress(label: str, done: int, total: int) -> None:
            if done == total or done % 10 == 0:
                print(f"  {label}: {done}/{total}", file=sys.stderr, flush=True)

        rep = fit_handoff(fit_set, held_set, max_concurrency=a.fit_max_concurrency, workers=a.workers,
                          progress=progress)
        print(json.dumps(rep, indent=1))
        return 0
    held_keys = {repr(config_key(s)) for _, s in held_set}
    points = [p for p in all_points if "disagg=True" in p.col("notes")]
    if a.filter:
        import re

        points = [p for p in points if re.search(a.filter, p.label)]
    jobs, excluded = point_jobs(points, held_keys if a.held_out_only else None, max_concurrency=a.max_concurrency,
                                min_per_concurrency=a.min_per_concurrency, max_requests=a.max_requests)
    t0 = time.time()
    checked: dict[int, str | None] = {}
    if a.sample:
        step = len(jobs) / a.sample
        picked = sorted({int(i * step) for i in range(a.sample)})
        with ProcessPoolExecutor(a.workers) as ex:  # every point: does it simulate (one request per slot)?
            one = [(replace(s, concurrency=1), 1) for _, s, _ in jobs]  # layout, fit and one request end to end
            for i, (_, err, _) in enumerate(ex.map(_predict, one)):
                checked[i] = err
                print(f"check {i + 1}/{len(jobs)}: {err or 'ok'}", file=sys.stderr, flush=True)
        jobs = [jobs[i] for i in picked]
    res = []
    with ProcessPoolExecutor(a.workers) as ex:
        for (p, s, per), r in zip(jobs, ex.map(_predict, [(s, per, a.ttft_per_slot or None) for _, s, per in jobs])):
            res.append(r)
            print(f"{p.label}: {r[1] or 'ok'} ({r[2]:.0f} s)", file=sys.stderr, flush=True)
    wall = time.time() - t0
    rows, failed = [], defaultdict(int)
    for (p, s, per), (pred, err, dt) in zip(jobs, res):
        if pred is None:
            failed[err] += 1
            continue
        errs = point_errors(p, pred)
        rows.append({"label": p.label, "chip": s.chip, "framework": s.framework, "concurrency": s.concurrency,
                     "isl": s.isl, "osl": s.osl, "layout": p.col("parallelism"), "err": errs, "seconds": dt,
                     "held_out": repr(config_key(s)) in held_keys, "mtp": bool(s.spec_tokens),
                     "measured": {m: p.metrics.get(m) for m in COMPARED}, "predicted": {m: pred.get(m) for m in COMPARED}})
    n = len(points)
    if checked:
        ok = sum(1 for e in checked.values() if e is None)
        failed = defaultdict(int)
        for e in checked.values():
            if e is not None:
                failed[e] += 1
        print(f"disaggregated points: {n}; simulated without error (pools built, one request run): {ok} ({100 * ok / max(n, 1):.1f}%); "
              f"error tables on {len(rows)} evenly spread points")
    else:
        print(f"disaggregated points: {n}; simulated without error: {len(rows)} ({100 * len(rows) / max(n, 1):.1f}%)")
    print(f"excluded before simulation: {sum(excluded.values())}; failed: {sum(failed.values())}; "
          f"wall {wall:.0f} s with {a.workers} workers, <= {a.max_requests} requests per point "
          f"(>= {a.min_per_concurrency} per slot)" + (f"; TTFT as at {a.ttft_per_slot} per slot" if a.ttft_per_slot else ""))
    for k, v in {**excluded, **failed}.items():
        print(f"  {v} x {k}")
    print()
    print("\n".join(_table(rows, lambda r: "all")))
    print()
    print("\n".join(_table(rows, lambda r: f"{'held-out' if r['held_out'] else 'fit'} ({a.split})")))
    print()
    print("\n".join(_table(rows, lambda r: f"{r['chip']} {r['framework']} c {_band(r['concurrency'])}")))
    print()
    print("\n".join(_table(rows, lambda r: r["chip"])))
    print()
    print("\n".join(_table(rows, lambda r: f"{r['chip']} {r['framework']}")))
    print()
    print("\n".join(_table(rows, lambda r: f"c {_band(r['concurrency'])}")))
    print()
    print("\n".join(_table(rows, lambda r: f"ISL/OSL {r['isl']}/{r['osl']}")))
    print()
    print("\n".join(_table(rows, _decode_kind)))
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "excluded": excluded, "failed": failed}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
