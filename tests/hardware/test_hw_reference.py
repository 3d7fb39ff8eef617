"""Cross-check the built-in YAMLs against the summary table of the project's reference notes.

The table (``/work/shared/reference/hardware-facts.md``, section 0) was written independently of the YAML files;
it is not shipped to users, so the test skips where it is absent.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jalapeno.hardware import load_catalog

FACTS = Path("/work/shared/reference/hardware-facts.md")
GIB = 2**30 / 1e9

ROW_KEY = {
    "H100 SXM": "h100", "H200 SXM": "h200", "B200 (HGX)": "b200", "GB200 (NVL72)": "gb200", "B300 (HGX)": "b300",
    "GB300 (NVL72)": "gb300", "Rubin (VR NVL72)": "vera-rubin", "Groq LPU v1": "groq-lpu", "Groq 3 LP30": "groq-lp30",
    "TPU v5e": "tpu-v5e", "TPU v6e": "tpu-v6e", "TPU7x Ironwood": "tpu-v7", "TPU 8t": "tpu-8t", "TPU 8i": "tpu-8i",
    "MI300X": "mi300x", "MI325X": "mi325x", "MI355X": "mi355x", "Trainium2": "trainium2", "Inferentia2": "inferentia2",
    "Cerebras WSE-3": "cerebras-wse3", "MTIA v2": "mtia-v2", "OpenAI Jalapeño": "jalapeno",
}
NUM = r"\d[\d,]*(?:\.\d+)?"


def _f(s: str) -> float:
    return float(s.replace(",", ""))


def number(cell: str) -> tuple[float, float] | None:
    """First number in a table cell as a (low, high) range; None for '-', 'n/p', 'n/d', ..."""
    c = cell.strip().lstrip("~(").strip('"')
    if not c or not c[0].isdigit():  # '-', 'n/p', 'no NVFP4', 'HBM3E, 6-8 stacks', ...
        return None
    m = re.match(rf"~?({NUM})\s*-\s*~?({NUM})", c)
    if m:
        return _f(m.group(1)), _f(m.group(2))
    m = re.search(NUM, c)
    return (_f(m.group(0)),) * 2 if m else None


def bandwidth_gbps(cell: str) -> float | None:
    m = re.search(rf"({NUM})\s*(GB/s|TB/s)", cell)
    if not m or cell.strip().startswith("n/"):
        return None
    return _f(m.group(1)) * (1000 if m.group(2) == "TB/s" else 1)


def sram(cell: str) -> tuple[float | None, float | None]:
    cap = re.search(rf"({NUM})\s*(MB|GB)", cell)
    bw = re.search(rf"@\s*({NUM})\s*(TB/s|PB/s)", cell)
    gb = None if not cap else _f(cap.group(1)) / (1000 if cap.group(2) == "MB" else 1)
    tbps = None if not bw else _f(bw.group(1)) * (1000 if bw.group(2) == "PB/s" else 1)
    return gb, tbps


def summary_rows() -> list[dict[str, str]]:
    text = FACTS.read_text(encoding="utf-8")
    section = text.split("## 0.", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [h.strip() for h in lines[0].strip("|").split("|")]
    rows = []
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) == len(header):
            rows.append(dict(zip(header, cells)))
    return rows


pytestmark = pytest.mark.skipif(not FACTS.exists(), reason="reference notes not available (not shipped to users)")


def close(mine: float | None, ref: tuple[float, float], tol: float = 0.015, gib: bool = False) -> bool:
    if mine is None:
        return False
    lo, hi = ref
    candidates = [(lo, hi)] + ([(lo * GIB, hi * GIB)] if gib else [])
    return any(a * (1 - tol) <= mine <= b * (1 + tol) for a, b in candidates)


def test_summary_table_matches_catalogue():
    cat = load_catalog()
    rows = summary_rows()
    assert len(rows) >= 20
    checked = 0
    problems = []
    for row in rows:
        key = ROW_KEY.get(row["chip"])
        if key is None:
            problems.append(f"unmapped row {row['chip']}")
            continue
        spec = cat[key]
        for col, dtype in (("BF16 TF", "bf16"), ("FP8 TF", "fp8"), ("FP4 TF", "fp4"), ("INT8 TOPS", "int8")):
            ref = number(row[col])
            if ref is None or ref == (0.0, 0.0):
                continue
            fact = spec.compute_tflops.get(dtype)
            checked += 1
            if not close(fact.value if fact else None, ref):
                problems.append(f"{key} {dtype}: table {row[col]!r} vs {fact.value if fact else None}")
        ref = number(row["HBM GB"])
        if ref is not None:
            checked += 1
            main = spec.main_memory
            if ref == (0.0, 0.0):
                if main is not None:
                    problems.append(f"{key}: table says no HBM, catalogue has {main.name}")
            elif not close(main.capacity_gb.value if main else None, ref, gib=True) and not (
                    # a measured total (nvidia-smi / rocm-smi) below the vendor's binary GB: usable < physical
                    main.capacity_gb.status in ("measured", "inferred")
                    and ref[0] * GIB * 0.9 <= main.capacity_gb.value <= ref[1] * GIB):
                problems.append(f"{key} HBM GB: table {row['HBM GB']!r} vs {main.capacity_gb.value if main else None}")
        ref = number(row["HBM TB/s"])
        if ref is not None:
            checked += 1
            main = spec.main_memory
            if not close(main.bandwidth_tbps.value if main else None, ref):
                problems.append(f"{key} HBM TB/s: table {row['HBM TB/s']!r}")
        bidi = bandwidth_gbps(row["scale-up per chip (bidi)"])
        if bidi is not None:
            checked += 1
            if not close(spec.scale_up.bandwidth_gbps.value, (bidi / 2, bidi / 2)):
                problems.append(f"{key} scale-up: table {bidi} GB/s bidi vs "
                                f"{spec.scale_up.bandwidth_gbps.value} per direction")
        ref = number(row["scale-up domain"])
        if ref is not None:
            checked += 1
            if spec.scale_up.domain_size != ref[0]:
                problems.append(f"{key} domain: table {row['scale-up domain']!r} vs {spec.scale_up.domain_size}")
        ref = number(row["TDP W"])
        if ref is not None and "kW" not in row["TDP W"]:
            checked += 1
            if not close(spec.power.tdp_w.value, ref):
                problems.append(f"{key} TDP: table {row['TDP W']!r} vs {spec.power.tdp_w.value}")
        gb, tbps = sram(row["on-chip SRAM"])
        if gb is not None:
            checked += 1
            levels = [lv for lv in spec.memory if lv.kind == "sram" and lv.capacity_gb.value]
            if not any(close(lv.capacity_gb.value, (gb, gb)) for lv in levels):
                problems.append(f"{key} SRAM: table {row['on-chip SRAM']!r}")
            if tbps is not None and not any(close(lv.bandwidth_tbps.value, (tbps, tbps)) for lv in levels):
                problems.append(f"{key} SRAM bandwidth: table {row['on-chip SRAM']!r}")
    assert not problems, "\n".join(problems)
    assert checked >= 100
