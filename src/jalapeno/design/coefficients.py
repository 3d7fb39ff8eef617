"""Every coefficient of the physical design model, as a sourced :class:`Fact` (docs/design.md).

Status: ``third-party`` / ``announced`` where a public page gives the number, ``inferred`` where it is derived
with the reasoning in ``source``, ``fitted`` for the two coefficients per architecture class solved on that
class's one *training* chip (:data:`jalapeno.design.reference.TRAIN`: B200 for ``gpu``, MTIA v2 for
``systolic``, Groq LPU v1 for ``dataflow``); the other published chips are held out and their errors are
reported in docs/design.md and checked by tests/design/test_physical.py. The class coefficients are in
:data:`ARCH`.
"""

from __future__ import annotations

from jalapeno.hardware.schema import Fact


def _f(value: float, status: str, source: str, note: str = "") -> Fact:
    return Fact(value=value, status=status, source=source, note=note)  # type: ignore[arg-type]


CSET = "https://cset.georgetown.edu/publication/ai-chips-what-they-are-and-why-they-matter/"
DIGITIMES_N3 = "https://www.taiwannews.com.tw/en/news/4728367"
ANANDTECH_D0 = "https://www.anandtech.com/show/16028/better-yield-on-5nm-than-7nm-tsmc-update-on-defect-rates-for-n5"
IEDM_SRAM = "https://vuink.com/post/shfr-d-djvxvpuvc-d-dbet/news/7343/iedm-2022-did-we-just-witness-the-death-of-sram"
SILICONEXPERT = "https://www.siliconexpert.com/blog/tsmc-3nm-wafer/"
HBM_EST = "https://legitlads.com/hub/tools/ai/packaging-assembly/hbm-cost-estimator"
HBM_SPEC = "https://vcores.in/blog/hbm3-high-bandwidth-memory"
SA_COST = "https://siliconanalysts.com/tools/cost-bridge"
SA_B200 = "https://siliconanalysts.com/analysis/nvidia-b200-blackwell-cost-breakdown"
EPOCH = "https://github.com/epoch-research/training-cost-trends"
A100_WP = "https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf"
H100_WP = "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper"
V100_WP = "https://images.nvidia.com/content/volta-architecture/pdf/volta-architecture-whitepaper.pdf"
TPUV4I = "https://parsa.epfl.ch/course-info/cs723/papers/tpuv4i.pdf#page=3"
TPUV4 = "https://arxiv.org/abs/2304.01433"
GROQ_ISCA = "https://groq.com/isca-2020-conference/"
MTIA_BLOG = "https://ai.meta.com/blog/next-generation-meta-training-inference-accelerator-AI-MTIA/"
AMD_MI300 = "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/white-papers/amd-cdna-3-white-paper.pdf"

#: process nodes the model knows (TSMC naming; n14 = GlobalFoundries 14 nm / TSMC 16FF class)
NODES: tuple[str, ...] = ("n3", "n4", "n5", "n7", "n14")

WAFER_USD: dict[str, Fact] = {
    "n3": _f(20000, "third-party", DIGITIMES_N3, "DigiTimes via Taiwan News (2022): ~$20,000 per 3 nm wafer; 2025 reports $25-27k (https://www.trendforce.com/news/?p=46558)"),
    "n4": _f(16988, "inferred", f"inferred: N4/4N/4NP are N5-family nodes; CSET's N5 wafer price {CSET}"),
    "n5": _f(16988, "third-party", CSET, "CSET (Khan & Mann 2020) foundry sale price per 300 mm wafer, 5 nm"),
    "n7": _f(9346, "third-party", CSET, "CSET 2020, 7 nm"),
    "n14": _f(3984, "third-party", CSET, "CSET 2020, 16/12 nm (the 14 nm class)"),
}

