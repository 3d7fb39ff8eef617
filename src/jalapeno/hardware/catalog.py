"""The hardware catalogue: chip YAML files loaded, validated and looked up by name.

Built-in chips live in ``jalapeno/hardware/chips/*.yaml``. Users add or override chips with extra directories,
given as ``extra_dirs`` (the CLI's repeatable ``--hardware-dir``) or the ``JALAPENO_HARDWARE_PATH`` environment
variable (``os.pathsep``-separated). Precedence, lowest to highest: built-ins, ``JALAPENO_HARDWARE_PATH`` entries
in order, ``extra_dirs`` in order. A later chip with the same ``key`` replaces the earlier one.

Names resolve case-insensitively by key, name or alias; spaces and underscores count as ``-`` and ``ñ`` as ``n``
(``"H200"``, ``"tpu_v6e"``, ``"Jalapeño"`` all work).
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from jalapeno.errors import SpecError, UnknownNameError
from jalapeno.hardware.probe import LOCAL_KEY, default_probe_dir
from jalapeno.hardware.schema import ChipSpec, Fact, MemoryLevel

BUILTIN_DIR = Path(__file__).resolve().parent / "chips"
ENV_VAR = "JALAPENO_HARDWARE_PATH"
SPEC_SUFFIXES = (".yaml", ".yml")

PathLike = str | os.PathLike[str]

#: libyaml's safe loader when available (same safe semantics as ``yaml.safe_load``, ~15x faster).
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def normalize_name(name: str) -> str:
    """Canonical lookup form: lower case, accents stripped (ñ -> n), spaces/underscores -> '-'."""
    decomposed = unicodedata.normalize("NFKD", name.strip().lower())
    ascii_ = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return "-".join(ascii_.replace("_", " ").split())


# ---- loading one file ----------------------------------------------------------------------------------------


def _loc(loc: Sequence[int | str]) -> str:
    """pydantic error location -> 'memory[1].bandwidth_tbps.value' (dict-key markers dropped)."""
    out = ""
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _validation_message(path: Path, err: ValidationError) -> str:
    errors = err.errors(include_url=False)
    first = errors[0]
    loc = list(first["loc"])
    msg = str(first["msg"]).removeprefix("Value error, ")
    if loc and loc[-1] == "[key]":  # a bad key of a Literal-keyed dict, e.g. compute_tflops.fp9
        msg = f"unknown key '{loc[-2]}'; " + msg.replace("Input should be", "expected")
    more = f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"{path}: {_loc(loc)}: {msg}{more} (schema: docs/hardware.md)".replace("\n", " ")


def load_spec_file(path: PathLike) -> ChipSpec:
    """Parse and validate one chip YAML file. Raises :class:`SpecError` with one line naming file and field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{p}: cannot read hardware spec ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise SpecError(f"{p}: hardware spec is not UTF-8 text") from None
    try:
        data = yaml.load(text, Loader=_SafeLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{p}: YAML syntax error{where}: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{p}: a hardware spec must be a YAML mapping of fields (key, name, compute_tflops, ...), "
                        f"got {type(data).__name__}")
    try:
        return ChipSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_validation_message(p, exc)) from None


def _spec_files(directory: Path) -> list[Path]:
    return sorted(f for f in directory.iterdir() if f.is_file() and f.suffix in SPEC_SUFFIXES)


def _load_dir(directory: Path) -> list[tuple[ChipSpec, Path]]:
    if not directory.is_dir():
        raise SpecError(f"hardware directory {directory} does not exist or is not a directory "
                        f"(check --hardware-dir / {ENV_VAR})")
    loaded: list[tuple[ChipSpec, Path]] = []
    seen: dict[str, Path] = {}
    for f in _spec_files(directory):
        spec = load_spec_file(f)
        if spec.key in seen:
            raise SpecError(f"{f}: key '{spec.key}' is already defined by {seen[spec.key]} in the same directory; "
                            "give each chip a unique key")
        seen[spec.key] = f
        loaded.append((spec, f))
    return loaded


@functools.lru_cache(maxsize=1)
def _builtin() -> tuple[tuple[ChipSpec, Path], ...]:
    """Built-in chips, parsed once per process (immutable; reset with :func:`clear_cache`)."""
    return tuple(_load_dir(BUILTIN_DIR))


def clear_cache() -> None:
    """Forget the parsed built-in chips (for tests that patch the built-in directory)."""
    _builtin.cache_clear()
    _builtin_names.cache_clear()
    _builtin_chip.cache_clear()


#: the name fields of a chip file, when each sits on one top-level line (how every built-in is written)
_NAME_LINE = re.compile(r"^(key|name|aliases):[ \t]*(\S.*)$", re.MULTILINE)


