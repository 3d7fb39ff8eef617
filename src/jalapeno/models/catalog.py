"""The model catalogue: shipped Hugging Face configs under ``jalapeno/models/configs/<name>.json``.

Each file is a wrapper ``{"model", "sources", "confidence", "hf_ids", "config"}``: ``config`` is the model's
``config.json`` verbatim, ``sources`` where it was read from, ``hf_ids`` the Hugging Face repo ids that
resolve to this entry. :func:`load_model` accepts a catalogue name, one of those ids, a path to a
``config.json`` (plain or wrapped) or a directory holding one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from jalapeno.errors import ConfigError, UnknownNameError
from jalapeno.models.arch import ModelArch
from jalapeno.models.hf_config import arch_from_config


@dataclass(frozen=True)
class CatalogEntry:
    """One shipped model: its catalogue name, provenance and the Hugging Face ids it answers to."""

    name: str
    model: str
    sources: tuple[str, ...]
    confidence: str
    hf_ids: tuple[str, ...]


#: the shipped configs (package data, installed as files beside this module, as the chip YAMLs are; read
#: with ``pathlib``: ``importlib.resources``' readers cost ≈ 5 ms of imports at every ``jalapeno simulate`` start)
CONFIG_DIR = Path(__file__).resolve().parent / "configs"


@lru_cache(maxsize=1)
def _entries() -> dict[str, tuple[CatalogEntry, str]]:
    """name -> (entry, JSON text), read once from the package data."""
    out: dict[str, tuple[CatalogEntry, str]] = {}
    for item in sorted(CONFIG_DIR.iterdir(), key=lambda p: p.name):
        if not item.name.endswith(".json"):
            continue
        text = item.read_text(encoding="utf-8")
        raw = json.loads(text)
        name = item.name[: -len(".json")]
        entry = CatalogEntry(
            name=name,
            model=raw.get("model", name),
            sources=tuple(raw.get("sources") or ()),
            confidence=raw.get("confidence", ""),
            hf_ids=tuple(raw.get("hf_ids") or ()),
        )
        out[name] = (entry, text)
    return out


def list_models() -> list[str]:
    """Names of the shipped models, sorted."""
    return sorted(_entries())


def catalog_entry(name: str) -> CatalogEntry:
    """The catalogue entry for ``name`` (any spelling :func:`resolve_name` accepts)."""
    return _entries()[resolve_name(name)][0]


def _aliases() -> dict[str, set[str]]:
    """lower-case alias -> catalogue names: the name, each HF id, and each HF id without its org."""
    index: dict[str, set[str]] = {}
    for name, (entry, _) in _entries().items():
        keys = {name}
        for hf in entry.hf_ids:
            keys |= {hf.lower(), hf.lower().rsplit("/", 1)[-1]}
        for key in keys:
            index.setdefault(key, set()).add(name)
    return index


def resolve_name(query: str) -> str:
    """Catalogue name for ``query`` (case-insensitive; HF ids such as ``deepseek-ai/DeepSeek-R1`` accepted).
    Raises :class:`UnknownNameError` with close matches, or when ``query`` matches several entries."""
    q = query.strip().lower()
    index = _aliases()
    for key in (q, q.rsplit("/", 1)[-1]):
        hits = index.get(key)
        if hits and len(hits) == 1:
            return next(iter(hits))
        if hits:
            raise UnknownNameError(f"model {query!r} is ambiguous: it matches {', '.join(sorted(hits))}")
    import difflib  # only for the error message

    close = difflib.get_close_matches(q, list(index), n=5, cutoff=0.5)
    close_names = sorted({n for key in close for n in index[key]})
    hint = f"did you mean {', '.join(close_names)}? " if close_names else ""
    raise UnknownNameError(
        f"unknown model {query!r}; {hint}see `jalapeno models list`, or pass a path to a config.json"
    )


def load_model(name_or_path: str | Path) -> ModelArch:
    """A :class:`ModelArch` from a catalogue name / HF id, a ``config.json`` path, or a directory with one."""
    path = Path(name_or_path).expanduser()
    if path.exists():
        return load_config_file(path)
    text = str(name_or_path)
    try:
        name = resolve_name(text)
    except UnknownNameError:
        if text.endswith(".json") or "/" in text and text.startswith((".", "/", "~")):
            raise ConfigError(f"no such file: {text}") from None
        raise
    _, raw = _entries()[name]
    return arch_from_config(json.loads(raw), name, source=f"configs/{name}.json")


def load_config_file(path: str | Path) -> ModelArch:
    """A :class:`ModelArch` from a ``config.json`` (plain or catalogue-wrapped) or a directory holding one."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(f"no config.json at {path}")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    name = path.parent.name if path.name == "config.json" else path.stem
    return arch_from_config(cfg, name or path.stem, source=str(path))