DEFECTS_PER_CM2: dict[str, Fact] = {
    "n3": _f(0.10, "inferred", f"inferred: N3 assumed at N5's mature level by 2026 ({ANANDTECH_D0})"),
    "n4": _f(0.10, "inferred", f"inferred: N5 family ({ANANDTECH_D0})"),
    "n5": _f(0.10, "third-party", ANANDTECH_D0, "TSMC symposium 2020: N5 at 0.10-0.11 /cm², heading below 0.10"),
    "n7": _f(0.09, "third-party", ANANDTECH_D0, "TSMC: 0.09 /cm² three quarters after N7 HVM"),
    "n14": _f(0.10, "inferred", "inferred: a mature node at the same <= 0.1 /cm² level TSMC reports for N7/N5"),
}

#: logic density relative to N5 (compute-array area scales as 1/x)
LOGIC_DENSITY_REL_N5: dict[str, Fact] = {
    "n3": _f(1.6, "inferred", f"inferred: TSMC N3 ~300 MTr/mm² vs N5 130-230 (~180) ({SILICONEXPERT}) -> ~1.6x"),
    "n4": _f(1.06, "inferred", "inferred: TSMC N4 is an N5 optical shrink with ~6% smaller die area"),
    "n5": _f(1.0, "inferred", "reference node"),
    "n7": _f(round(54.2 / 826 / (80 / 814 / 1.06), 4), "inferred",
             f"inferred: realised product density, A100 54.2 B transistors on 826 mm² N7 ({A100_WP}) vs H100 80 B on 814 mm² 4N ({H100_WP}) / 1.06 (N4 shrink); "
             "TSMC's marketing ratio (1/1.8) counts dense logic only, real accelerator dies mix SRAM, I/O and wiring"),
    "n14": _f(round(21.1 / 815 / (80 / 814 / 1.06), 4), "inferred",
              f"inferred: realised product density, V100 21.1 B transistors on 815 mm² TSMC 12FFN ({V100_WP}) vs H100 / 1.06 as for n7; "
              "the 14/16/12 nm FinFET class"),
}

#: switching energy relative to N5 at iso-speed (energy per FLOP and per SRAM byte scale with it)
ENERGY_REL_N5: dict[str, Fact] = {
    "n3": _f(0.7, "announced", SILICONEXPERT, "TSMC: N3 'reduce power consumption by up to 30%' vs N5"),
    "n4": _f(0.95, "inferred", "inferred: N4/4NP a few % lower power than N5"),
    "n5": _f(1.0, "inferred", "reference node"),
    "n7": _f(1 / 0.7, "announced", ANANDTECH_D0, "TSMC: N5 'a 15% performance gain or a 30% power reduction' vs N7"),
    "n14": _f(1 / 0.7 / 0.4, "inferred", "inferred: TSMC N7 vs 16FF+ '60% power reduction' at iso-speed (TSMC N7 launch claim)"),
}

#: dense SRAM macro area per MB (1e6 B) incl. periphery, banking and ECC
SRAM_MM2_PER_MB: dict[str, Fact] = {
    "n3": _f(8 / 31.8 * 1.5, "inferred", f"inferred: N3E 31.8 Mib/mm² array density with assist circuits (IEDM 2022, {IEDM_SRAM}) x 1.5 for banking/ECC/periphery of bandwidth-oriented macros"),
    "n4": _f(8 / 31.8 * 1.5, "inferred", f"inferred: N5-family 0.021 µm² bitcell = N3E's ({IEDM_SRAM}), same macro density"),
    "n5": _f(8 / 31.8 * 1.5, "inferred", f"inferred: N5 0.021 µm² bitcell, same as N3E ({IEDM_SRAM}); x 1.5 macro overhead"),
    "n7": _f(8 / 31.8 * 1.5 * 0.027 / 0.021, "inferred", "inferred: N7 HD bitcell 0.027 µm² vs 0.021 (TSMC IEDM 2016/2019), scaled from N5"),
    "n14": _f(8 / 31.8 * 1.5 * 0.064 / 0.021, "inferred", "inferred: 14 nm HD bitcell 0.064 µm² (Samsung/GF 14LPP) vs 0.021, scaled from N5"),
}

