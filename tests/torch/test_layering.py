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
