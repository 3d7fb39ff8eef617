"""The native build's loader, without compiling: a build is served only when made from exactly the current sources
for this interpreter; a stale, foreign, incomplete or unloadable build, or ``JALAPENO_NATIVE=0``, leaves pure
Python. Fake builds here (index files and placeholder ``.so`` files); tests/native/test_native_build.py compiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jalapeno
from jalapeno import native
from jalapeno.native import build as nb

SRC = Path(jalapeno.__file__).resolve().parent.parent


def fake_build(root: Path, sources: list[str], pkg_parent: Path, *, abi=None, mypy="9.9", digest=None,
               files=True) -> Path:
    """A build folder as ``build-native`` writes it, with empty placeholder modules."""
    abi = abi or native.abi_tag()
    digest = digest or native.source_digest(sources, abi, mypy, root=str(pkg_parent))
    folder = root / digest
    folder.mkdir(parents=True)
    modules = {m: m.replace(".", "/") + abi for m in native.MODULES}
    modules["0123abcd__mypyc"] = "0123abcd__mypyc" + abi
    if files:
        for f in modules.values():
            (folder / f).parent.mkdir(parents=True, exist_ok=True)
            (folder / f).write_bytes(b"")
    manifest = {"sources": {s: native.file_digest((pkg_parent / s).read_bytes()) for s in sources}, "mypy": mypy}
    (folder / native.MANIFEST).write_text(json.dumps(manifest))
    (folder / native.INDEX).write_text("\n".join([native.FORMAT, f"digest {digest}", f"abi {abi}", f"mypy {mypy}",
                                                  *(f"source {s}" for s in sources),
                                                  *(f"module {m} {f}" for m, f in modules.items())]) + "\n")
    return folder


@pytest.fixture
def tree(tmp_path):
    """A package folder with two sources."""
    pkg = tmp_path / "src"
    (pkg / "jalapeno" / "engine").mkdir(parents=True)
    (pkg / "jalapeno" / "__init__.py").write_text("x = 1\n")
    (pkg / "jalapeno" / "engine" / "a.py").write_text("y = 2\n")
    return pkg, ["jalapeno/__init__.py", "jalapeno/engine/a.py"]


def test_digest_follows_every_byte_the_abi_and_mypy(tree):
    pkg, files = tree
    d = native.source_digest(files, ".abi.so", "1.0", root=str(pkg))
    assert d == native.source_digest(files, ".abi.so", "1.0", root=str(pkg))
    assert d != native.source_digest(files, ".other.so", "1.0", root=str(pkg))
    assert d != native.source_digest(files, ".abi.so", "1.1", root=str(pkg))
    assert d != native.source_digest(files[:1], ".abi.so", "1.0", root=str(pkg))
    (pkg / files[1]).write_text("y = 3\n")  # one byte
    assert d != native.source_digest(files, ".abi.so", "1.0", root=str(pkg))
    # content moved between files (same bytes overall) changes it too
    (pkg / files[0]).write_text("x = 1\ny")
    (pkg / files[1]).write_text(" = 2\n")
    assert d != native.source_digest(files, ".abi.so", "1.0", root=str(pkg))
    (pkg / files[1]).unlink()
    assert native.source_digest(files, ".abi.so", "1.0", root=str(pkg)) is None


def test_only_a_current_complete_build_for_this_python_is_found(tree, tmp_path):
    pkg, files = tree
    root = tmp_path / "cache"
    folder, why = native.find_current(str(root), str(pkg))
    assert folder is None and why.startswith("no build")
    fake_build(root, files, pkg, abi=".cpython-0-other.so")
    folder, why = native.find_current(str(root), str(pkg))
    assert folder is None and "another Python" in why
    good = fake_build(root, files, pkg)
    assert native.find_current(str(root), str(pkg)) == (str(good), "")
    (pkg / files[1]).write_text("y = 2  # edited\n")
    folder, why = native.find_current(str(root), str(pkg))
    assert folder is None and why.startswith("stale")
    (pkg / files[1]).write_text("y = 2\n")  # back as built: served again
    assert native.find_current(str(root), str(pkg)) == (str(good), "")
    (good / (native.MODULES[0].replace(".", "/") + native.abi_tag())).unlink()  # a module gone: not complete
    assert native.find_current(str(root), str(pkg))[0] is None
    # an index whose digest is not its sources' (a damaged or hand-edited build) is never served
    fake_build(root, files, pkg, digest="0" * 32, mypy="1.0")
    assert native.find_current(str(root), str(pkg))[0] is None


def _probe(env_extra: dict, code: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "JALAPENO_NATIVE"}
    env.update(env_extra, PYTHONPATH=str(SRC))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


PROBE = """
import json, sys, jalapeno, jalapeno.native as n
before = n.served()
import jalapeno.engine.engine as e
print(json.dumps({"before": before, "after": n.served(), "file": e.__file__, "active": n.active(),
                  "finders": sum(isinstance(f, n._Finder) for f in sys.meta_path)}))