#: memory types: bandwidth (TB/s), capacity (GB) per stack/package, energy (pJ/B), price (USD/GB), PHY area (mm²)
MEMORY: dict[str, dict[str, Fact]] = {
    "hbm3": {
        "tbps": _f(0.819, "vendor-peak", HBM_SPEC, "JEDEC HBM3 6.4 Gb/s x 1024 bits"),
        "gb": _f(24, "vendor-peak", HBM_SPEC, "12-Hi"),
        "pj_per_byte": _f(1 / 36e9 * 1e12, "third-party", HBM_EST, "36 GB/s per W"),
        "usd_per_gb": _f(17.5, "third-party", SA_COST, "H100: HBM $1.4K for 80 GB"),
    },
    "hbm3e": {
        "tbps": _f(1.2, "vendor-peak", HBM_SPEC, "9.6 Gb/s x 1024 bits"),
        "gb": _f(36, "vendor-peak", HBM_SPEC, "12-Hi"),
        "pj_per_byte": _f(1 / 42e9 * 1e12, "third-party", HBM_EST, "42 GB/s per W"),
        "usd_per_gb": _f(15.1, "third-party", SA_B200, "B200: HBM 45.3% of ~$6,400 for 192 GB"),
    },
    "hbm4": {
        "tbps": _f(2.0, "announced", "https://yobitel.com/knowledge-base/hbm3e", "JEDEC JESD238D 2048 bits, ~2 TB/s per stack"),
        "gb": _f(48, "announced", "https://yobitel.com/knowledge-base/hbm3e", "16-Hi 48-64 GB"),
        "pj_per_byte": _f(1 / 48e9 * 1e12, "third-party", HBM_EST, "48 GB/s per W"),
        "usd_per_gb": _f(15.1 * 1.65 * 36 / 48, "inferred", "inferred: HBM4 stack cost index 1.65x HBM3E (https://www.eden-insight.com/?p=3314) at 48 vs 36 GB"),
    },
    "lpddr5x": {
        "tbps": _f(0.068, "inferred", "inferred: JEDEC LPDDR5X 8533 MT/s x 64 bits per package = 68 GB/s"),
        "gb": _f(16, "inferred", "inferred: a 16 GB x64 LPDDR5X package (MTIA v2 carries 128 GB LPDDR5, hardware-facts.md)"),
        "pj_per_byte": _f(40, "inferred", "inferred: ~5 pJ/bit for off-package LPDDR5X incl. PHY, vs ~3 for HBM"),
        "usd_per_gb": _f(4, "inferred", "inferred: commodity mobile DRAM, ~1/4 of HBM per GB"),
    },
}
PHY_MM2: dict[str, Fact] = {
    "hbm3": _f(12, "inferred", "inferred: an HBM3 PHY + controller ~10-15 mm² on a 5 nm-class die (six line H100's edges)"),
    "hbm3e": _f(12, "inferred", "inferred: same 1024-bit PHY as HBM3"),
    "hbm4": _f(18, "inferred", "inferred: 2048-bit PHY, ~1.5x HBM3's"),
    "lpddr5x": _f(3, "inferred", "inferred: a x64 LPDDR PHY is ~1/4 of an HBM PHY"),
}

