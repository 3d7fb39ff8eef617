"""``jalapeno recommend``: which chip and layout serve a model within TTFT/TPOT SLOs best, and why the others lose.

For each chip it runs a small internal sweep (every ``auto`` layout up to ``max_chips`` × a few concurrencies,
``num_prompts = max(8, 2 × concurrency)`` so it stays fast), keeps for every (chip, layout) the concurrency that
meets the SLOs and scores best on the objective, ranks those, and explains every loser:

* ``cost`` — lowest $/Mtok (the seeds' TCO, compliance factor included);
* ``energy`` — most output tokens per joule (simulated chip energy);
* ``latency`` — lowest median end-to-end latency.

A point *meets the SLOs* when its p90 TTFT and p90 TPOT are within them (90 % of requests), see
:func:`slo_misses`.

**Confidence.** Every candidate carries its chip's confidence label (:mod:`jalapeno.hardware.confidence`). With
``trust`` (``--trust``, default ``transferred``) candidates whose chips are calibrated or transferred are ranked
first and the others after them (each tier by score), and a warning says when a less trusted chip would have won
on the score alone; ``trust="any"`` ranks by score alone and warns when the winner is uncalibrated. An
uncalibrated chip is therefore never ranked above a calibrated or transferred one without a warning line.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal, Mapping, Sequence

from jalapeno.errors import ConfigError, UnknownNameError
from jalapeno.fmt import num
from jalapeno.hardware.confidence import TRUST_LEVELS, trusted
from jalapeno.economics import DEFAULT_PUE
from jalapeno.report.grid import ArchDims, auto_layouts, describe_layout, make_point
from jalapeno.report.pool import PointFn, PointRunner, run_points

Objective = Literal["cost", "energy", "latency"]
OBJECTIVES: tuple[str, ...] = ("cost", "energy", "latency")
#: statistic the SLOs are checked against
SLO_PERCENTILE = "p90"
DEFAULT_HARDWARE: tuple[str, ...] = ("h200", "b200", "jalapeno")
DEFAULT_CONCURRENCIES: tuple[int, ...] = (1, 4, 16, 64)
#: default ``--trust``: calibrated and transferred chips are ranked before uncalibrated ones
DEFAULT_TRUST = "transferred"


@dataclass(frozen=True)
class Preset:
    """A named serving scenario: workload, SLOs, objective and the concurrencies tried."""

    isl: int
    osl: int
    ttft_ms: float
    tpot_ms: float
    objective: Objective
    concurrencies: tuple[int, ...]
    description: str


PRESETS: dict[str, Preset] = {
    "interactive-agent": Preset(
        8192, 1024, 1000.0, 20.0, "latency", (1, 4, 16, 32),
        "agent turns: 8k-token context, 1k-token answers, first token within 1 s, >= 50 tokens/s/user; fastest wins",
    ),
    "batch-throughput": Preset(
        1024, 8192, 60_000.0, 200.0, "cost", (16, 64, 256),
        "offline generation: 1k in / 8k out, loose SLOs (TTFT <= 60 s, TPOT <= 200 ms); cheapest $/Mtok wins",
    ),
    "long-context-128k": Preset(
        131072, 1024, 30_000.0, 50.0, "cost", (1, 2, 4),
        "128k-token documents, 1k-token answers: TTFT <= 30 s, TPOT <= 50 ms; cheapest $/Mtok wins",
    ),
}


@dataclass
class Candidate:
    """One (chip, layout): its best point under the SLOs, or why it has none."""

    hardware: str
    layout: str
    num_chips: int
    meets_slo: bool = False
    concurrency: int | None = None
    objective_value: float | None = None
    usd_per_mtok: float | None = None
    output_tokens_per_joule: float | None = None
    output_tokens_per_mw: float | None = None
    output_throughput_per_chip: float | None = None
    median_interactivity: float | None = None
    p90_ttft_ms: float | None = None
    p90_tpot_ms: float | None = None
    median_e2el_ms: float | None = None
    rank: int | None = None
    reason: str = ""
    #: the chip's confidence label and status (calibrated / transferred / uncalibrated), and whether it meets
    #: the ``--trust`` level (candidates below it are ranked after those that meet it)
    confidence: str = ""
    confidence_status: str = ""
    trusted: bool = True
    points: list[dict] = field(default_factory=list, repr=False)

    def public(self) -> dict:
        d = asdict(self)
        d.pop("points")
        return d


@dataclass
class Recommendation:
    model: str
    isl: int
    osl: int
    ttft_slo_ms: float
    tpot_slo_ms: float
    objective: str
    preset: str | None
    ranked: list[Candidate]
    losers: list[Candidate]
    trust: str = DEFAULT_TRUST
    #: lines the user must read with the ranking (e.g. an uncalibrated chip would have won on score)
    warnings: list[str] = field(default_factory=list)

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "isl": self.isl,
            "osl": self.osl,
            "ttft_slo_ms": self.ttft_slo_ms,
            "tpot_slo_ms": self.tpot_slo_ms,
            "slo_statistic": SLO_PERCENTILE,
            "objective": self.objective,
            "preset": self.preset,
            "trust": self.trust,
            "warnings": list(self.warnings),
            "ranked": [c.public() for c in self.ranked],
            "losers": [c.public() for c in self.losers],
        }


# ---------------------------------------------------------------------------------------------------------
# Pure ranking
# ---------------------------------------------------------------------------------------------------------
def slo_misses(row: Mapping, ttft_ms: float, tpot_ms: float) -> list[str]:
    """Human-readable SLO misses of one ok row (empty list = meets both)."""
    out = []
    ttft = _f(row.get(f"{SLO_PERCENTILE}_ttft_ms"))
    tpot = _f(row.get(f"{SLO_PERCENTILE}_tpot_ms"))
    if ttft is None or ttft > ttft_ms:
        out.append(f"missed TTFT by {_ms((ttft or math.inf) - ttft_ms)} ({SLO_PERCENTILE} {_ms(ttft)} > {_ms(ttft_ms)})")
    if tpot is None or tpot > tpot_ms:
        out.append(f"missed TPOT by {_ms((tpot or math.inf) - tpot_ms)} ({SLO_PERCENTILE} {_ms(tpot)} > {_ms(tpot_ms)})")
    return out


def objective_value(row: Mapping, objective: str) -> float | None:
    """The score to *minimise* (None when the row cannot be scored on this objective)."""
    if objective == "cost":
        return _f(row.get("usd_per_mtok"))
    if objective == "energy":
        tpj = _f(row.get("output_tokens_per_joule"))
        return -tpj if tpj else None
    if objective == "latency":
        return _f(row.get("median_e2el_ms"))
    raise UnknownNameError(f"unknown objective {objective!r}; use one of {', '.join(OBJECTIVES)}")


def describe_value(v: float | None, objective: str) -> str:
    if v is None:
        return "n/a"
    if objective == "cost":
        return f"${num(v)}/Mtok"
    if objective == "energy":
        return f"{num(-v)} tok/J"
    return f"{num(v)} ms median E2E"


def rank(
    rows: Sequence[Mapping], ttft_ms: float, tpot_ms: float, objective: str, trust: str = DEFAULT_TRUST
) -> tuple[list[Candidate], list[Candidate]]:
    """Group rows by (chip, layout), pick each group's best SLO-meeting point, rank, and explain losers.
    Returns (ranked, losers): ranked[0] is the recommendation; every other candidate carries a reason.
    Candidates whose chips meet ``trust`` come first (rows without a ``confidence_status`` count as
    uncalibrated); see :func:`confidence_warnings` for what must be said about the order."""
    groups: dict[tuple[str, str], list[Mapping]] = {}
    for r in rows:
        groups.setdefault((str(r["hardware"]), describe_layout(r)), []).append(r)
    meeting: list[Candidate] = []
    failing: list[Candidate] = []
    for (hw, lay), rs in groups.items():
        status = str(rs[0].get("confidence_status") or "uncalibrated")
        c = Candidate(hardware=hw, layout=lay, num_chips=int(rs[0].get("num_chips") or 0), points=list(rs),
                      confidence=str(rs[0].get("confidence") or status), confidence_status=status,
                      trusted=trusted(status, trust))
        ok = [r for r in rs if r.get("status") == "ok"]
        good = [r for r in ok if not slo_misses(r, ttft_ms, tpot_ms)]
        scored = [(objective_value(r, objective), r) for r in good]
        if scored:
            # best objective; unscorable (e.g. no price) points last; ties -> higher throughput per chip
            best_v, best = min(scored, key=lambda t: (t[0] is None, t[0] if t[0] is not None else 0.0, -(_f(t[1].get("output_throughput_per_chip")) or 0.0)))
            _fill(c, best, best_v)
            c.meets_slo = True
            meeting.append(c)
            continue
        if ok:
            closest = min(ok, key=lambda r: _violation(r, ttft_ms, tpot_ms))
            _fill(c, closest, None)
            c.reason = "; ".join(slo_misses(closest, ttft_ms, tpot_ms)) + f" at best (concurrency {closest.get('concurrency')})"
        else:
            cap = next((r for r in rs if r.get("error_kind") == "capacity"), None)
            first = cap or (rs[0] if rs else {})
            msg = str(first.get("error") or "no points")
            c.reason = f"did not fit: {msg.removeprefix('does not fit: ')}" if cap else f"could not run: {msg}"
        failing.append(c)
    meeting.sort(key=lambda c: (not c.trusted, *_score(c)))
    for i, c in enumerate(meeting, 1):
        c.rank = i
    if meeting:
        best = meeting[0]
        for c in meeting[1:]:
            if best.trusted and not c.trusted and _score(c) < _score(best):
                c.reason = (f"ranked after the chips that meet --trust {trust} ({c.confidence}) although it scores better: "
                            f"{describe_value(c.objective_value, objective)} vs {describe_value(best.objective_value, objective)}")
            else:
                c.reason = _lost_on_objective(c, best, objective)
    return meeting, failing


def _score(c: Candidate) -> tuple:
    """Sort key of a candidate on its objective alone (unscorable last; ties -> more throughput per chip)."""
    return (c.objective_value is None, c.objective_value if c.objective_value is not None else 0.0,
            -(c.output_throughput_per_chip or 0.0))


def confidence_warnings(ranked: Sequence[Candidate], trust: str, objective: str) -> list[str]:
    """What the user must be told about confidence with a ranking: a less trusted candidate that would win on
    the score alone (ranked after the trusted ones), a ranking with no trusted candidate, or (``--trust any``)
    an uncalibrated winner."""
    if not ranked:
        return []
    top, first = min(ranked, key=_score), ranked[0]
    out: list[str] = []
    if not first.trusted:
        out.append(f"no candidate that meets the SLOs runs on a chip that is {trust} or better; the ranking rests "
                   f"on chips whose serving parameters no measurement checked ({first.hardware}: {first.confidence})")
    elif not top.trusted:
        out.append(f"{top.hardware} {top.layout} scores best ({describe_value(top.objective_value, objective)} vs "
                   f"{describe_value(first.objective_value, objective)}) but is {top.confidence}: ranked after the "
                   f"chips that meet --trust {trust} (--trust any ranks by score alone)")
    if trust == "any" and first.confidence_status == "uncalibrated":
        out.append(f"the recommendation {first.hardware} {first.layout} runs on an uncalibrated chip: no measured "
                   "serving point checked its parameters (--trust transferred ranks calibrated and transferred chips first)")
    return out


def _lost_on_objective(c: Candidate, best: Candidate, objective: str) -> str:
    if c.objective_value is None:
        what = "no price" if objective == "cost" else "no energy figure"
        return f"cannot be ranked on {objective} ({what}) though it meets the SLOs"
    a, b = describe_value(c.objective_value, objective), describe_value(best.objective_value, objective)
    verb = {"cost": "cost more", "energy": "fewer tokens per joule", "latency": "slower"}[objective]
    return f"{verb}: {a} vs {b} ({best.hardware} {best.layout})"


def _fill(c: Candidate, r: Mapping, v: float | None) -> None:
    c.concurrency = int(r["concurrency"])
    c.objective_value = v
    c.num_chips = int(r.get("num_chips") or c.num_chips)
    for k in ("usd_per_mtok", "output_tokens_per_joule", "output_tokens_per_mw", "output_throughput_per_chip",
              "median_interactivity", "p90_ttft_ms", "p90_tpot_ms", "median_e2el_ms"):
        setattr(c, k, _f(r.get(k)))


def _violation(r: Mapping, ttft_ms: float, tpot_ms: float) -> float:
    ttft = _f(r.get(f"{SLO_PERCENTILE}_ttft_ms")) or math.inf
    tpot = _f(r.get(f"{SLO_PERCENTILE}_tpot_ms")) or math.inf
    return max(ttft / ttft_ms, 1.0) * max(tpot / tpot_ms, 1.0)


def _f(v: object) -> float | None:
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) or math.isinf(x) else x


def _ms(v: float | None) -> str:
    if v is None or math.isinf(v):
        return "n/a"
    return f"{v:.0f} ms" if v >= 100 else f"{v:.1f} ms"


# ---------------------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------------------
def recommend(
    model: str,
    *,
    isl: int | None = None,
    osl: int | None = None,
    ttft_slo_ms: float | None = None,
    tpot_slo_ms: float | None = None,
    hardware: Sequence[str] | None = None,
    max_chips: int = 8,
    objective: str | None = None,
    preset: str | None = None,
    concurrencies: Sequence[int] | None = None,
    prices: Mapping[str, float] | None = None,
    pue: float = DEFAULT_PUE,
    workers: int | None = None,
    point_fn: PointFn | None = None,
    dims: ArchDims | None = None,
    framework: str | None = None,
    trust: str = DEFAULT_TRUST,
) -> Recommendation:
    """Run the internal sweep and rank. Explicit arguments override the preset's values. ``framework``: a
    serving-framework profile (:mod:`jalapeno.perf.frameworks`) for every point. ``trust``: the weakest chip
    confidence ranked with the trusted candidates (``any`` | ``transferred`` | ``calibrated``)."""
    if trust not in TRUST_LEVELS:
        raise ConfigError(f"--trust {trust!r} must be one of {', '.join(TRUST_LEVELS)}")
    p = None
    if preset is not None:
        if preset not in PRESETS:
            raise UnknownNameError(f"unknown preset {preset!r}; use one of: {', '.join(PRESETS)}")
        p = PRESETS[preset]
    isl = isl or (p.isl if p else None)
    osl = osl or (p.osl if p else None)
    ttft_slo_ms = ttft_slo_ms or (p.ttft_ms if p else None)
    tpot_slo_ms = tpot_slo_ms or (p.tpot_ms if p else None)
    objective = objective or (p.objective if p else "cost")
    missing = [n for n, v in (("--isl", isl), ("--osl", osl), ("--ttft-slo-ms", ttft_slo_ms), ("--tpot-slo-ms", tpot_slo_ms)) if not v]
    if missing:
        raise ConfigError(f"recommend needs {', '.join(missing)} (or a --preset: {', '.join(PRESETS)})")
    if objective not in OBJECTIVES:
        raise UnknownNameError(f"unknown objective {objective!r}; use one of {', '.join(OBJECTIVES)}")
    if max_chips < 1:
        raise ConfigError(f"--max-chips {max_chips} must be >= 1")
    if framework:
        from jalapeno.perf.frameworks import get_framework

        framework = get_framework(framework).key
    assert isl and osl and ttft_slo_ms and tpot_slo_ms
    concs = tuple(concurrencies or (p.concurrencies if p else DEFAULT_CONCURRENCIES))
    chips = list(hardware or DEFAULT_HARDWARE)

    if dims is None:
        from jalapeno.hardware import get_chip
        from jalapeno.models import load_model, resolve_name

        model = resolve_name(model)
        dims = ArchDims.of(load_model(model))
        chips = [get_chip(h).key for h in chips]
    layouts = auto_layouts(dims, max_chips)
    if not layouts:
        raise ConfigError(f"no layout of {model} on up to {max_chips} chips shards its heads/experts; raise --max-chips")
    points = [
        make_point(
            model=model, hardware=h, tp=lay.tp, ep=lay.ep, dp_attention=lay.dp_attention, isl=isl, osl=osl,
            concurrency=c, num_prompts=max(8, 2 * c), slo_ttft_ms=ttft_slo_ms, slo_tpot_ms=tpot_slo_ms,
            framework=framework or None,
        )
        for h in chips
        for lay in layouts
        for c in concs
    ]
    rows = _run_small(points, point_fn or PointRunner(), workers)
    from jalapeno.report.sweep import make_enricher

    enrich = make_enricher(prices, pue)
    rows = [enrich(r) for r in rows]
    ranked, losers = rank(rows, ttft_slo_ms, tpot_slo_ms, objective, trust)
    return Recommendation(model, isl, osl, ttft_slo_ms, tpot_slo_ms, objective, preset, ranked, losers, trust,
                          confidence_warnings(ranked, trust, objective))


def _run_small(points: list[dict], point_fn: PointFn, workers: int | None) -> list[dict]:
    """Run the lowest concurrency of every (chip, layout) first; a layout skipped there (does not fit, not
    supported) is not retried at higher concurrencies: its other points get the same skip row."""
    low = min(p["concurrency"] for p in points)
    first = run_points([p for p in points if p["concurrency"] == low], point_fn=point_fn, workers=workers)
    dead = {(r["hardware"], describe_layout(r)): r for r in first if r["status"] != "ok"}
    rest = [p for p in points if p["concurrency"] != low and (p["hardware"], describe_layout(p)) not in dead]
    rows = first + run_points(rest, point_fn=point_fn, workers=workers)
    for p in points:
        r = dead.get((p["hardware"], describe_layout(p)))
        if p["concurrency"] != low and r is not None:
            rows.append({**p, "status": r["status"], "error": r["error"], "error_kind": r.get("error_kind"), "num_chips": r.get("num_chips")})
    return rows
