"""The package layout's rules, checked on the source (ast): the engine core imports nothing above it, the
top-level packages of ``jalapeno`` form no import cycle, and no function is longer than ~120 lines.

Every import counts — module level, inside functions (lazy) and under ``TYPE_CHECKING`` — because a lazy
import is still a dependency. ``cli.py`` loads each package's ``commands`` module by name (importlib), which
ast does not see and which is the one documented way down from the index.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "jalapeno"

#: what the engine core must never import: everything built on top of it
ABOVE_ENGINE = {"backends", "bench", "server", "report", "sim", "calibration", "study", "demo", "cli", "testing"}
MAX_FUNCTION_LINES = 120


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute names of the ``jalapeno`` modules ``path`` imports, with line numbers."""
    mod = _module_name(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((name, node.lineno))
    return [(n, line) for n, line in out if n == "jalapeno" or n.startswith("jalapeno.")]


def _top(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for path in _sources():
        src = _top(_module_name(path))
        for name, _ in _imports(path):
            dst = _top(name)
            if src and dst and dst != src:
                edges[src].add(dst)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def test_engine_core_imports_nothing_above_it():
    bad = [
        f"{path.relative_to(SRC)}:{line} imports {name}"
        for path in sorted((SRC / "engine").rglob("*.py"))
        for name, line in _imports(path)
        if _top(name) in ABOVE_ENGINE
    ]
    assert not bad, "engine/ must not import the packages built on it:\n" + "\n".join(bad)


def test_no_import_cycle_between_packages():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_cycles():
    """The guard above can fail: a two-package and a three-package cycle are found, a chain is not."""
    assert _cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}}) == []


def test_sim_is_built_on_the_engine_not_the_reverse():
    edges = _graph()
    assert "engine" in edges["sim"] and "sim" not in edges["engine"]
    assert "sim" not in edges["backends"]  # the real backends know nothing of the simulator


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_function_is_longer_than_the_limit(path):
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"split these functions (at most {MAX_FUNCTION_LINES} lines): {', '.join(long)}"
