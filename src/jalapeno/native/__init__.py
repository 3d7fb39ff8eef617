"""The optional native build of the simulator's per-event modules (issue #19): the same ``.py`` sources compiled with
mypyc by ``jalapeno build-native`` into a cache folder outside the source tree, and served from there at import
when, and only when, the build was made from exactly the sources this tree holds now.

The pure-Python tree is the product and the default; nothing here is needed to run it. :func:`activate` runs first
thing in ``import jalapeno`` (standard library only, no numpy / pydantic): unless ``JALAPENO_NATIVE=0`` it looks
for builds under :func:`cache_root`, recomputes each one's digest from the current files (every ``jalapeno``
module the compile read, the extension ABI tag, the mypy version that built it) and, where one matches, puts a
``sys.meta_path`` finder in front that loads exactly :data:`MODULES` (and mypyc's group library) from its ``.so``
files. Any source edited since the build: no match, pure Python, silently (``jalapeno build-native --status``
says why). :func:`active` says which modules came from a build.
"""

import os
import sys

#: the modules compiled, in one place (``perf/types.py`` is not: docs/performance.md, sixteenth to eighteenth
#: sessions)
MODULES = (
    "jalapeno.engine.scheduler",
    "jalapeno.engine.lockstep",
    "jalapeno.engine.block_manager",
    "jalapeno.engine.engine",
    "jalapeno.sim.backend",
    "jalapeno.perf.model",
    "jalapeno.perf.ops",
    "jalapeno.sim.client",
    "jalapeno.perf.shape",
    "jalapeno.engine.timing",
    "jalapeno.engine.sequence",
    "jalapeno.engine.batch",
)
#: ``JALAPENO_NATIVE=0`` turns the build off for a process (pure Python even where a current build exists)
ENV = "JALAPENO_NATIVE"
#: a build folder's index, written last (the folder appears complete, by one rename): read at every start
INDEX = "index.txt"
#: the same, for people and ``--status``: module -> file, per-file digests, mypy version, build time
MANIFEST = "manifest.json"
FORMAT = "jalapeno-native 1"

_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: this process's state: the build folder served (or None) and why not
_served: str | None = None
_why = "not checked"
_finder = None


def cache_root() -> str:
    """Where builds live: ``$JALAPENO_CACHE/native``, else ``~/.cache/jalapeno/native`` (as the C kernels'
    :func:`jalapeno.kernels.cpu_build.cache_root`), else a per-machine temp folder."""
    env = os.environ.get("JALAPENO_CACHE")
    if env:
        return os.path.join(env, "native")
    home = os.path.expanduser("~")
    if home and home != "~":
        return os.path.join(home, ".cache", "jalapeno", "native")
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", "jalapeno-native")  # pragma: no cover


def abi_tag() -> str:
    """The extension-module suffix of this interpreter (``.cpython-311-x86_64-linux-gnu.so``): Python version,
    ABI and platform in one string."""
    import _imp

    return _imp.extension_suffixes()[0]


def _hasher():
    try:
        from _blake2 import blake2b  # the builtin: hashlib would load OpenSSL (≈ 7 ms)
    except ImportError:  # pragma: no cover
        from hashlib import blake2b
    return blake2b(digest_size=16)


def file_digest(data: bytes) -> str:
    h = _hasher()
    h.update(data)
    return h.hexdigest()


