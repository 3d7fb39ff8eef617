"""Build a C kernel shipped with the package into a shared library at first use, and load it with ctypes.

The CPU decode kernel (``cpu_decode.c``) is plain C with OpenMP: it is compiled on the machine that runs it
(``-O3 -march=native``), in about a second, with the system C compiler (``$CC``, else ``cc``/``gcc``/``clang``).
No PyTorch headers are involved, and the library is cached under ``$JALAPENO_CACHE/kernels`` (default
``~/.cache/jalapeno``) keyed by the source, the compiler and its flags, so later processes just load it.

When no compiler is found, or it fails, :func:`load_kernel` raises :class:`KernelUnavailable` with the reason;
callers fall back to their PyTorch path (the kernels are an optimisation, never a requirement).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

#: flag sets tried in order: the first that compiles is used (no OpenMP -> one thread; no -march -> generic)
FLAG_SETS = (
    ("-O3", "-march=native", "-fopenmp", "-std=gnu11", "-shared", "-fPIC"),
    ("-O3", "-mcpu=native", "-fopenmp", "-std=gnu11", "-shared", "-fPIC"),
    ("-O3", "-march=native", "-std=gnu11", "-shared", "-fPIC"),
    ("-O3", "-std=gnu11", "-shared", "-fPIC"),
)


class KernelUnavailable(RuntimeError):
    """The C kernel could not be built or loaded here; the message says why."""


def cache_root() -> Path:
    env = os.environ.get("JALAPENO_CACHE")
    if env:
        return Path(env) / "kernels"
    try:
        return Path.home() / ".cache" / "jalapeno" / "kernels"
    except RuntimeError:  # no home directory (some service accounts): a per-machine temp folder
        return Path(tempfile.gettempdir()) / "jalapeno-kernels"


def find_compiler() -> str | None:
    cc = os.environ.get("CC")
    if cc:
        return shutil.which(cc.split()[0]) and cc
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return name
    return None


def _version(cc: str) -> str:
    try:
        out = subprocess.run([*cc.split(), "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.splitlines()[0] if out.stdout else cc
    except (OSError, subprocess.SubprocessError):
        return cc


def _compile(cc: str, src: Path, flags: tuple[str, ...], out: Path) -> str | None:
    """Compile ``src`` to ``out`` atomically; returns None on success, else the compiler's complaint."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
    except OSError as exc:
        return f"cannot write {out.parent}: {exc}"
    try:
        res = subprocess.run([*cc.split(), *flags, str(src), "-o", tmp, "-lm"], capture_output=True, text=True,
                             timeout=300)
        if res.returncode != 0:
            return (res.stderr or res.stdout).strip() or f"exit status {res.returncode}"
        os.replace(tmp, out)  # atomic: concurrent builders (test workers) never see a half-written library
        return None
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@lru_cache(maxsize=None)
def load_kernel(name: str) -> tuple[ctypes.CDLL, tuple[str, ...]]:
    """``(library, flags it was built with)`` for ``jalapeno/kernels/<name>.c``; built on first use, cached on
    disk and per process. Raises :class:`KernelUnavailable` when that is not possible here."""
    src = Path(__file__).with_name(f"{name}.c")
    if not src.is_file():
        raise KernelUnavailable(f"kernel source {src} is missing from the installation")
    cc = find_compiler()
    if cc is None:
        raise KernelUnavailable("no C compiler found (set $CC, or install gcc/clang)")
    code = src.read_bytes()
    version = _version(cc)
    errors = []
    for flags in FLAG_SETS:
        key = hashlib.sha256(code + "|".join((version, *flags)).encode()).hexdigest()[:16]
        lib_path = cache_root() / f"{name}-{key}.so"
        if not lib_path.is_file():
            err = _compile(cc, src, flags, lib_path)
            if err is not None:
                errors.append(f"{' '.join(flags)}: {err.splitlines()[-1] if err else 'failed'}")
                continue
        try:
            return ctypes.CDLL(str(lib_path)), flags
        except OSError as exc:
            errors.append(f"loading {lib_path}: {exc}")
    raise KernelUnavailable(f"could not build {src.name} with {cc}: " + "; ".join(errors[-2:]))
