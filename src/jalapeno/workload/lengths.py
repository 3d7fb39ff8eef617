"""Seeded request-length and arrival-time generators (pure functions), and trace loading."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Literal

import numpy as np

from jalapeno.errors import ConfigError, SpecError

#: ``ix``: InferenceX, uniform integers in [r·L, L]; ``vllm``: vLLM ``--random-range-ratio``, [L·(1−r), L·(1+r)]
RangeMode = Literal["ix", "vllm", "inferencex"]


def _bounds(length: int, ratio: float, mode: str) -> tuple[int, int]:
    if mode in ("ix", "inferencex"):
        if not 0.0 < ratio <= 1.0:
            raise ConfigError(f"--random-range-ratio {ratio} must be in (0, 1] for InferenceX lengths [r·L, L]")
        return max(1, int(math.floor(length * ratio))), length
    if mode == "vllm":
        if not 0.0 <= ratio < 1.0:
            raise ConfigError(f"--random-range-ratio {ratio} must be in [0, 1) for vLLM lengths [L(1-r), L(1+r)]")
        return max(1, int(math.floor(length * (1 - ratio)))), int(math.ceil(length * (1 + ratio)))
    raise ConfigError(f"length range mode {mode!r} must be 'ix' (InferenceX) or 'vllm'")


def sample_lengths(
    num: int,
    input_len: int,
    output_len: int,
    range_ratio: float = 0.8,
    *,
    mode: RangeMode = "ix",
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-request (input, output) token lengths, int64 arrays of ``num`` values, deterministic in ``seed``.

    InferenceX (``mode="ix"``): each length uniform over the integers of ``[floor(r·L), L]`` (mean ≈ 0.9·L at
    r = 0.8; r = 1 gives fixed lengths). vLLM (``mode="vllm"``): uniform over ``[floor(L(1−r)), ceil(L(1+r))]``.
    """
    if num <= 0:
        raise ConfigError(f"number of prompts must be > 0 (got {num})")
    if input_len <= 0 or output_len <= 0:
        raise ConfigError(f"input and output lengths must be > 0 (got {input_len}, {output_len})")
    rng = np.random.default_rng(seed)
    ilo, ihi = _bounds(input_len, range_ratio, mode)
    olo, ohi = _bounds(output_len, range_ratio, mode)
    isl = rng.integers(ilo, ihi + 1, size=num, dtype=np.int64)
    osl = rng.integers(olo, ohi + 1, size=num, dtype=np.int64)
    return isl, osl


def arrival_times(
    num: int,
    request_rate: float,
    *,
    distribution: Literal["poisson", "constant"] = "poisson",
    burstiness: float = 1.0,
    seed: int = 0,
) -> np.ndarray:
    """Open-loop arrival times (s) of ``num`` requests at ``request_rate`` requests/s, as vLLM's client sends
    them: the first at t = 0, then gaps drawn i.i.d. — exponential (Poisson process; gamma with shape
    ``burstiness`` when it is not 1) or all equal to 1/rate (``constant``). An infinite rate sends all at 0."""
    if num <= 0:
        raise ConfigError(f"number of prompts must be > 0 (got {num})")
    if not request_rate > 0:
        raise ConfigError(f"--request-rate must be > 0 requests/s (got {request_rate})")
    if math.isinf(request_rate):
        return np.zeros(num)
    if distribution == "constant":
        gaps = np.full(num - 1, 1.0 / request_rate)
    elif distribution == "poisson":
        if burstiness <= 0:
            raise ConfigError(f"burstiness must be > 0 (got {burstiness})")
        rng = np.random.default_rng(seed)
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=num - 1)
    else:
        raise ConfigError(f"arrival distribution {distribution!r} must be 'poisson' or 'constant'")
    return np.concatenate([[0.0], np.cumsum(gaps)])


def load_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Read a trace: CSV (header row) or JSONL with ``input_len``, ``output_len`` and optional ``arrival_s``.

    Returns (input lengths, output lengths, arrival times or None), in file order."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"trace file {p} does not exist")
    rows: list[dict] = []
    try:
        if p.suffix.lower() in (".jsonl", ".json"):
            with p.open() as f:
                for i, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            rows.append(json.loads(line))
                        except json.JSONDecodeError as exc:
                            raise SpecError(f"trace {p} line {i}: not valid JSON ({exc.msg})") from None
        else:
            with p.open(newline="") as f:
                rows = list(csv.DictReader(f))
    except UnicodeDecodeError:
        raise SpecError(f"trace {p} is not a text file") from None
    if not rows:
        raise SpecError(f"trace {p} has no requests")
    for col in ("input_len", "output_len"):
        if col not in rows[0]:
            raise SpecError(f"trace {p} lacks the '{col}' column (needs input_len, output_len[, arrival_s])")
    has_t = "arrival_s" in rows[0] and rows[0]["arrival_s"] not in (None, "")

    def num(row: dict, col: str, i: int, kind=int):
        try:
            v = kind(float(row[col])) if kind is int else float(row[col])
        except (KeyError, TypeError, ValueError):
            raise SpecError(f"trace {p} request {i}: '{col}'={row.get(col)!r} is not a number") from None
        if kind is int and v <= 0:
            raise SpecError(f"trace {p} request {i}: '{col}' must be > 0 (got {v})")
        return v

    isl = np.array([num(r, "input_len", i) for i, r in enumerate(rows, 1)], dtype=np.int64)
    osl = np.array([num(r, "output_len", i) for i, r in enumerate(rows, 1)], dtype=np.int64)
    t = np.array([num(r, "arrival_s", i, float) for i, r in enumerate(rows, 1)]) if has_t else None
    if t is not None and np.any(np.diff(t) < 0):
        order = np.argsort(t, kind="stable")
        isl, osl, t = isl[order], osl[order], t[order]
    return isl, osl, t
