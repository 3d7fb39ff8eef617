"""``jalapeno build-native`` for real (mypy + a C compiler; skipped with the reason otherwise): the compiled modules
load from the cache, a simulation's JSON is byte-identical to pure Python's, the engine's and the simulator's test
suites pass with the build active, and an edited source — compiled or one the compiled code was built against —
makes the build stale (pure Python), as ``--status`` says.

The compile runs at ``MYPYC_OPT_LEVEL=1`` (the same C code, ≈ half the compile time of the default -O3)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import jalapeno
from jalapeno import native
from jalapeno.native import build as nb

SRC = Path(jalapeno.__file__).resolve().parent.parent
SIM = ("simulate --model gpt-oss-120b --hardware h200 --tp 1 --isl 1024 --osl 2048 --concurrency 1024 "
       "--num-prompts 1024 --kv-dtype fp8 --json").split()  # KV-bound: ≈ 300 preemptions, the group, multi-step

PROBE = ("import importlib, json, jalapeno.native as n\n"
         "for m in n.MODULES: importlib.import_module(m)\n"
         "print(json.dumps([n.active(), n.served()[1]]))")


def run(args: list[str], cache: Path, src: Path = SRC, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != native.ENV}
    e.update(env, JALAPENO_CACHE=str(cache), MYPYC_OPT_LEVEL="1",
             PYTHONPATH=os.pathsep.join([str(src), *filter(None, [os.environ.get("PYTHONPATH")])]))
    p = subprocess.run([sys.executable, *args], env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def probe(cache: Path, src: Path = SRC, **env: str) -> tuple[dict, str]:
    return tuple(json.loads(run(["-c", PROBE], cache, src, **env).stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_build_loads_is_exact_and_goes_stale(tmp_path):
    why = nb.missing_tool()
    if why:
        pytest.skip(why)
    cache = tmp_path / "cache"
    out = run(["-m", "jalapeno.cli", "build-native"], cache).stdout
    assert "native build ready" in out
    folders = [f for f, _ in native.builds(str(cache / "native"))]
    assert len(folders) == 1 and not list(SRC.rglob("*.so"))  # nothing written into the source tree

    act, _ = probe(cache)
    assert sorted(act) == sorted(native.MODULES)
    assert all(f.startswith(folders[0] + os.sep) and f.endswith(native.abi_tag()) for f in act.values())
    assert probe(cache, JALAPENO_NATIVE="0") == ({}, f"disabled by {native.ENV}=0")

    compiled = run(["-m", "jalapeno.cli", *SIM], cache).stdout
    pure = run(["-m", "jalapeno.cli", *SIM], cache, JALAPENO_NATIVE="0").stdout
    assert json.loads(pure)["sim"]["preemptions"] > 100
    assert compiled == pure  # byte-identical

    # the compiled modules' own test suites, run with the build active: what mypyc changes (checked attribute
    # types, native ints and floats, direct calls) is exercised by every test of the engine and the simulator
    tests = SRC.parent / "tests"
    if (tests / "engine").is_dir():
        suite = ("import json, sys, pytest, jalapeno.native as n\n"
                 f"rc = pytest.main(['-q', '-x', '-p', 'no:cacheprovider', {str(tests / 'engine')!r}, "
                 f"{str(tests / 'sim')!r}])\n"
                 "print(json.dumps(sorted(n.active()))); sys.exit(int(rc))")
        out = run(["-c", suite], cache).stdout.strip().splitlines()
        assert json.loads(out[-1]) == sorted(native.MODULES), out[-5:]

    # the same sources elsewhere: still current (keyed by content, not place); edit a module the compiled code
    # was built against (not itself compiled): stale, pure Python, and --status names the file
    copy = tmp_path / "tree"
    shutil.copytree(SRC / "jalapeno", copy / "jalapeno", ignore=shutil.ignore_patterns("__pycache__"))
    assert sorted(probe(cache, copy)[0]) == sorted(native.MODULES)
    seq = copy / "jalapeno" / "engine" / "sequence.py"
    seq.write_text(seq.read_text() + "\n# edited\n")
    act, why = probe(cache, copy)
    assert act == {} and why.startswith("stale")
    status = run(["-m", "jalapeno.cli", "build-native", "--status"], cache, copy).stdout
    assert "not active — stale" in status and "jalapeno/engine/sequence.py" in status
    assert "active — " in run(["-m", "jalapeno.cli", "build-native", "--status"], cache).stdout

    run(["-m", "jalapeno.cli", "build-native", "--clean"], cache)
    assert probe(cache)[0] == {} and not (cache / "native").exists()
