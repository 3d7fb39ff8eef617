"""Published chips as design knobs, with their published area, TDP and manufacturing cost: the training set of
the three fitted coefficients (:data:`TRAIN`) and the held-out checks (everything else) of docs/design.md.

Facts from /work/shared/reference/hardware-facts.md unless a URL says otherwise; "n/p" = not published.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jalapeno.design import coefficients as K
from jalapeno.design.physical import DesignKnobs, PhysicalDesign, area_parts, evaluate, memory_totals, power_terms


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
    Published("Groq LPU v1", _k(key="groq-lpu", node="n14", fp8_tflops=750, fp4=False, sram_mb=230, sram_tbps=80,
                                 stacks=0, scale_up_gbps=240),
              725, 300, None,
              "725 mm² (25 x 29 mm) GF 14 nm (Abts et al., 'Think Fast', ISCA 2020); ~300 W (3P); 750 INT8 TOPS as the FP8-class rate"),
    Published("Cerebras WSE-3", _k(key="wse3", node="n5", fp8_tflops=125000, fp4=False, sram_mb=44000, sram_tbps=21000,
                                    stacks=0, scale_up_gbps=0, chiplets=True),
              46225, None, None,
              "46,225 mm² TSMC 5 nm, 44 GB SRAM at 21 PB/s; 125 PF sparse FP16 = 62.5 PF dense FP16 = 125 PF FP8-class; power: ~23 kW per CS-3 system (3P), chip n/p"),
    Published("MTIA v2", _k(key="mtia-v2", node="n5", fp8_tflops=354, fp4=False, sram_mb=256, memory="lpddr5x", stacks=8,
                             tbps_per_stack=0.0256, scale_up_gbps=0, chips_per_node=2),
              421, 90, None, "421 mm² TSMC 5 nm, 90 W TDP, 256 MB SRAM, 128 GB LPDDR5 (~205 GB/s, unverified)"),
    Published("Jalapeño (seed/3P)", _k(key="jalapeno", node="n3", fp8_tflops=2500, sram_mb=2000, sram_tbps=24, stacks=8,
                                        tbps_per_stack=0.875, scale_up_gbps=800),
              840, 700, None,
              "~840 mm² N3 (3P), 700 W rated (seed); compute 2.5 PF FP8, SRAM 2 GB and HBM 7 TB/s are the catalogue's INFERRED values"),
)
#: the chips the three fitted coefficients are fitted on; every other row is held out
TRAIN: tuple[str, ...] = ("H100 SXM",)
#: published chips with none of area, TDP or price published (listed in docs/design.md, not checkable)
NOT_PUBLISHED: tuple[str, ...] = ("TPU v5e", "TPU v6e")


def fit_coefficients(rows: tuple[Published, ...] = PUBLISHED, train: tuple[str, ...] = TRAIN) -> dict[str, float]:
    """Least-squares fit of the two ``fitted`` coefficients on the training chips: compute area per FP8 TFLOPS
    (area equation, linear in it) and energy per FP8 FLOP (TDP equation, linear in it; leakage is sourced)."""
    tr = [r for r in rows if r.name in train]
    # area: published = c · tflops/density + (sram + io), before the chiplet overhead
    a_x, a_y = [], []
    for r in tr:
        k = r.knobs
        _, sram, io = area_parts(k)
        unit = k.fp8_tflops / float(K.LOGIC_DENSITY_REL_N5[k.node].value or 1)  # mm² per unit of the coefficient
        over = (1 + K.c("d2d_fraction")) if (r.area_mm2 or 0) > K.c("reticle_mm2") else 1.0
        a_x.append(unit * over)
        a_y.append((r.area_mm2 or 0) - (sram + io) * over)
    c_area = float(np.dot(a_x, a_y) / np.dot(a_x, a_x))
    # power: published TDP = pJ · flops · e + known (static on the published area, sram, memory, links)
    p_x, p_y = [], []
    for r in tr:
        k = r.knobs
        e = float(K.ENERGY_REL_N5[k.node].value or 1)
        known = power_terms(k, float(r.area_mm2 or 0), _sram_tbps(k), _mem_tbps(k))
        p_x.append(k.fp8_tflops * e)
        p_y.append((r.tdp_w or 0) - known["static"] - known["sram"] - known["memory"] - known["links"])
    pj = float(np.dot(p_x, p_y) / np.dot(p_x, p_x))
    return {"pj_per_fp8_flop_n5": round(pj, 4), "compute_mm2_per_fp8_tflops_n5": round(c_area, 4)}


def _sram_tbps(k: DesignKnobs) -> float:
    return k.sram_tbps if k.sram_tbps is not None else k.sram_mb * K.c("sram_tbps_per_mb")


def _mem_tbps(k: DesignKnobs) -> float:
    return memory_totals(k)[1]


def error_table(rows: tuple[Published, ...] = PUBLISHED) -> list[dict]:
    """Predicted vs published area, TDP and cost for every published chip, with % errors and train/held-out."""
    out = []
    for r in rows:
        # evaluated as chiplets so a design over the reticle still reports its area (the error shows it)
        ph: PhysicalDesign = evaluate(r.knobs.model_copy(update={"chiplets": True}))
        row: dict = {"chip": r.name, "set": "train" if r.name in TRAIN else "held-out"}
        for what, pub, pred in (("area_mm2", r.area_mm2, ph.area_mm2), ("tdp_w", r.tdp_w, ph.peak_w),
                                ("cost_usd", r.cost_usd, ph.unit_cost_usd)):
            row[f"{what}_published"] = pub
            row[f"{what}_model"] = pred
            row[f"{what}_err_pct"] = None if pub is None else 100.0 * (pred - pub) / pub
        out.append(row)
    return out


__all__ = ["PUBLISHED", "TRAIN", "Published", "error_table", "fit_coefficients"]
