"""Import rules of the torch backend: the model modules describe models only; how a step runs (the fused CPU
decode kernel or the model's forward) is the runner's business, so nothing under ``backends/torch/models/``
imports ``fused_decode`` (that import made the ``fused_decode <-> models`` cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

import jalapeno

TORCH = Path(jalapeno.__file__).parent / "backends" / "torch"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every module and name a file imports, at any depth (function bodies too)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = "." * node.level + (node.module or "")
            out += [(node.lineno, mod)] + [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return out


def test_model_modules_import_nothing_from_fused_decode():
    files = sorted((TORCH / "models").glob("*.py"))
    assert {f.stem for f in files} >= {"layers", "llama", "moe", "gpt_oss", "deepseek"}
    bad = [f"{f.name}:{line} imports {name}" for f in files for line, name in _imports(f) if "fused_decode" in name]
    assert not bad, bad


def test_the_import_walker_sees_function_level_imports(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from jalapeno.backends.torch import fused_decode\n")
    assert (2, "jalapeno.backends.torch.fused_decode") in _imports(src)


def _module_name(path: Path) -> str:
    rel = path.relative_to(TORCH.parent.parent.parent).with_suffix("")  # from src/
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _graph() -> dict[str, set[str]]:
    """Explicit imports between the torch backend's own modules (``from P import m`` counts as importing the
    module ``P.m`` when that is one)."""
    files = {_module_name(f): f for f in TORCH.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        edges = set()
        for _, name in _imports(path):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != mod:
                edges.add(name)
        graph[mod] = edges
    return graph


def test_no_import_cycle_in_the_torch_backend():
    graph = _graph()
    assert "jalapeno.backends.torch.runner" in graph["jalapeno.backends.torch.backend"]
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            assert state.get(nxt) != 1, " -> ".join(path + [node, nxt])
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