def source_digest(files: "list[str]", abi: str, mypy_version: str, root: str | None = None,
                  read=None) -> str | None:
    """The digest a build is keyed by: ``abi``, ``mypy_version`` and every file of ``files`` (paths under
    ``root``, by default the folder holding the ``jalapeno`` package: its name, length and bytes, in order).
    None when a file is missing. ``read``: path -> bytes (default: the file's)."""
    root = _PKG_PARENT if root is None else root
    h = _hasher()
    h.update(f"{FORMAT}\0{abi}\0{mypy_version}\0".encode())
    for rel in files:
        if read is None:
            try:  # os-level reads: ≈ 5 µs a file less than open(): this runs at every start while a build exists
                fd = os.open(os.path.join(root, rel), os.O_RDONLY)
                try:
                    data = b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
                finally:
                    os.close(fd)
            except OSError:
                return None
        else:
            data = read(rel)
        h.update(rel.encode() + b"\0" + len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def read_index(folder: str) -> "dict | None":
    """A build folder's index: ``digest``, ``abi``, ``mypy``, ``sources`` (list), ``modules`` (name -> file);
    None when it has none or not in this format."""
    try:
        with open(os.path.join(folder, INDEX), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if not lines or lines[0] != FORMAT:
        return None
    out: dict = {"sources": [], "modules": {}}
    for line in lines[1:]:
        key, _, value = line.partition(" ")
        if key == "source":
            out["sources"].append(value)
        elif key == "module":
            name, _, file = value.partition(" ")
            out["modules"][name] = file
        elif key in ("digest", "abi", "mypy"):
            out[key] = value
    if not all(k in out for k in ("digest", "abi", "mypy")) or not out["modules"]:
        return None
    return out


def builds(root: str | None = None) -> "list[tuple[str, dict]]":
    """Every build folder under ``root`` (default :func:`cache_root`) with an index, newest first."""
    root = cache_root() if root is None else root
    try:
        names = os.listdir(root)
    except OSError:
        return []
    found = []
    for name in names:
        if name.startswith("."):  # a build being written
            continue
        folder = os.path.join(root, name)
        index = read_index(folder)
        if index is not None:
            try:
                found.append((os.stat(os.path.join(folder, INDEX)).st_mtime_ns, folder, index))
            except OSError:  # pragma: no cover - removed meanwhile
                continue
    found.sort(key=lambda t: t[0], reverse=True)
    return [(folder, index) for _, folder, index in found]


def find_current(root: str | None = None, pkg_parent: str | None = None) -> "tuple[str | None, str]":
    """The build made from exactly the sources under ``pkg_parent`` (default: this package's) for this
    interpreter, as (folder, "") — or (None, why not)."""
    candidates = builds(root)
    if not candidates:
        return None, f"no build in {cache_root() if root is None else root} (run: jalapeno build-native)"
    abi = abi_tag()
    digests: dict = {}
    other_abi = 0
    for folder, index in candidates:
        if index["abi"] != abi:
            other_abi += 1
            continue
        key = (index["mypy"], tuple(index["sources"]))
        if key not in digests:
            digests[key] = source_digest(index["sources"], abi, index["mypy"], pkg_parent)
        if digests[key] != index["digest"]:
            continue
        if all(os.path.isfile(os.path.join(folder, f)) for f in index["modules"].values()):
            return folder, ""
    if other_abi == len(candidates):
        return None, f"the builds in {os.path.dirname(candidates[0][0])} are for another Python ({other_abi}); " \
                     "run: jalapeno build-native"
    return None, "stale: the sources changed since the last build (run: jalapeno build-native)"


class _Finder:
    """Serves :data:`MODULES` and mypyc's group library from one build folder (a ``sys.meta_path`` finder)."""

    def __init__(self, folder: str, modules: "dict[str, str]") -> None:
        self.folder = folder
        self.modules = modules
        self.group = [n for n in modules if "." not in n]  # the group library(ies): top-level names
        self.checked = False

    def find_spec(self, fullname, path=None, target=None):
        file = self.modules.get(fullname)
        if file is None:
            return None
        if not self.checked and fullname not in self.group:
            # the first compiled module asked for: load the group library (all the compiled code) first, so a
            # build that cannot load here (a foreign libc, a damaged file) falls back to pure Python, whole
            self.checked = True
            try:
                for g in self.group:
                    __import__(g)
            except Exception as exc:  # noqa: BLE001 - any failure: pure Python, and --status says why
                deactivate(f"the build in {self.folder} failed to load ({type(exc).__name__}: {exc}); pure Python")
                return None
        from importlib.machinery import ExtensionFileLoader, ModuleSpec

        location = os.path.join(self.folder, file)
        spec = ModuleSpec(fullname, ExtensionFileLoader(fullname, location), origin=location)
        spec.has_location = True
        return spec

    def invalidate_caches(self) -> None:
        pass


def activate() -> bool:
    """Serve the current build's modules from now on, if there is one (see the module's doc). Returns whether it
    did. Idempotent; called by ``import jalapeno`` before anything else of the package is imported."""
    global _served, _why, _finder
    if _finder is not None:
        return True
    if os.environ.get(ENV, "").strip() == "0":
        _why = f"disabled by {ENV}=0"
        return False
    folder, why = find_current()
    if folder is None:
        _why = why
        return False
    index = read_index(folder)
    if index is None:  # pragma: no cover - removed between the two reads
        _why = f"the build in {folder} disappeared"
        return False
    already = [m for m in MODULES if m in sys.modules]
    if already:  # pragma: no cover - imported before jalapeno (not by the package itself)
        _why = f"not activated: {', '.join(already)} already imported as Python"
        return False
    _finder = _Finder(folder, index["modules"])
    sys.meta_path.insert(0, _finder)
    _served, _why = folder, ""
    return True


def deactivate(why: str = "deactivated") -> None:
    """Stop serving the build (modules already imported stay what they are)."""
    global _served, _why, _finder
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _finder, _served, _why = None, None, why


def served() -> "tuple[str | None, str]":
    """(the build folder this process serves modules from, or None; why not)."""
    return _served, _why


#: a sweep or design search that ran at least this long in pure Python ends with :func:`speed_hint`'s line
HINT_AFTER_S = 20.0


def speed_hint(wall_s: float) -> "str | None":
    """The line a long sweep or design search prints when it simulated in pure Python and a build could have served
    it: none if this process serves a build, the user turned it off (``JALAPENO_NATIVE=0``) or the run was short.
    Workers inherit the parent's environment and cache, so the parent's state is theirs."""
    if _served is not None or wall_s < HINT_AFTER_S or os.environ.get(ENV, "").strip() == "0":
        return None
    return (f"simulated in pure Python ({_why}); `jalapeno build-native` (pip install 'jalapeno[native]', about a "
            "minute once) compiles the simulator: the same results, 1.1-2.3x less CPU per point (README)")


def active() -> "dict[str, str]":
    """The compiled modules this process has imported from a build: name -> the ``.so`` file."""
    out = {}
    for name in MODULES:
        mod = sys.modules.get(name)
        file = getattr(mod, "__file__", None) or ""
        if _served is not None and file.startswith(_served + os.sep):
            out[name] = file
    return out
