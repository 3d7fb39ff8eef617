"""MTP (multi-token prediction) acceptance rates: not published by InferenceX, so fitted per (model, framework).

``mtp_acceptance.yaml`` (next to this module) holds one fitted acceptance probability per catalogue model and
serving-framework family (the conditional acceptance of each draft token, the same at every draft position; the
draft length is the one the InferenceX script launched: :func:`jalapeno.calibration.points.mtp_draft_tokens`), written by :func:`jalapeno.calibration.fit.fit_mtp_acceptance` (``jalapeno calibrate
--fit-mtp``) from the ``spec_decoding=mtp`` rows of the fit split. Pairs without a fitted value use
:data:`DEFAULT_ACCEPTANCE` (an assumption: DeepSeek-V3 reports 0.85-0.9 on its own evals; InferenceX's random-token
prompts are assumed a little lower).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from jalapeno.errors import SpecError

MTP_FILE = Path(__file__).resolve().parent / "mtp_acceptance.yaml"
DEFAULT_ACCEPTANCE = 0.75


@dataclass
class MtpFit:
    """One fitted acceptance rate: probability that each draft token is accepted."""

    model: str
    framework: str
    acceptance: float
    points: int
    source: str


@lru_cache(maxsize=4)
def load_mtp_fits(path: Path = MTP_FILE) -> dict[tuple[str, str], MtpFit]:
    """(model, framework family) -> :class:`MtpFit`; empty when the file does not exist."""
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    out: dict[tuple[str, str], MtpFit] = {}
    for i, e in enumerate(data.get("fitted", [])):
        try:
            fit = MtpFit(str(e["model"]), str(e["framework"]), float(e["acceptance"]), int(e.get("points", 0)),
                         str(e.get("source", "")))
        except (KeyError, TypeError, ValueError):
            raise SpecError(f"{path}: fitted[{i}] needs model, framework and acceptance (a number)") from None
        if not 0 < fit.acceptance <= 1:
            raise SpecError(f"{path}: fitted[{i}].acceptance {fit.acceptance} must be in (0, 1]")
        out[(fit.model, fit.framework)] = fit
    return out


def mtp_acceptance(model: str, framework: str) -> tuple[float, ...]:
    """The acceptance of one draft position for ``model`` served by ``framework`` (a 1-tuple: repeat it per draft
    token). A
    disaggregated stack (dynamo-sglang, ...) has no fit of its own and keeps the default: borrowing its engine's
    aggregated fit made the held-out disaggregated TPOT worse (27% -> 31% median |error|; docs/fidelity.md)."""
    fit = load_mtp_fits().get((model, framework))
    return (fit.acceptance if fit else DEFAULT_ACCEPTANCE,)


def write_mtp_fits(fits: list[MtpFit], path: Path = MTP_FILE) -> None:
    """Write ``fits`` (merged over what ``path`` holds: a refit of a pair replaces it)."""
    merged = dict(load_mtp_fits(path)) if path.is_file() else {}
    for f in fits:
        merged[(f.model, f.framework)] = f
    doc = {
        "note": "MTP acceptance per draft token, FITTED (InferenceX does not publish it): the value that best "
                "predicts output tok/s per GPU and median TPOT of a fit set of spec_decoding=mtp rows (each entry's "
                "source), the same at every draft position, each row run with the draft length its InferenceX "
                "script launched (jalapeno.calibration.points.mtp_draft_tokens: TensorRT-LLM 3, 1 with attention "
                "DP; SGLang 2; ATOM 1). Written by jalapeno.calibration.fit.fit_mtp_acceptance "
                f"(python benchmarks/fidelity.py --fit-mtp); updated {_dt.date.today().isoformat()}.",
        "fitted": [{"model": f.model, "framework": f.framework, "acceptance": round(f.acceptance, 4),
                    "points": f.points, "status": "fitted", "source": f.source} for f in sorted(merged.values(),
                                                                             key=lambda f: (f.model, f.framework))],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=110))
    load_mtp_fits.cache_clear()