@functools.lru_cache(maxsize=1)
def _builtin_names() -> dict[str, Path] | None:
    """Normalised lookup name -> built-in file, read from each file's ``key``/``name``/``aliases`` lines only
    (same precedence as :class:`Catalog`). None when a file is written otherwise or two share a key: then
    only the full catalogue can answer."""
    entries: list[tuple[str, str, list[str], Path]] = []
    for f in _spec_files(BUILTIN_DIR):
        try:
            lines = _NAME_LINE.findall(f.read_text(encoding="utf-8"))
            fields = yaml.load("\n".join(f"{k}: {v}" for k, v in lines), Loader=_SafeLoader)  # noqa: S506
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return None
        if not isinstance(fields, dict) or len(lines) != len(fields):
            return None
        key, name, aliases = fields.get("key"), fields.get("name", ""), fields.get("aliases", [])
        if not isinstance(key, str) or not isinstance(name, str) or not isinstance(aliases, list) \
                or not all(isinstance(a, str) for a in aliases):
            return None
        entries.append((key, name, aliases, f))
    keys = [e[0] for e in entries]
    if len(set(keys)) != len(keys):
        return None
    index: dict[str, Path] = {}
    for attr in (2, 1, 0):  # aliases, then names, then keys: later wins, as in Catalog
        for e in entries:
            for n in e[2] if attr == 2 else [e[attr]]:
                index[normalize_name(n)] = e[3]
    return index


@functools.lru_cache(maxsize=64)
def _builtin_chip(name: str) -> ChipSpec | None:
    """A built-in chip found through :func:`_builtin_names`, validating only its file; None when the names
    index cannot answer (or the file's validated fields disagree with its name lines)."""
    index = _builtin_names()
    if index is None:
        return None
    norm = normalize_name(name)
    path = index.get(norm)
    if path is None:
        compact = norm.replace("-", "")
        path = next((p for n, p in index.items() if n.replace("-", "") == compact), None)
    if path is None:
        return None  # unknown: the full catalogue words the error (with suggestions)
    spec = load_spec_file(path)
    own = {normalize_name(n) for n in (spec.key, spec.name, *spec.aliases)}
    return spec if norm in own or norm.replace("-", "") in {n.replace("-", "") for n in own} else None


def _env_dirs() -> list[Path]:
    raw = os.environ.get(ENV_VAR, "")
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]


# ---- the catalogue -------------------------------------------------------------------------------------------


class Catalog(Mapping[str, ChipSpec]):
    """An immutable mapping ``key -> ChipSpec`` with name resolution. ``origin[key]`` is the file it came from."""

    def __init__(self, chips: Iterable[tuple[ChipSpec, Path]]):
        by_key: dict[str, ChipSpec] = {}
        origin: dict[str, Path] = {}
        for spec, path in chips:  # later entries override earlier ones
            by_key[spec.key] = spec
            origin[spec.key] = path
        self._chips = by_key
        self.origin: Mapping[str, Path] = origin
        # name index: keys win over names, names over aliases; among equals, later (user) chips win.
        index: dict[str, str] = {}
        for attr in ("aliases", "name", "key"):
            for key, spec in by_key.items():
                names = spec.aliases if attr == "aliases" else [getattr(spec, attr)]
                for n in names:
                    index[normalize_name(n)] = key
        self._index = index

    def __getitem__(self, key: str) -> ChipSpec:
        return self._chips[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._chips)

    def __len__(self) -> int:
        return len(self._chips)

    def names(self) -> list[str]:
        """Every accepted lookup name (normalised), sorted."""
        return sorted(self._index)

    def resolve(self, name: str) -> ChipSpec:
        """Look a chip up by key, name or alias. Raises :class:`UnknownNameError` with close matches."""
        norm = normalize_name(name)
        key = self._index.get(norm)
        if key is None:
            compact = norm.replace("-", "")
            key = next((k for n, k in self._index.items() if n.replace("-", "") == compact), None)
        if key is None:
            close = difflib.get_close_matches(norm, list(self._index), n=5, cutoff=0.6)
            suggestions = list(dict.fromkeys(self._index[c] for c in close))
            hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
            raise UnknownNameError(f"unknown chip '{name}'{hint} (run `jalapeno hardware list` for all chips, "
                                   f"or add a YAML with --hardware-dir / {ENV_VAR})")
        return self._chips[key]


def load_catalog(extra_dirs: Iterable[PathLike] | None = None) -> Catalog:
    """Built-in chips plus ``JALAPENO_HARDWARE_PATH`` and ``extra_dirs`` (later overrides earlier by key)."""
    chips: list[tuple[ChipSpec, Path]] = list(_builtin())
    for d in [*_env_dirs(), *(Path(p).expanduser() for p in (extra_dirs or ()))]:
        chips.extend(_load_dir(d))
    return Catalog(chips)


