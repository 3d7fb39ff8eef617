"""Published chips as design knobs, with their published area, TDP and manufacturing cost: the training chip of
each architecture class (:data:`TRAIN`, which the class's two fitted coefficients are fitted on) and the
held-out checks (everything else) of docs/design.md.

Facts from /work/shared/reference/hardware-facts.md unless a URL says otherwise; "n/p" = not published.
"""

from __future__ import annotations

from dataclasses import dataclass

from jalapeno.design import coefficients as K
from jalapeno.design.physical import (
    DesignKnobs, PhysicalDesign, area_parts, evaluate, memory_totals, power_terms, sram_bandwidth_tbps,
)


@dataclass(frozen=True)
class Published:
    """A published chip: its knobs and what was published about its area, TDP and manufacturing cost."""

    name: str
    knobs: DesignKnobs
    area_mm2: float | None
    tdp_w: float | None
    cost_usd: float | None
    source: str


def _k(**kw) -> DesignKnobs:
    return DesignKnobs(**kw)


PUBLISHED: tuple[Published, ...] = (
    Published("H100 SXM", _k(key="h100", node="n4", fp8_tflops=1979, fp4=False, sram_mb=83, memory="hbm3", stacks=5,
                              gb_per_stack=16, tbps_per_stack=0.67, scale_up_gbps=450),
              814, 700, 3320,
              "814 mm² TSMC 4N, 700 W, $3,320 (Raymond James via https://www.techspot.com/news/99839-nvidia-garners-reported-1000-profit-each-h100-gpu.html); SRAM 50 MB L2 + 33 MB L1"),
    Published("MI300X", _k(key="mi300x", node="n5", fp8_tflops=2615, fp4=False, sram_mb=288, memory="hbm3", stacks=8,
                            gb_per_stack=24, tbps_per_stack=0.6625, scale_up_gbps=448, chiplets=True),
              1725, 750, 5300,
              f"1,725 mm² N5/N6 chiplets and ~$5.3K ({K.SA_COST}), 750 W; 256 MB Infinity Cache + 32 MB L2"),
    Published("B200", _k(key="b200", node="n4", fp8_tflops=4500, sram_mb=126, memory="hbm3e", stacks=8, gb_per_stack=24,
                          tbps_per_stack=1.0, scale_up_gbps=900, chiplets=True),
              1600, 1000, 6400, f"2 x ~800 mm² TSMC 4NP, ~$6,400 ({K.SA_B200}); 1,000 W"),
    Published("Groq LPU v1", _k(key="groq-lpu", arch="dataflow", node="n14", fp8_tflops=750, fp4=False, sram_mb=230, sram_tbps=80,
                                 stacks=0, scale_up_gbps=240),
              725, 300, None,
              f"725 mm² (25 x 29 mm) 14 nm (Abts et al., 'Think Fast', ISCA 2020, {K.GROQ_ISCA}); ~300 W (3P); 750 INT8 TOPS (INT8-native MXM, FP16 at 1/4) as the FP8-class rate"),
    Published("Cerebras WSE-3", _k(key="wse3", arch="dataflow", node="n5", fp8_tflops=125000, fp4=False, sram_mb=44000, sram_tbps=21000,
                                    stacks=0, scale_up_gbps=0, chiplets=True),
              46225, None, None,
              "46,225 mm² TSMC 5 nm, 44 GB SRAM at 21 PB/s; 125 PF sparse FP16 = 62.5 PF dense FP16 = 125 PF FP8-class; power: ~23 kW per CS-3 system (3P), chip n/p"),
    Published("MTIA v2", _k(key="mtia-v2", arch="systolic", node="n5", fp8_tflops=354, fp4=False, sram_mb=256, sram_tbps=2.7,
                             memory="lpddr5x", stacks=8, tbps_per_stack=0.0256, scale_up_gbps=0, chips_per_node=2),
              421, 90, None, f"421 mm² TSMC 5 nm, 90 W TDP, 354 INT8/FP8 TOPS, 256 MB SRAM at 2.7 TB/s, 128 GB LPDDR5 at ~205 GB/s ({K.MTIA_BLOG}; bandwidths unverified in hardware-facts.md)"),
    Published("TPU v4i", _k(key="tpu-v4i", arch="systolic", node="n7", fp8_tflops=276, fp4=False, sram_mb=151, memory="hbm3",
                             stacks=1, gb_per_stack=8, tbps_per_stack=0.614, scale_up_gbps=100),
              400, 175, None,
              f"< 400 mm² TSMC 7 nm, 175 W TDP, 138 TFLOPS BF16 = 138 TOPS INT8 (4 MXUs of 128 x 128 at 1.05 GHz), no FP8: "
              f"its array is built for BF16, so in the model's convention (BF16 = FP8 / 2, as every GPU and MTIA) it is a 276 FP8-class TFLOPS array; "
              f"128 MiB CMEM + 16 MiB VMEM, 8 GB HBM2 at 614 GB/s (Jouppi et al., ISCA 2021, {K.TPUV4I}); ICI assumed 100 GB/s"),
    Published("TPU v4", _k(key="tpu-v4", arch="systolic", node="n7", fp8_tflops=550, fp4=False, sram_mb=168, memory="hbm3",
                            stacks=4, gb_per_stack=8, tbps_per_stack=0.3, scale_up_gbps=300),
              600, 192, None,
              f"< 600 mm² TSMC 7 nm, 192 W max power, 275 TFLOPS BF16 = INT8 (8 MXUs at 1.05 GHz; a 550 FP8-class TFLOPS array as TPU v4i), "
              f"128 MiB CMEM + 32 MiB VMEM, 32 GB HBM2 at 1.2 TB/s, 6 ICI links (Jouppi et al., ISCA 2023, {K.TPUV4}; https://glennklockwood.com/garden/tpuv4)"),
    Published("Jalapeño (seed/3P)", _k(key="jalapeno", arch="systolic", node="n3", fp8_tflops=2500, sram_mb=2000, sram_tbps=24, stacks=8,
                                        tbps_per_stack=0.875, scale_up_gbps=800),
              840, 700, None,
              "~840 mm² N3 (3P), 700 W rated (seed), a systolic-array matrix engine (3P); compute 2.5 PF FP8, SRAM 2 GB and HBM 7 TB/s are the catalogue's INFERRED values"),
)
#: the training chip of each architecture class (its two fitted coefficients); every other row is held out.
#: gpu: B200, the generation a 2026 design competes with (an H100-trained GPU class overstates Blackwell's and
#: CDNA 3's TDP by 34-55 %: docs/design.md says why no H100-only fit can reach B200); systolic: MTIA v2, an N5
#: (the reference node) inference ASIC with FP8-class MACs and an official area and TDP; dataflow: Groq LPU v1,
#: the one SRAM-dataflow chip with both area and TDP published (Cerebras publishes no chip power)
TRAIN: dict[str, str] = {"gpu": "B200", "systolic": "MTIA v2", "dataflow": "Groq LPU v1"}
#: published chips with none of area, TDP or price published (listed in docs/design.md, not checkable)
NOT_PUBLISHED: tuple[str, ...] = ("TPU v5e", "TPU v6e")


