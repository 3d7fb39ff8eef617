"""``jalapeno build-native``: compile :data:`jalapeno.native.MODULES` with mypyc into the build cache.

The package's ``.py`` files are copied to a temporary folder (mypyc needs the package layout), mypyc compiles the
modules there in place (its group library plus one shim per module), and the ``.so`` files move into
``cache_root()/<digest>`` with an index (read at every start by :func:`jalapeno.native.activate`) and a manifest.
The digest covers every ``jalapeno`` module mypy read while compiling (the compiled ones and those whose types and
constants they were compiled against), the interpreter's extension ABI tag and the mypy version: edit any of them
and the build no longer matches (pure Python until the next ``build-native``). The source tree is never written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path

from jalapeno import native
from jalapeno.errors import JalapenoError

INSTALL_HINT = "pip install 'jalapeno[native]'"
MYPYC_INI = Path(__file__).with_name("mypyc.ini")
#: builds kept in the cache besides the new one (other source versions: another branch, another Python)
KEEP = 3


class NativeBuildError(JalapenoError):
    """The native build cannot be made here (a tool missing, mypyc failed); the tree stays pure Python."""


def package_dir() -> Path:
    """The ``jalapeno`` package folder whose sources are compiled (this one)."""
    return Path(native.__file__).resolve().parent.parent


def missing_tool() -> str | None:
    """One line naming what is missing to build (and what to install), or None."""
    for mod in ("mypy", "mypyc", "setuptools"):
        if find_spec(mod) is None:
            what = "mypy (with mypyc)" if mod.startswith("mypy") else "setuptools"
            return f"the native build needs {what}, which is not installed: {INSTALL_HINT}; the simulator runs " \
                   "in pure Python meanwhile"
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"the native build needs a C compiler ({cc} not found): install one (e.g. apt-get install gcc); " \
               "the simulator runs in pure Python meanwhile"
    inc = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(inc, "Python.h")):
        return f"the native build needs Python's C headers (no Python.h in {inc}): install them (e.g. apt-get " \
               "install python3-dev); the simulator runs in pure Python meanwhile"
    return None


def _copy_sources(src: Path, dst: Path) -> None:
    def ignore(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n == "__pycache__" or (os.path.isfile(os.path.join(folder, n))
                                                          and not n.endswith((".py", ".pyi")))]

    shutil.copytree(src, dst, ignore=ignore)


def import_closure(root: Path, modules=native.MODULES) -> list[str]:
    """The ``jalapeno`` source files ``modules`` import, directly or not (every ``import`` statement, at module
    level or in a function, reachable or not, and every parent package), as paths under ``root``: a superset of
    what mypy reads for their types and constants (a change to any of them may change the compiled code)."""
    import ast

    def path(mod: str) -> str | None:
        base = "/".join(mod.split("."))
        for rel in (base + ".py", base + "/__init__.py"):
            if (root / rel).is_file():
                return rel
        return None

    seen: dict[str, str] = {}
    todo = list(modules)
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        rel = path(mod)
        if rel is None:  # a name imported from a module, not a module
            continue
        seen[mod] = rel
        parts = mod.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        base = parts if rel.endswith("__init__.py") else parts[:-1]
        for node in ast.walk(ast.parse((root / rel).read_bytes(), rel)):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.split(".")[0] == "jalapeno"]
            elif isinstance(node, ast.ImportFrom):
                target = ".".join(base[: len(base) - node.level + 1] + [node.module or ""]) if node.level \
                    else node.module or ""
                target = target.rstrip(".")
                if target.split(".")[0] == "jalapeno":
                    todo += [target, *(f"{target}.{a.name}" for a in node.names)]
    return sorted(seen.values())


def build(*, log=print) -> Path:
    """Compile, install into the cache, check that a fresh process of this tree loads every module from it;
    returns the build folder. Raises :class:`NativeBuildError` with one line when a tool is missing."""
    why = missing_tool()
    if why:
        raise NativeBuildError(why)
    from mypy.version import __version__ as mypy_version

    pkg = package_dir()
    root = Path(native.cache_root())
    abi = native.abi_tag()
    opt = os.environ.get("MYPYC_OPT_LEVEL", "3")
    t0 = time.monotonic()
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise NativeBuildError(f"cannot write the native build cache {root} ({exc.strerror or exc}): set "
                               "JALAPENO_CACHE to a writable folder; the tree stays pure Python") from None
    log(f"compiling {len(native.MODULES)} modules of {pkg} with mypyc {mypy_version} (-O{opt}): about a minute "
        "of one core")
    with tempfile.TemporaryDirectory(prefix="jalapeno-native-") as name:
        tmp = Path(name)
        _copy_sources(pkg, tmp / "jalapeno")
        files = [m.replace(".", "/") + ".py" for m in native.MODULES]
        env = {**os.environ, "MYPYC_OPT_LEVEL": opt}
        p = subprocess.run([sys.executable, "-m", "mypyc", "--config-file", str(MYPYC_INI), *files], cwd=tmp,
                           env=env, capture_output=True, text=True)
        if p.returncode:
            tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-15:])
            raise NativeBuildError(f"mypyc failed (exit {p.returncode}); the tree stays pure Python:\n{tail}")
        produced = {m: tmp.joinpath(*m.split(".")).with_name(m.rsplit(".", 1)[1] + abi) for m in native.MODULES}
        produced.update({f.name[: -len(abi)]: f for f in tmp.glob(f"*__mypyc{abi}")})
        missing = [str(f.relative_to(tmp)) for f in produced.values() if not f.is_file()]
        if missing or len(produced) == len(native.MODULES):
            raise NativeBuildError(f"mypyc ran but did not produce {missing or 'its group library'}; the tree "
                                   "stays pure Python")
        sources = import_closure(tmp)
        digest = native.source_digest(sources, abi, mypy_version, root=str(tmp))
        stage = root / f".build-{os.getpid()}-{int(time.time())}"
        stage.mkdir()
        try:
            modules = {}
            for mod, f in produced.items():  # in the package's layout (compiled modules set __file__ so)
                modules[mod] = str(f.relative_to(tmp))
                (stage / modules[mod]).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, stage / modules[mod])
            manifest = {
                "format": native.FORMAT, "digest": digest, "abi": abi, "python": sys.version.split()[0],
                "mypy": mypy_version, "opt_level": opt, "built": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "package": str(pkg), "modules": modules,
                "sources": {s: native.file_digest((tmp / s).read_bytes()) for s in sources},
            }
            (stage / native.MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
            lines = [native.FORMAT, f"digest {digest}", f"abi {abi}", f"mypy {mypy_version}",
                     *(f"source {s}" for s in sources), *(f"module {m} {f}" for m, f in modules.items())]
            (stage / native.INDEX).write_text("\n".join(lines) + "\n")
            final = root / digest
            if final.exists():  # the same sources built again: replace
                old = root / f".old-{os.getpid()}-{digest}"
                final.rename(old)
                shutil.rmtree(old, ignore_errors=True)
            stage.rename(final)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
    _check_loads(final, pkg)
    _prune(root, final)
    log(f"native build ready in {time.monotonic() - t0:.0f} s: {len(native.MODULES)} modules in {final}; new "
        f"processes of this tree use it while its sources stay as built ({len(sources)} files checked at "
        f"start); {native.ENV}=0 turns it off")
    return final


def _check_loads(folder: Path, pkg: Path) -> None:
    """A fresh process of this tree must import every compiled module from ``folder``; else the build is removed."""
    env = {k: v for k, v in os.environ.items() if k != native.ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(pkg.parent), *filter(None, [os.environ.get("PYTHONPATH")])])
    code = ("import importlib, json, jalapeno.native as n\n"
            "for m in n.MODULES: importlib.import_module(m)\n"
            "print(json.dumps([sorted(n.active()), n.served()[1]]))")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    try:
        got, why = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        got, why = [], (p.stderr.strip().splitlines() or ["no output"])[-1]
    if sorted(native.MODULES) != got:
        shutil.rmtree(folder, ignore_errors=True)
        raise NativeBuildError(f"the build does not load here ({why or 'modules served: ' + str(got)}); removed, "
                               "the tree stays pure Python")


def _prune(root: Path, keep: Path) -> None:
    others = [Path(f) for f, _ in native.builds(str(root)) if Path(f) != keep]
    for old in others[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)


def clean(*, log=print) -> int:
    """Remove every build (the cache folder) and any compiled module left in the source tree by an in-place
    build (they would shadow the sources); returns how many builds were removed."""
    root = Path(native.cache_root())
    n = len(native.builds(str(root)))
    if root.exists():
        shutil.rmtree(root)
    log(f"removed {n} native build(s) from {root}")
    for f in in_tree_extensions():
        f.unlink()
        log(f"removed {f} (an in-place build's module)")
    return n


def in_tree_extensions(pkg: Path | None = None) -> list[Path]:
    """Compiled modules inside the source tree (an in-place mypyc build, e.g. the old
    ``benchmarks/mypyc_build.sh`` of the sixteenth session, now removed): they win over the ``.py`` files at import whatever the sources say."""
    pkg = package_dir() if pkg is None else pkg
    out = []
    for m in native.MODULES:
        out += pkg.parent.joinpath(*m.split(".")[:-1]).glob(m.rsplit(".", 1)[1] + ".*.so")
    out += pkg.parent.glob("*__mypyc*.so")
    return sorted(out)


def status_lines() -> tuple[bool, list[str]]:
    """(whether a build is used by new processes of this tree, lines saying which or why not)."""
    folder, why = native.find_current()
    lines = []
    if os.environ.get(native.ENV, "").strip() == "0":
        state = f"a current build exists in {folder}" if folder else why
        lines.append(f"native build: not active — disabled by {native.ENV}=0 ({state})")
        on = False
    elif folder:
        m = _manifest(Path(folder))
        lines.append(f"native build: active — {len(native.MODULES)} modules from {folder} (mypy {m.get('mypy')}, "
                     f"-O{m.get('opt_level')}, built {m.get('built')})")
        on = True
    else:
        lines.append(f"native build: not active — {why}")
        if why.startswith("stale"):
            changed = _changed_since_newest()
            if changed:
                more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
                lines.append(f"  changed since the newest build: {', '.join(changed[:5])}{more}")
        on = False
    strays = in_tree_extensions()
    if strays:
        lines.append(f"  warning: {len(strays)} compiled module(s) inside the source tree ({strays[0]} ...) shadow "
                     "the sources whatever the above says: jalapeno build-native --clean removes them")
    return on, lines


def _manifest(folder: Path) -> dict:
    try:
        return json.loads((folder / native.MANIFEST).read_text())
    except (OSError, ValueError):
        return {}


def _changed_since_newest() -> list[str]:
    abi = native.abi_tag()
    for folder, index in native.builds():
        if index["abi"] != abi:
            continue
        old = _manifest(Path(folder)).get("sources", {})
        pkg_parent = package_dir().parent
        out = []
        for rel, digest in old.items():
            f = pkg_parent / rel
            if not f.is_file():
                out.append(f"{rel} (removed)")
            elif native.file_digest(f.read_bytes()) != digest:
                out.append(rel)
        return out
    return []
