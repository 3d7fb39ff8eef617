"""The confidence label of an answer: how the serving parameters of the chips behind it were obtained.

Every chip YAML carries a :class:`~jalapeno.hardware.schema.Calibration` block (``calibrated`` on N measured
serving points with a held-out median error, ``transferred`` from another chip's calibration, or
``uncalibrated``). An answer (one simulation, one sweep row, one recommendation) is as trustworthy as the
*least* trustworthy chip it runs on, so its confidence is the weakest of its chips' (the prefill and the decode
chip of a disaggregated deployment). ``simulate``, sweep results, ``recommend``, the HTML report and ``hardware
list/show`` all print the labels built here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, Mapping, Sequence

from jalapeno.errors import ConfigError
from jalapeno.hardware.schema import ChipSpec

Status = Literal["calibrated", "transferred", "uncalibrated"]
#: trust order, weakest first (the index is the tier: higher = more trusted)
STATUSES: tuple[str, ...] = ("uncalibrated", "transferred", "calibrated")
#: ``--trust`` levels: the weakest confidence ranked with the trusted chips (``any`` = every chip)
TRUST_LEVELS: tuple[str, ...] = ("any", "transferred", "calibrated")


def tier(status: str | None) -> int:
    """0 for uncalibrated (or unknown), 1 transferred, 2 calibrated."""
    return STATUSES.index(status) if status in STATUSES else 0


def trusted(status: str | None, trust: str) -> bool:
    """Whether a chip of confidence ``status`` meets the ``--trust`` level (``any`` | ``transferred`` | ``calibrated``)."""
    if trust not in TRUST_LEVELS:
        raise ConfigError(f"--trust {trust!r} must be one of {', '.join(TRUST_LEVELS)}")
    return trust == "any" or tier(status) >= tier(trust)


@dataclass(frozen=True)
class ChipConfidence:
    """One chip's confidence, in the role it plays (``serving``, ``prefill`` or ``decode``)."""

    role: str
    chip: str
    status: str
    label: str
    points: int
    median_error_pct: float | None
    metric: str
    transferred_from: str | None
    note: str

    @classmethod
    def of(cls, chip: ChipSpec, role: str = "serving") -> "ChipConfidence":
        c = chip.calibration
        return cls(role, chip.key, c.status, c.label(), c.points, c.median_error_pct, c.metric,
                   c.transferred_from, c.note)


def confidence(chips: Sequence[tuple[str, ChipSpec]]) -> dict:
    """The ``confidence`` object of one answer from its ``(role, chip)`` pairs: the weakest chip's status,
    label, points and median error at the top, every chip under ``chips``. A label names the chip when the
    roles' chips differ (``prefill h200: calibrated (...); decode groq-lpu: uncalibrated``)."""
    if not chips:
        raise ValueError("confidence() needs at least one chip")
    per = [ChipConfidence.of(chip, role) for role, chip in chips]
    weakest = min(per, key=lambda c: tier(c.status))
    keys = {c.chip for c in per}
    label = weakest.label if len(keys) == 1 else "; ".join(f"{c.role} {c.chip}: {c.label}" for c in per)
    return {
        "status": weakest.status,
        "label": label,
        "points": weakest.points,
        "median_error_pct": weakest.median_error_pct,
        "chips": [asdict(c) for c in per],
    }


def point_confidence(hardware: str, prefill_hardware: str | None = None, get=None) -> dict:
    """:func:`confidence` of a sweep point's chips, looked up by name (``get`` defaults to the catalogue's
    :func:`~jalapeno.hardware.get_chip`)."""
    if get is None:
        from jalapeno.hardware import get_chip as get
    if prefill_hardware and prefill_hardware != hardware:
        return confidence([("prefill", get(prefill_hardware)), ("decode", get(hardware))])
    return confidence([("serving", get(hardware))])


def confidence_columns(row: Mapping) -> dict:
    """The flat result columns of a sweep row: ``confidence`` (the label) and ``confidence_status``."""
    c = point_confidence(str(row["hardware"]), row.get("prefill_hardware") if row.get("mode") == "disaggregated" else None)
    return {"confidence": c["label"], "confidence_status": c["status"]}
