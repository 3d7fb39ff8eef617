"""The design spec: a YAML of workloads (the judge), knob grids / ranges (the space) and limits.

Example (docs/design.md, examples/design-tiny.yaml)::

    name: tiny
    workloads:
      - {name: interactive, model: llama-3.1-8b, isl: 1024, osl: 256, concurrencies: [1], slo: {ttft_ms: 500, tpot_ms: 4}}
      - {name: batch, model: llama-3.1-8b, isl: 1024, osl: 1024, concurrencies: [256], slo: {ttft_ms: 30000, tpot_ms: 100}}
    precision: {weights: fp8, kv: fp8}
    grid: {node: [n3], fp8_tflops: [1250, 2500, 5000], sram_mb: [0, 500, 2000], stacks: [0, 8]}
    ranges: {fp8_tflops: [500, 8000], sram_mb: [0, 4000], stacks: [0, 12]}   # for --search de
    limits: {max_chip_w: 1500, max_rack_w: 130000, max_unit_cost_usd: 20000, max_chips: 64}
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jalapeno.errors import ConfigError, SpecError

#: knobs that a grid or range may vary (the rest of DesignKnobs are fixed by ``fixed``)
GRID_KNOBS = ("arch", "node", "fp8_tflops", "sram_mb", "memory", "stacks", "gb_per_stack", "scale_up_gbps", "domain", "chiplets")
RANGE_KNOBS = ("fp8_tflops", "sram_mb", "stacks", "scale_up_gbps")
INT_KNOBS = ("stacks",)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SLO(_Strict):
    ttft_ms: float = Field(gt=0)
    tpot_ms: float = Field(gt=0)


class DesignWorkload(_Strict):
    name: str
    model: str
    isl: int = Field(ge=1)
    osl: int = Field(ge=1)
    concurrencies: list[int] = Field(min_length=1)
    slo: SLO
    weight: float = Field(default=1.0, gt=0)
    #: chip counts per replica to try besides the fewest that hold the weights and twice that (e.g. [8, 64])
    chips: list[int] = Field(default_factory=list)


class Precision(_Strict):
    weights: str = "fp8"
    kv: str = "fp8"


class Limits(_Strict):
    max_area_mm2: float | None = Field(default=None, gt=0)
    max_chip_w: float | None = Field(default=None, gt=0)
    max_rack_w: float | None = Field(default=None, gt=0)
    max_unit_cost_usd: float | None = Field(default=None, gt=0)
    max_chips: int = Field(default=64, ge=1)


class DESettings(_Strict):
    maxiter: int = Field(default=8, ge=1)
    popsize: int = Field(default=6, ge=2)
    seed: int = 0


class DesignSpec(_Strict):
    name: str = "design"
    description: str = ""
    workloads: list[DesignWorkload] = Field(min_length=1)
    precision: Precision = Precision()
    #: requests per point: max(num_prompts, concurrency) (one full wave at least); None = max(8, 2 x concurrency)
    #: (recommend's small sweeps). Fewer requests = faster; benchmarks/design_ranking.py shows the ranking holds
    num_prompts: int | None = Field(default=None, ge=1)
    fixed: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    ranges: dict[str, tuple[float, float]] = Field(default_factory=dict)
    limits: Limits = Limits()
    de: DESettings = DESettings()

    def digest(self) -> str:
        """Hash of what scores a design (workloads, precision, requests, limits): part of every design id."""
        blob = json.dumps({"w": [w.model_dump() for w in self.workloads], "p": self.precision.model_dump(),
                           "n": self.num_prompts, "l": self.limits.model_dump()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:8]


def parse_design_spec(text: str, path: str = "<design>") -> DesignSpec:
    """Parse and validate a design YAML; errors name the field in one line."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: YAML syntax error: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a design spec must be a YAML mapping (workloads:, grid:, limits:, ...)")
    try:
        spec = DesignSpec.model_validate(data)
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in e["loc"])
        raise SpecError(f"{path}: {loc}: {e['msg']} (schema: docs/design.md)") from None
    for name in spec.grid:
        if name not in GRID_KNOBS:
            raise SpecError(f"{path}: grid.{name}: not a grid knob; use one of {', '.join(GRID_KNOBS)}")
        if not spec.grid[name]:
            raise SpecError(f"{path}: grid.{name}: empty list")
    for name, (lo, hi) in spec.ranges.items():
        if name not in RANGE_KNOBS:
            raise SpecError(f"{path}: ranges.{name}: not a range knob; use one of {', '.join(RANGE_KNOBS)}")
        if not lo <= hi:
            raise SpecError(f"{path}: ranges.{name}: [{lo}, {hi}] is not low <= high")
    from jalapeno.design.physical import DesignKnobs

    bad = set(spec.fixed) - set(DesignKnobs.model_fields)
    if bad:
        raise SpecError(f"{path}: fixed.{sorted(bad)[0]}: not a design knob; see docs/design.md")
    for where, name, value in [("fixed", n, v) for n, v in spec.fixed.items()] + \
            [("grid", n, v) for n, vs in spec.grid.items() for v in vs]:
        _check_value(path, where, name, value)
    return spec


def _check_value(path: str, where: str, name: str, value: Any) -> None:
    """A knob value's type/choice (e.g. node: n2) is a spec error naming it; range errors (ConfigError) are
    left to each design, which records them."""
    from jalapeno.design.physical import DesignKnobs

    try:
        DesignKnobs.model_validate({"sram_mb": 1, "stacks": 1, name: value})
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        raise SpecError(f"{path}: {where}.{name}: {value!r}: {e['msg']} (schema: docs/design.md)") from None
    except ConfigError:
        pass


def load_design_spec(path: str | Path) -> DesignSpec:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{p}: cannot read design spec ({exc.strerror or exc})") from None
    return parse_design_spec(text, str(p))


def knob_id(knobs: dict[str, Any]) -> str:
    """Stable short id of one design's knobs (without its key)."""
    k = {a: b for a, b in knobs.items() if a != "key"}
    return hashlib.sha256(json.dumps(k, sort_keys=True, default=str).encode()).hexdigest()[:10]


def grid_designs(spec: DesignSpec) -> list[dict[str, Any]]:
    """Every grid combination as a knob dict (``fixed`` applied), each with its ``key`` = ``d-<id>``."""
    names = list(spec.grid)
    out = []
    for combo in itertools.product(*(spec.grid[n] for n in names)):
        knobs = {**spec.fixed, **dict(zip(names, combo))}
        knobs["key"] = f"d-{knob_id(knobs)}"
        out.append(knobs)
    if not out:
        raise ConfigError("the design spec has no grid: give grid: {knob: [values], ...} (docs/design.md)")
    return out
