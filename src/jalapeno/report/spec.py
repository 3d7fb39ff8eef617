"""The sweep file: a YAML grid of models × hardware × layouts × precisions × workloads × concurrencies.

Parsed with ``yaml.safe_load``, validated with pydantic (unknown keys are errors), and every error names the
file and the line it comes from: the YAML is also *composed* into a node tree so a pydantic error location
(``("hardware", 2)``) can be mapped back to a line. Example (see ``examples/quick-sweep.yaml``)::

    name: quick
    models: [llama-3.1-8b, gpt-oss-120b]
    hardware: [h200, b200, jalapeno]
    parallelism: auto          # or a list of {tp, ep, pp, dp, dp_attention[, hardware]} and/or "auto"
    max_chips: 8               # bound for `auto`
    disaggregated:             # optional extra layouts: prefill pool + decode pool
      - {prefill: {hardware: h200, workers: 1, tp: 8}, decode: {workers: 1, tp: 8, ep: 1}}
    precisions: [{weights: native, kv: bf16}]
    workloads: [{isl: 1024, osl: 1024}]
    concurrencies: [4, 64]
    speculative: [{method: none}]
    num_prompts: null          # default: the simulator's (InferenceX: 10 × concurrency)
    slo: {ttft_ms: 2000, tpot_ms: 50}   # for SLO attainment and the $/Mtok compliance factor
    framework: vllm            # optional serving-framework profile (vllm | sglang | trt-llm)
    power_cap_w: 550           # optional: cap every chip's power (DVFS clocks; docs/design.md)
    max_num_batched_tokens: 1024   # optional: the engine's token budget per step (SRAM-only chips need less)
    early_stop: 0.05           # optional: statistical early stop (docs/performance.md); default exact
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from jalapeno.errors import SpecError, UnknownNameError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Layout(_Strict):
    """One aggregated layout of a replica (see :class:`jalapeno.perf.Parallelism`)."""

    tp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    dp: int = Field(default=1, ge=1)
    dp_attention: bool = False
    #: only for this chip (None = every chip of the sweep), e.g. a pipeline layout for an SRAM-only part
    hardware: str | None = None


class PrefillPool(_Strict):
    #: None = each chip of the sweep's ``hardware`` list
    hardware: str | None = None
    workers: int = Field(default=1, ge=1)
    tp: int = Field(default=1, ge=1)
    #: weight precision of this pool (None = the point's ``precisions`` entry), e.g. fp4 prefill on Rubin
    precision: str | None = None


class DecodePool(_Strict):
    hardware: str | None = None
    workers: int = Field(default=1, ge=1)
    tp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    #: pipeline stages of one decode worker (e.g. several LPX racks); a worker spans tp·pp chips
    pp: int = Field(default=1, ge=1)
    dp_attention: bool = False
    #: weight precision of this pool (None = the point's ``precisions`` entry), e.g. fp8 on LP30 (no FP4)
    precision: str | None = None


class DisaggLayout(_Strict):
    """Disaggregated serving: ``prefill.workers`` replicas of ``prefill.tp`` chips hand their KV cache to
    ``decode.workers`` replicas of ``decode.tp`` chips."""

    prefill: PrefillPool
    decode: DecodePool


class PrecisionSpec(_Strict):
    weights: str = "native"
    kv: str = "bf16"


class Workload(_Strict):
    isl: int = Field(ge=1)
    osl: int = Field(ge=1)


class Speculative(_Strict):
    """Speculative decoding: ``method`` none | mtp | draft | ngram, ``num_tokens`` drafted per step,
    ``acceptance_rate`` per drafted token (None = the simulator's default), ``draft_model`` for ``draft``."""

    method: Literal["none", "mtp", "draft", "ngram"] = "none"
    num_tokens: int = Field(default=0, ge=0)
    acceptance_rate: float | None = Field(default=None, ge=0, le=1)
    draft_model: str | None = None


class SLOSpec(_Strict):
    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)