COEF: dict[str, Fact] = {
    "link_pj_per_byte": _f(40, "inferred", "inferred: ~5 pJ/bit SerDes + switch (the catalogue's network energy, docs/hardware.md)"),
    "link_mm2_per_100gbps": _f(5, "inferred", "inferred: 8 x 112G SerDes lanes (~0.6 mm² each at 5 nm) per 100 GB/s per direction"),
    "uncore_mm2": _f(50, "inferred", "inferred: PCIe, management core, clocks, test: ~50 mm² per die"),
    "d2d_fraction": _f(0.05, "inferred", "inferred: die-to-die interface area per chiplet (~5%, Blackwell's 10 TB/s NV-HBI edge)"),
    "reticle_mm2": _f(858, "vendor-peak", "https://igamesnews.com/?p=187344", "26 x 33 mm reticle field"),
    "hbm_footprint_mm2": _f(110, "inferred", "inferred: an HBM package is ~11 x 10 mm on the interposer (JEDEC)"),
    "interposer_usd_per_mm2": _f(750 / (814 + 6 * 110), "third-party", SA_COST,
                                 "H100 CoWoS-S packaging $750 over its 814 mm² die + 6 HBM footprints"),
    "test_assembly_usd": _f(750, "third-party", SA_COST, "test & assembly $920 (H100), $600 (MI300X): mean"),
    "redundancy": _f(0.8, "inferred", "inferred: share of die area repairable by spare cores/rows (H100 ships 132 of 144 SMs); yield applies to the rest"),
    "leak_w_per_mm2": _f(0.1, "inferred", "inferred: static (leakage + always-on) ~0.1 W/mm² at nominal voltage (~12% of H100's 700 W on its 814 mm²; accelerators idle at 15-25% of TDP incl. memory); "
                         "not scaled by node: across the FinFET nodes (16 nm -> 3 nm) leakage per transistor falls about as fast as transistors per mm² rise"),
    "markup": _f(3.0, "inferred", f"inferred: price / manufacturing cost: AMD MI300X ~$15k / $5.3k = 2.8 ({SA_COST}); a custom-ASIC buyer pays a partner margin of that order (NVIDIA's ~8.4x is merchant-GPU pricing)"),
    "system_usd_per_chip": _f(4000, "third-party", EPOCH, "SemiAnalysis DGX H100 BOM via Epoch: $32,010 of non-GPU parts per 8 GPUs"),
    "capital_recovery_per_hour": _f(0.1 / (1 - 1.1**-4) / 8766, "inferred", "inferred: 4-year life at 10% cost of capital (annuity factor 0.3155/yr)"),
    "usd_per_kwh": _f(0.08, "inferred", "inferred: industrial US power ~$0.08/kWh"),
    "typical_compute_share": _f(0.35, "inferred", "inferred: serving-mix utilisation for 'typical' power: compute 35%, memory 80%, SRAM 50%, links 30%"),
}

#: architecture classes (docs/design.md): ``gpu`` -- SIMT: warps, register files, caches, tensor cores fed from
#: registers (H100, B200, MI300X); ``systolic`` -- a programmable matrix-engine ASIC: systolic arrays with vector
#: and scalar cores, a shared on-chip SRAM behind a network-on-chip and HBM/DRAM (TPU, MTIA, Trainium; Jalapeño
#: per 3P coverage, "a systolic-array matrix engine (TPU-like)"); ``dataflow`` -- an SRAM-dataflow chip: simple
#: functional units streaming operands from SRAM banks beside them, no caches or arbiters, weights held on-die
#: (Groq LPU, Cerebras WSE)
ARCH_CLASSES: tuple[str, ...] = ("gpu", "systolic", "dataflow")

_SRAM_NODE = ("SRAM access energy is not scaled by node: Jouppi et al. ISCA 2021 Table 2 ({src}) has an 8 KB read at 10 pJ "
              "(45 nm) vs 7.5 pJ (7 nm) -- 'semiconductor technology advances unequally'").format(src=TPUV4I)
_LARGE = f"Jouppi et al. ISCA 2021 Table 2 ({TPUV4I}): a 1 MB SRAM 64-bit read at 7 nm = 14 pJ = 1.75 pJ/B"
_BANK = f"Jouppi et al. ISCA 2021 Table 2 ({TPUV4I}): an 8 KB SRAM bank 64-bit read at 7 nm = 7.5 pJ = 0.94 pJ/B"