"""


def test_a_current_build_is_served_and_one_that_cannot_load_falls_back_to_python(tmp_path):
    # a fake build of the real sources (its digest covers one real file): served — and as its files are empty, the
    # first compiled import fails to load the group library and the process goes on in pure Python, saying why
    cache = tmp_path / "cache"
    folder = fake_build(cache / "native", ["jalapeno/errors.py"], SRC)
    got = _probe({"JALAPENO_CACHE": str(cache)}, PROBE)
    assert got["before"] == [str(folder), ""]
    assert got["after"][0] is None and "failed to load" in got["after"][1]
    assert got["file"].endswith("engine.py") and got["active"] == {} and got["finders"] == 0
    off = _probe({"JALAPENO_CACHE": str(cache), "JALAPENO_NATIVE": "0"}, PROBE)
    assert off["before"] == [None, "disabled by JALAPENO_NATIVE=0"] and off["file"].endswith("engine.py")
    none = _probe({"JALAPENO_CACHE": str(tmp_path / "empty")}, PROBE)
    assert none["before"][0] is None and none["before"][1].startswith("no build")


def cli(*args: str) -> int:
    from jalapeno.cli import main

    try:
        main(["build-native", *args])
    except SystemExit as exc:
        return exc.code or 0
    return 0


def test_status_says_why_and_names_the_changed_files(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JALAPENO_CACHE", str(tmp_path))
    monkeypatch.delenv("JALAPENO_NATIVE", raising=False)
    assert cli("--status") == 0
    assert "not active — no build in" in capsys.readouterr().out
    folder = fake_build(tmp_path / "native", ["jalapeno/errors.py"], SRC)
    assert cli("--status") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"native build: active — {len(native.MODULES)} modules from {folder}")
    monkeypatch.setenv("JALAPENO_NATIVE", "0")
    assert cli("--status") == 0
    assert "disabled by JALAPENO_NATIVE=0 (a current build exists" in capsys.readouterr().out
    monkeypatch.delenv("JALAPENO_NATIVE")
    # the build made from other bytes of errors.py: stale, and the file is named
    manifest = json.loads((folder / native.MANIFEST).read_text())
    manifest["sources"]["jalapeno/errors.py"] = native.file_digest(b"other bytes")
    (folder / native.MANIFEST).write_text(json.dumps(manifest))
    index = (folder / native.INDEX).read_text().replace(folder.name, "f" * 32)
    (folder / native.INDEX).write_text(index)
    assert cli("--status") == 0
    out = capsys.readouterr().out
    assert "not active — stale" in out and "changed since the newest build: jalapeno/errors.py" in out
    assert cli("--clean") == 0
    assert "removed 1 native build(s)" in capsys.readouterr().out and not (tmp_path / "native").exists()


def test_missing_mypy_is_one_line_and_changes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JALAPENO_CACHE", str(tmp_path))
    monkeypatch.setattr(nb, "find_spec", lambda name: None)
    assert cli() == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'jalapeno[native]'" in err and "mypy" in err
    assert not (tmp_path / "native").exists()


def test_import_closure_by_hand(tmp_path):
    # a small package: every import form, at module level or in a function, relative or absolute
    p = tmp_path / "jalapeno"
    for d in ("a", "b", "c"):
        (p / d).mkdir(parents=True)
        (p / d / "__init__.py").write_text("")
    (p / "__init__.py").write_text("")
    (p / "a" / "m.py").write_text("from . import n\nfrom ..b.x import f\nimport os\n"
                                  "def g():\n    import jalapeno.c.y\n")
    (p / "a" / "n.py").write_text("")
    (p / "b" / "x.py").write_text("def f(): pass\n")
    (p / "c" / "y.py").write_text("from jalapeno.c import z\n")
    (p / "c" / "z.py").write_text("")
    (p / "c" / "unused.py").write_text("")
    got = nb.import_closure(tmp_path, ("jalapeno.a.m",))
    assert got == sorted(["jalapeno/__init__.py", "jalapeno/a/__init__.py", "jalapeno/a/m.py", "jalapeno/a/n.py",
                          "jalapeno/b/__init__.py", "jalapeno/b/x.py", "jalapeno/c/__init__.py", "jalapeno/c/y.py",
                          "jalapeno/c/z.py"])


def test_the_real_closure_covers_the_compiled_modules_and_what_they_read():
    got = set(nb.import_closure(SRC))
    compiled = {m.replace(".", "/") + ".py" for m in native.MODULES}
    assert compiled <= got
    # the per-sequence classes the compiled code reads, and the package that activates the build
    assert {"jalapeno/engine/sequence.py", "jalapeno/perf/shape.py", "jalapeno/__init__.py",
            "jalapeno/native/__init__.py"} <= got
    assert not any(f.startswith(("jalapeno/server/", "jalapeno/backends/torch/")) for f in got)


def test_a_long_pure_python_sweep_names_the_build_and_nothing_else_does(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(native.ENV, raising=False)
    monkeypatch.setattr(native, "_served", None)
    monkeypatch.setattr(native, "_why", "no build in /x")
    hint = native.speed_hint(native.HINT_AFTER_S)
    assert hint is not None and "`jalapeno build-native`" in hint and "(no build in /x)" in hint
    assert native.speed_hint(native.HINT_AFTER_S - 0.1) is None  # a short run: nothing
    monkeypatch.setenv(native.ENV, "0")
    assert native.speed_hint(1e9) is None  # the user chose pure Python
    monkeypatch.delenv(native.ENV)
    monkeypatch.setattr(native, "_served", "/a/build")
    assert native.speed_hint(1e9) is None  # a build served this process (and its workers)

    # a real one-point sweep through the CLI, the threshold at 0: the line on stderr only, once; resumed
    # (nothing ran): no line
    from jalapeno.cli import main

    monkeypatch.setattr(native, "_served", None)
    monkeypatch.setattr(native, "HINT_AFTER_S", 0.0)
    spec = tmp_path / "s.yaml"
    spec.write_text("name: t\nmodels: [llama-3.1-8b]\nhardware: [h200]\nmax_chips: 1\n"
                    "workloads: [{isl: 128, osl: 16}]\nconcurrencies: [1]\n")
    for ran in (True, False):
        try:
            main(["sweep", str(spec), "--out", str(tmp_path / "o"), "-q", "-j", "1"])
        except SystemExit as exc:
            assert not exc.code
        out, err = capsys.readouterr()
        assert ("1 run (1 ok" if ran else "1 already done") in out and "build-native" not in out
        assert err.count("`jalapeno build-native`") == (1 if ran else 0), err