def get_chip(name: str, extra_dirs: Iterable[PathLike] | None = None) -> ChipSpec:
    """Resolve one chip by key, name or alias (see :class:`Catalog`).

    A built-in chip (no extra or ``JALAPENO_HARDWARE_PATH`` directories) is found from the files' name lines
    and only its own file is parsed and validated (the simulator's start-up); a bad spec in another file is
    then reported by ``jalapeno hardware list`` / :func:`load_catalog`, not here."""
    extra = list(extra_dirs or ())
    if normalize_name(name) == LOCAL_KEY:
        return _local_chip(extra)
    if not extra and not _env_dirs() and not _builtin.cache_info().currsize:
        spec = _builtin_chip(name)
        if spec is not None:
            return spec
    return load_catalog(extra).resolve(name)


def _local_chip(extra: list[PathLike]) -> ChipSpec:
    """The probed chip of this machine: ``local`` from the default probe directory (``jalapeno hardware
    probe``'s output), overridden by a ``local`` in ``JALAPENO_HARDWARE_PATH`` / ``extra`` directories."""
    probe_dir = default_probe_dir()
    # the probe directory first, then JALAPENO_HARDWARE_PATH again (above it), then the extra directories
    dirs = [probe_dir, *_env_dirs(), *extra] if (probe_dir / f"{LOCAL_KEY}.yaml").is_file() else extra
    try:
        return load_catalog(dirs).resolve(LOCAL_KEY)
    except UnknownNameError:
        raise UnknownNameError(
            f"no probed chip 'local' (looked in {probe_dir} and the hardware directories): run `jalapeno hardware "
            "probe` once on this machine, or pass --hardware-dir DIR holding a local.yaml") from None


def use_hardware_dirs(dirs: Iterable[PathLike] | None) -> None:
    """Add chip directories for the rest of this process and the worker processes it starts (the CLI's
    ``--hardware-dir`` on sweep/recommend/report): appended to ``JALAPENO_HARDWARE_PATH``, so every
    :func:`get_chip` sees them. Each must be a directory (SpecError otherwise)."""
    add = [str(Path(d).expanduser()) for d in dirs or ()]
    for d in add:
        if not Path(d).is_dir():
            raise SpecError(f"--hardware-dir {d} does not exist or is not a directory")
    if add:
        old = [p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p.strip()]
        os.environ[ENV_VAR] = os.pathsep.join(old + [d for d in add if d not in old])


def list_chips(extra_dirs: Iterable[PathLike] | None = None) -> list[ChipSpec]:
    """All chips, sorted by key."""
    cat = load_catalog(extra_dirs)
    return [cat[k] for k in sorted(cat)]


# ---- introspection used by the CLI, reports and tests ----------------------------------------------------------


def iter_facts(obj: Any, prefix: str = "") -> Iterator[tuple[str, Fact]]:
    """Every :class:`Fact` inside a spec (or sub-model), with its field path, e.g. ``memory.hbm.bandwidth_tbps``."""
    if isinstance(obj, Fact):
        yield prefix, obj
    elif isinstance(obj, BaseModel):
        for name in type(obj).model_fields:
            yield from iter_facts(getattr(obj, name), f"{prefix}.{name}" if prefix else name)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from iter_facts(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):  # memory levels are addressed by name: memory.hbm.bandwidth_tbps
            tag = f".{v.name}" if isinstance(v, MemoryLevel) else f"[{i}]"
            yield from iter_facts(v, f"{prefix}{tag}")


def _v(f: Fact | None) -> float | None:
    return None if f is None else f.value


def chip_summary(spec: ChipSpec) -> dict[str, Any]:
    """A flat, JSON-ready summary of one chip (units in the key names' docs: TFLOPS, GB, TB/s, GB/s, W, USD/h)."""

    def link(n: Any) -> dict[str, Any] | None:
        if n is None:
            return None
        return {"bandwidth_gbps": _v(n.bandwidth_gbps), "latency_us": _v(n.latency_us), "topology": n.topology,
                "domain_size": n.domain_size, "max_hops": n.max_hops}

    return {
        "key": spec.key,
        "name": spec.name,
        "vendor": spec.vendor,
        "status": spec.status,
        "aliases": list(spec.aliases),
        "peak_tflops": {d: f.value for d, f in spec.compute_tflops.items()},
        "memory": [{"name": lv.name, "kind": lv.kind, "capacity_gb": _v(lv.capacity_gb),
                    "bandwidth_tbps": _v(lv.bandwidth_tbps), "resident": lv.resident} for lv in spec.memory],
        "scale_up": link(spec.scale_up),
        "scale_out": link(spec.scale_out),
        "tdp_w": _v(spec.power.tdp_w),
        "loaded_w": _v(spec.power.loaded_w),
        "usd_per_hour": _v(spec.price.usd_per_hour) if spec.price else None,
        "system_size": spec.system_size,
        "confidence": {"status": spec.calibration.status, "label": spec.calibration.label(),
                       "points": spec.calibration.points, "median_error_pct": spec.calibration.median_error_pct,
                       "transferred_from": spec.calibration.transferred_from},
        "sources": [{"field": path, "value": f.value, "source": f.source, "status": f.status}
                    for path, f in iter_facts(spec)],
    }