#: per-class coefficients; the two ``fitted`` ones per class are set from :data:`FITTED` below
ARCH: dict[str, dict[str, Fact]] = {
    "gpu": {
        "sram_tbps_per_mb": _f(round(17.2 / 256, 4), "third-party", AMD_MI300,
                               "a GPU's on-die SRAM is mostly last-level cache behind a crossbar: AMD CDNA 3 Infinity Cache 17.2 TB/s peak over 256 MB"),
        "sram_pj_per_byte": _f(1.75, "inferred", f"inferred: {_LARGE} (a cache access pays tags and the crossbar: the large-array figure); {_SRAM_NODE}"),
    },
    "systolic": {
        "sram_tbps_per_mb": _f(round(2.7 / 256, 4), "third-party", MTIA_BLOG,
                               "a shared on-chip SRAM behind the network-on-chip: Meta MTIA v2 2.7 TB/s over 256 MB (hardware-facts.md: unverified); "
                               "the catalogue's inferred Jalapeño has 24 TB/s over 2 GB = 0.012"),
        "sram_pj_per_byte": _f(1.75, "inferred", f"inferred: {_LARGE} (a large shared SRAM read across the NoC); {_SRAM_NODE}"),
    },
    "dataflow": {
        "sram_tbps_per_mb": _f(0.3, "third-party", "https://techpowerup.com/news-tags/Processor?page=3",
                               "SRAM banks beside the functional units: Groq LPU v1 80 TB/s over 230 MB = 0.35; Groq 3 LP30 150 TB/s over 500 MB = 0.30; "
                               "Cerebras WSE-3 21 PB/s over 44 GB = 0.48 (hardware-facts.md): bandwidth grows with banks"),
        "sram_pj_per_byte": _f(0.94, "inferred", f"inferred: {_BANK}; operands stream from the bank next to the unit (Groq's MEM slices "
                               f"beside the MXM, {GROQ_ISCA}), no tags or crossbar; {_SRAM_NODE}"),
    },
}
#: the fitted coefficients per class (jalapeno.design.reference.fit_coefficients on TRAIN; tests re-fit and compare;
#: _TRAIN_CHIP repeats reference.TRAIN for the sources, a test checks they agree)
FITTED: dict[str, dict[str, float]] = {
    "gpu": {"pj_per_fp8_flop_n5": 0.1316, "compute_mm2_per_fp8_tflops_n5": 0.3028},
    "systolic": {"pj_per_fp8_flop_n5": 0.0988, "compute_mm2_per_fp8_tflops_n5": 0.7073},
    "dataflow": {"pj_per_fp8_flop_n5": 0.0497, "compute_mm2_per_fp8_tflops_n5": 0.1483},
}
_TRAIN_CHIP = {"gpu": "B200", "systolic": "MTIA v2", "dataflow": "Groq LPU v1"}
for _a, _vals in FITTED.items():
    for _k, _v in _vals.items():
        ARCH[_a][_k] = _f(_v, "fitted", f"fitted: solved on the {_a} class's one training chip {_TRAIN_CHIP[_a]} (its published area and TDP; "
                          "jalapeno.design.reference.fit_coefficients), the other chips held out (docs/design.md)")


def c(name: str) -> float:
    """A scalar (class-independent) coefficient's value."""
    return float(COEF[name].value or 0.0)


def a(arch: str, name: str) -> float:
    """An architecture-class coefficient's value."""
    return float(ARCH[arch][name].value or 0.0)


def digest() -> str:
    """Hash of every coefficient value: part of each design id, so a resumed search never reuses a score made
    with other coefficients (docs/design.md, 'Outputs')."""
    import hashlib
    import json

    tables = {"coef": COEF, "wafer": WAFER_USD, "d0": DEFECTS_PER_CM2, "density": LOGIC_DENSITY_REL_N5,
              "energy": ENERGY_REL_N5, "sram": SRAM_MM2_PER_MB, "phy": PHY_MM2, **{f"arch.{k}": v for k, v in ARCH.items()},
              **{f"mem.{k}": v for k, v in MEMORY.items()}}
    blob = json.dumps({t: {k: f.value for k, f in tab.items()} for t, tab in tables.items()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:6]