def fit_coefficients(rows: tuple[Published, ...] = PUBLISHED, train: dict[str, str] | None = None) -> dict[str, dict[str, float]]:
    """Per architecture class, fit its two coefficients on its ONE training chip: compute area per FP8 TFLOPS
    (area equation, linear in it) and energy per FP8 FLOP (TDP equation, linear in it; the rest is sourced)."""
    by_name = {r.name: r for r in rows}
    return {arch: _fit_one(by_name[name]) for arch, name in (train or TRAIN).items()}


def _fit_one(r: Published) -> dict[str, float]:
    k = r.knobs
    _, sram, io = area_parts(k)
    # area: published = c · tflops/density + (sram + io), times the die-to-die overhead when over the reticle
    over = (1 + K.c("d2d_fraction")) if (r.area_mm2 or 0) > K.c("reticle_mm2") else 1.0
    unit = k.fp8_tflops / float(K.LOGIC_DENSITY_REL_N5[k.node].value or 1) * over  # mm² per unit of the coefficient
    c_area = ((r.area_mm2 or 0) - (sram + io) * over) / unit
    # power: published TDP = pJ · flops · e + known (static on the published area, sram, memory, links)
    e = float(K.ENERGY_REL_N5[k.node].value or 1)
    known = power_terms(k, float(r.area_mm2 or 0), sram_bandwidth_tbps(k), memory_totals(k)[1])
    pj = ((r.tdp_w or 0) - known["static"] - known["sram"] - known["memory"] - known["links"]) / (k.fp8_tflops * e)
    return {"pj_per_fp8_flop_n5": round(pj, 4), "compute_mm2_per_fp8_tflops_n5": round(c_area, 4)}


def error_table(rows: tuple[Published, ...] = PUBLISHED) -> list[dict]:
    """Predicted vs published area, TDP and cost for every published chip, with % errors and train/held-out."""
    out = []
    for r in rows:
        # evaluated as chiplets so a design over the reticle still reports its area (the error shows it)
        ph: PhysicalDesign = evaluate(r.knobs.model_copy(update={"chiplets": True}))
        row: dict = {"chip": r.name, "arch": r.knobs.arch, "set": "train" if r.name in TRAIN.values() else "held-out"}
        for what, pub, pred in (("area_mm2", r.area_mm2, ph.area_mm2), ("tdp_w", r.tdp_w, ph.peak_w),
                                ("cost_usd", r.cost_usd, ph.unit_cost_usd)):
            row[f"{what}_published"] = pub
            row[f"{what}_model"] = pred
            row[f"{what}_err_pct"] = None if pub is None else 100.0 * (pred - pub) / pub
        out.append(row)
    return out


__all__ = ["PUBLISHED", "TRAIN", "Published", "error_table", "fit_coefficients"]
