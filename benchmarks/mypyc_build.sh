#!/bin/bash
# Compile the simulator's per-event modules with mypyc, IN PLACE, in a source tree (issue #19 feasibility measurement,
# docs/performance.md "Sixteenth session (mypyc16)"). The same .py files stay the source: the .so files are written
# next to them and win at import; `--clean` removes them and the tree is pure Python again.
#
#   benchmarks/mypyc_build.sh [--clean] [TREE]      TREE: a repository root (default: the one holding this script)
#
# Needs mypy (which contains mypyc) and a C compiler with Python's headers. mypy is found on MYPYC_PKGS (default
# /work/mypyc-pkgs, e.g. `pip install --target /work/mypyc-pkgs mypy==2.4.1`) or in the running Python; nothing
# is installed here. The compiled tree needs nothing at run time beyond its .so files (checked: it runs with
# PYTHONPATH=TREE/src alone, without mypy, mypy_extensions or librt).
# Idempotent: a second run rebuilds the same files. Modules: MYPYC_MODULES (paths under src/) overrides the list.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
clean=0
if [ "${1:-}" = "--clean" ]; then clean=1; shift; fi
tree=$(cd "${1:-$here}" && pwd)
src="$tree/src"
[ -d "$src/jalapeno" ] || { echo "mypyc_build: $tree has no src/jalapeno: not a Jalapeño tree" >&2; exit 2; }

MODULES=${MYPYC_MODULES:-"jalapeno/engine/scheduler.py jalapeno/engine/lockstep.py jalapeno/engine/block_manager.py
jalapeno/engine/engine.py jalapeno/sim/backend.py jalapeno/perf/model.py jalapeno/perf/ops.py"}
# (not jalapeno/sim/client.py: compiled, its runtime-checkable Protocol ``Target`` is no longer a Protocol class)
PKGS=${MYPYC_PKGS:-/work/mypyc-pkgs}
PY=${PYTHON:-python}

remove_built() {  # every extension mypyc may have put in the tree: module shims and the group library (the
  # project's own C kernels are built into a cache outside the tree, never here)
  find "$src/jalapeno" -name '*.cpython-*.so' -print -delete 2>/dev/null || true
  find "$src" -maxdepth 1 -name '*__mypyc*.so' -print -delete 2>/dev/null || true
  rm -rf "$src/build" "$src/.mypy_cache"
}

if [ $clean = 1 ]; then
  remove_built | sed 's/^/removed /'
  echo "mypyc_build: $tree is pure Python"
  exit 0
fi

export PYTHONPATH="$PKGS${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c "import mypyc, mypy" 2>/dev/null; then
  echo "mypyc_build: mypy/mypyc not importable (looked in $PKGS and $PY's site-packages): pip install --target $PKGS mypy; the tree stays pure Python" >&2
  exit 3
fi
cc=$("$PY" -c "import sysconfig; print((sysconfig.get_config_var('CC') or 'cc').split()[0])")
inc=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
if ! command -v "$cc" >/dev/null || [ ! -f "$inc/Python.h" ]; then
  echo "mypyc_build: no C compiler ($cc) or no Python.h in $inc: the tree stays pure Python" >&2
  exit 4
fi

remove_built >/dev/null  # a stale .so of a module no longer in the list would win at import
cd "$src"
# mypy's check of the compiled modules (errors in the modules they import are not reported; the libraries
# benchmarks/mypyc.ini lists are not followed), then C generation and the build in place: build/ and .mypy_cache/ under src/ (git-ignored)
# shellcheck disable=SC2086
"$PY" -m mypyc --config-file "$here/benchmarks/mypyc.ini" $MODULES
PYTHONPATH="$src" "$PY" - "$MODULES" <<'EOF'
import importlib, sys
bad = []
for path in sys.argv[1].split():
    name = path[:-3].replace("/", ".")
    f = importlib.import_module(name).__file__
    if not f.endswith(".so"):
        bad.append(name)
    print(f"  {name}: {f.rsplit('/', 1)[-1]}")
if bad:
    raise SystemExit(f"mypyc_build: not compiled: {bad}")
print(f"mypyc_build: compiled in place ({sys.path[1]}); undo with --clean")
EOF
