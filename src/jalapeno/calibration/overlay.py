"""The overlay a fit writes: the chip's YAML with the fitted ``efficiency`` values, each one's provenance
(a :class:`~jalapeno.hardware.schema.Fact` with status ``fitted`` in ``efficiency.fitted``) and a
``calibration:`` block. ``--hardware-dir DIR`` then replaces the built-in chip of the same key with it.

Fits that are not chip fields (a serving framework's request latency, MTP acceptance) go to
``DIR/calibration-extra.json`` (not a ``.yaml``, so the hardware catalogue does not read it as a chip).
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Iterable, Sequence

import yaml

from jalapeno.calibration.fit import FitReport, apply_params
from jalapeno.errors import CalibrationError

EXTRA_FILE = "calibration-extra.json"


def _chip_data(chip: str, hardware_dirs: Iterable[str | Path]) -> tuple[dict, Path]:
    from jalapeno.hardware.catalog import load_catalog

    cat = load_catalog(list(hardware_dirs))
    spec = cat.resolve(chip)
    path = cat.origin[spec.key]
    return yaml.safe_load(path.read_text(encoding="utf-8")), path


def overlay_data(report: FitReport, sources: Sequence[str], command: str,
                 hardware_dirs: Iterable[str | Path] = ()) -> dict:
    """The chip YAML (as a mapping) with ``report``'s fitted efficiency values, provenance and calibration."""
    from jalapeno.hardware.schema import ChipSpec

    data, origin = _chip_data(report.chip, hardware_dirs)
    spec = ChipSpec.model_validate(data)
    chip_values = {k: v for k, v in report.fitted.items() if "@" not in k}
    eff = apply_params(spec.efficiency, chip_values)
    today = _dt.date.today().isoformat()
    where = f"{', '.join(sources)}; {report.n_fit} configurations (fit split), {today}; `{command}`"
    held = report.held_out_median("output_tput_per_gpu")
    fitted = dict(spec.efficiency.fitted)
    for k, v in chip_values.items():
        fitted[k] = {"value": round(float(v), 6), "source": where, "status": "fitted",
                     "note": f"was {report.start[k]:.6g}; bounds {_bounds(report, k)}"}
    out = eff.model_dump(mode="json")
    out["fitted"] = {k: (f if isinstance(f, dict) else f.model_dump(mode="json")) for k, f in fitted.items()}
    out["source"] = (f"FITTED by jalapeno calibrate ({', '.join(chip_values)}; {where}). "
                     f"Previously: {spec.efficiency.source}")
    data["efficiency"] = out
    data["calibration"] = {
        "status": "calibrated", "points": report.n_fit,
        "median_error_pct": None if held is None else round(held, 2), "metric": "output_tput_per_gpu",
        "source": where,
        "note": (f"held-out: {report.n_held} configurations; base file {origin.name}"
                 if held is not None else "no held-out points: the error is not known"),
    }
    return data


def _bounds(report: FitReport, name: str) -> str:
    p = next(p for p in report.params if p.name == name)
    return f"[{p.lower:g}, {p.upper:g}]"


def write_overlay(report: FitReport, out_dir: str | Path, sources: Sequence[str], command: str,
                  hardware_dirs: Iterable[str | Path] = (), extra: dict | None = None) -> Path:
    """Write ``DIR/<chip>.yaml`` (validated by the hardware loader) and, when there are framework or MTP fits,
    ``DIR/calibration-extra.json``. Returns the YAML's path."""
    from jalapeno.hardware.catalog import load_spec_file

    d = Path(out_dir)
    if d.exists() and not d.is_dir():
        raise CalibrationError(f"--out {d} exists and is not a directory")
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{report.chip}.yaml"
    data = overlay_data(report, sources, command, hardware_dirs)
    header = (f"# Written by `{command}` on {_dt.date.today().isoformat()}: the {report.chip} chip with its "
              "fitted efficiency block.\n# Use it with --hardware-dir " + str(d) + "\n")
    path.write_text(header + yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True))
    load_spec_file(path)  # what --hardware-dir will do: fail here, not later
    lat = {k.split("@", 1)[1]: v for k, v in report.fitted.items() if "@" in k}
    if lat or extra:
        (d / EXTRA_FILE).write_text(json.dumps({"request_overhead_ms_by_framework": lat, **(extra or {})},
                                               indent=1) + "\n")
    return path