class SweepSpec(_Strict):
    name: str = "sweep"
    description: str = ""
    models: list[str] = Field(min_length=1)
    hardware: list[str] = Field(min_length=1)
    #: "auto", or a list of layouts in which the item "auto" stands for the auto layouts
    parallelism: Literal["auto"] | list[Literal["auto"] | Layout] = "auto"
    #: bound for ``auto`` layouts: one number, or per chip with a ``default`` ({default: 8, groq-lp30: 1024})
    max_chips: int | dict[str, int] = 8
    disaggregated: list[DisaggLayout] = Field(default_factory=list)
    precisions: list[PrecisionSpec | str] = Field(default_factory=lambda: [PrecisionSpec()], min_length=1)
    workloads: list[Workload] = Field(min_length=1)
    concurrencies: list[int] = Field(min_length=1)
    speculative: list[Speculative] = Field(default_factory=lambda: [Speculative()], min_length=1)
    num_prompts: int | None = Field(default=None, ge=1)
    slo: SLOSpec | None = None
    seed: int = 0
    #: serving-framework profile for every point (vllm | sglang | trt-llm; see jalapeno.perf.frameworks)
    framework: str | None = None
    #: power cap per chip in watts for every point (clocks lowered to fit; jalapeno.hardware.power_cap)
    power_cap_w: float | None = Field(default=None, gt=0)
    #: the engine's token budget per step (None = the simulator's 8192); SRAM-only chips (LPX) need less, since
    #: the activations of a full budget take most of an LP30's 500 MB
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    #: opt-in statistical early stop for every point: relative tolerance of the latency CIs (e.g. 0.05;
    #: jalapeno.sim.early_stop); None = InferenceX-exact
    early_stop: float | None = Field(default=None, gt=0, lt=1)

    @field_validator("parallelism")
    @classmethod
    def _nonempty_layouts(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("empty list: give at least one layout or 'auto'")
        return v

    @field_validator("max_chips")
    @classmethod
    def _max_chips(cls, v: int | dict[str, int]) -> int | dict[str, int]:
        for n in [v] if isinstance(v, int) else v.values():
            if n < 1:
                raise ValueError(f"max_chips {n} must be >= 1")
        return v

    def max_chips_for(self, chip: str) -> int:
        """The ``auto`` bound for one chip (per-chip entry, else ``default``, else 8)."""
        if isinstance(self.max_chips, int):
            return self.max_chips
        from jalapeno.hardware import normalize_name

        want = _chip_key(chip)
        for k, n in self.max_chips.items():
            if k != "default" and (normalize_name(k) == normalize_name(chip) or _chip_key(k) == want):
                return n
        return self.max_chips.get("default", 8)

    @field_validator("concurrencies")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        for c in v:
            if c < 1:
                raise ValueError(f"concurrency {c} must be >= 1")
        return v

    def precision_list(self) -> list[PrecisionSpec]:
        """Precisions with the ``"fp8"`` shorthand expanded (weights = that dtype, kv = bf16)."""
        return [PrecisionSpec(weights=p) if isinstance(p, str) else p for p in self.precisions]


def _chip_key(name: str) -> str:
    try:
        from jalapeno.hardware import get_chip

        return get_chip(name).key
    except Exception:  # unknown names are reported by check_spec_names, with their line
        return name


# ---------------------------------------------------------------------------------------------------------
# Line numbers
# ---------------------------------------------------------------------------------------------------------
def _node_line(root: yaml.Node | None, loc: Sequence[int | str]) -> int | None:
    """1-based line of the deepest node on ``loc`` that exists (a key's line for mapping entries)."""
    node = root
    line = root.start_mark.line + 1 if root is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                    line = k.start_mark.line + 1
                    node = v
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _loc_str(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "(top level)"


def _clean_loc(loc: Sequence[Any]) -> list[int | str]:
    """Drop pydantic's union-branch markers (``Layout``, ``list[...]``, ``literal['auto']``...) from a location."""
    branch = {"str", "int", "PrecisionSpec", "Layout", "SLOSpec"}
    return [p for p in loc if not (isinstance(p, str) and (p in branch or "[" in p or p.startswith("function-")))]


class SpecSource:
    """A parsed YAML document with its node tree, for error messages that name lines."""

    def __init__(self, text: str, path: str = "<sweep>") -> None:
        self.path = path
        try:
            self.data = yaml.safe_load(text)
            self.root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark is not None else path
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise SpecError(f"{where}: YAML syntax error: {problem}") from None

    def error(self, loc: Sequence[int | str], msg: str) -> SpecError:
        line = _node_line(self.root, loc)
        where = f"{self.path}:{line}" if line else self.path
        return SpecError(f"{where}: {_loc_str(loc)}: {msg}")


def _validation_error(src: SpecSource, err: ValidationError) -> SpecError:
    errors = err.errors(include_url=False)
    # prefer the most specific error (longest location) among union branches
    first = max(errors, key=lambda e: len(_clean_loc(e["loc"])))
    loc = _clean_loc(first["loc"])
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = f"unknown key {str(loc[-1])!r}; see docs/report.md for the sweep schema"
    elif first["type"] == "too_short":
        msg = "empty list: the grid needs at least one entry here"
    elif first["type"] == "missing":
        msg = "required key is missing"
    elif first["type"] == "literal_error":
        msg = f"{msg}, got {first.get('input')!r}"
    return src.error(loc, msg)


def parse_sweep(text: str, path: str = "<sweep>", *, check_names: bool = True) -> tuple[SweepSpec, SpecSource]:
    """Parse and validate a sweep YAML document. Raises :class:`SpecError` naming the line of the problem."""
    src = SpecSource(text, path)
    if not isinstance(src.data, dict):
        raise SpecError(f"{path}:1: a sweep file must be a YAML mapping (models:, hardware:, ...)")
    try:
        spec = SweepSpec.model_validate(src.data)
    except ValidationError as exc:
        raise _validation_error(src, exc) from None
    if check_names:
        check_spec_names(spec, src)
    return spec, src


def load_sweep(path: str | Path, *, check_names: bool = True) -> SweepSpec:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{p}: cannot read sweep file ({exc.strerror or exc})") from None
    return parse_sweep(text, str(p), check_names=check_names)[0]


def check_spec_names(spec: SweepSpec, src: SpecSource) -> None:
    """Every model, chip and precision the spec names must exist; the error names the line."""
    from jalapeno.hardware import get_chip
    from jalapeno.models import load_model
    from jalapeno.perf.types import KV_PRECISIONS, WEIGHT_PRECISIONS

    for i, m in enumerate(spec.models):
        try:
            load_model(m)
        except UnknownNameError as exc:
            raise src.error(("models", i), str(exc)) from None
    chips: list[tuple[tuple[int | str, ...], str]] = [(("hardware", i), h) for i, h in enumerate(spec.hardware)]
    for i, d in enumerate(spec.disaggregated):
        if d.prefill.hardware:
            chips.append((("disaggregated", i, "prefill", "hardware"), d.prefill.hardware))
        if d.decode.hardware:
            chips.append((("disaggregated", i, "decode", "hardware"), d.decode.hardware))
    if isinstance(spec.parallelism, list):
        chips += [(("parallelism", i, "hardware"), lay.hardware) for i, lay in enumerate(spec.parallelism)
                  if isinstance(lay, Layout) and lay.hardware]
    if isinstance(spec.max_chips, dict):
        chips += [(("max_chips", k), k) for k in spec.max_chips if k != "default"]
    for loc, h in chips:
        try:
            get_chip(h)
        except UnknownNameError as exc:
            raise src.error(loc, str(exc)) from None
    if spec.framework is not None:
        from jalapeno.errors import ConfigError
        from jalapeno.perf.frameworks import get_framework

        try:
            get_framework(spec.framework)
        except ConfigError as exc:
            raise src.error(("framework",), str(exc)) from None
    for i, d in enumerate(spec.disaggregated):
        for role, pool in (("prefill", d.prefill), ("decode", d.decode)):
            if pool.precision is not None and pool.precision not in WEIGHT_PRECISIONS:
                raise src.error(("disaggregated", i, role, "precision"),
                                f"precision {pool.precision!r} is not one of {', '.join(WEIGHT_PRECISIONS)}")
    for i, p in enumerate(spec.precision_list()):
        if p.weights not in WEIGHT_PRECISIONS:
            raise src.error(("precisions", i), f"weights {p.weights!r} is not one of {', '.join(WEIGHT_PRECISIONS)}")
        if p.kv not in KV_PRECISIONS:
            raise src.error(("precisions", i), f"kv {p.kv!r} is not one of {', '.join(KV_PRECISIONS)}")
