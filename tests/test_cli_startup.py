"""The CLI imports only the invoked command's package (start-up time is part of the simulator's speed budget,
issue #19), while ``jalapeno --help`` still lists every command and each command's ``--help`` works."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest
import typer

import jalapeno.cli as cli


@pytest.fixture
def fresh_cli():
    """A freshly loaded ``jalapeno.cli`` (its own app, nothing registered yet); the module is reloaded again
    afterwards so other tests see a clean one."""
    mod = importlib.reload(cli)
    yield mod
    importlib.reload(cli)


def _names(app: typer.Typer) -> set[str]:
    return set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_every_command_has_an_owner(fresh_cli):
    """COMMAND_OWNERS (first word -> package) names exactly the commands the packages register."""
    fresh_cli._register(fresh_cli.COMMAND_PACKAGES)
    assert _names(fresh_cli.app) == set(fresh_cli.COMMAND_OWNERS)
    assert set(fresh_cli.COMMAND_OWNERS.values()) <= set(fresh_cli.COMMAND_PACKAGES)


def test_top_level_help_lists_every_command(fresh_cli, capsys):
    with pytest.raises(SystemExit) as exc:
        fresh_cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in fresh_cli.COMMAND_OWNERS:
        assert f"  {name} " in out or f"  {name}\n" in out, name


@pytest.mark.parametrize("name", sorted(cli.COMMAND_OWNERS))
def test_each_command_help_registers_only_its_package(name, capsys):
    mod = importlib.reload(cli)
    try:
        with pytest.raises(SystemExit) as exc:
            mod.main([name, "--help"])
        assert exc.value.code == 0
        assert "Usage:" in capsys.readouterr().out
        assert mod._registered == {mod.COMMAND_OWNERS[name]}
    finally:
        importlib.reload(cli)


def test_simulate_imports_nothing_it_does_not_use():
    """A fresh ``jalapeno simulate`` process: no other command package, no probe benchmarks, no torch, no
    speculative-decoding module without ``--spec-decode``, and no numpy.ma (np.median / np.percentile import
    it; metrics computes the same floats without them)."""
    code = (
        "import sys, json\n"
        "from jalapeno.cli import main\n"
        "try:\n"
        "    main(['simulate', '--model', 'llama-3.1-8b', '--hardware', 'h200', '--isl', '128', '--osl', '8',"
        " '--concurrency', '4', '--num-prompts', '8', '--json'])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "sys.stderr.write(json.dumps(sorted(sys.modules)))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    mods = set(json.loads(p.stderr.strip().splitlines()[-1]))
    assert json.loads(p.stdout)["completed"] == 8
    unused = {"numpy.ma", "jalapeno.hardware.probe", "torch", "jalapeno.report", "jalapeno.design",
              "jalapeno.bench", "jalapeno.server", "jalapeno.calibration", "jalapeno.backends", "rich.console",
              "jalapeno.speculative"}
    assert not unused & mods, sorted(unused & mods)
    assert "jalapeno.sim.commands" in mods


_GC_PROBE = (
    "import gc, json, sys\n"
    "passes = []\n"
    "gc.callbacks.append(lambda phase, info: passes.append(info['generation']) if phase == 'start' else None)\n"
    "from jalapeno.cli import main\n"
    "before = len(passes)\n"
    "args = ['simulate', '--model', 'llama-3.1-8b', '--hardware', 'h200', '--isl', '128', '--osl', '8',"
    " '--concurrency', '4', '--num-prompts', '40', '--json']\n"
    "sys.argv = ['jalapeno', *args]\n"
    "try:\n"
    "    main(None if MODE == 'entry' else args)\n"
    "except SystemExit as e:\n"
    "    assert not e.code, e.code\n"
    "sys.stderr.write(json.dumps([len(passes) - before, gc.isenabled()]))\n"
)


@pytest.mark.parametrize("mode", ["entry", "in-process"])
def test_simulate_as_the_process_entry_runs_without_the_cyclic_collector(mode):
    """As the process's entry point (``main()``), ``jalapeno simulate`` makes no collector pass from start to
    end and leaves the collector off (turning it on would walk every object made meanwhile, just before the
    process exits); called with arguments (in-process), ``main`` leaves the collector on."""
    p = subprocess.run([sys.executable, "-c", f"MODE = {mode!r}\n" + _GC_PROBE], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    passes, enabled = json.loads(p.stderr.strip().splitlines()[-1])
    assert json.loads(p.stdout)["completed"] == 40
    if mode == "entry":
        assert (passes, enabled) == (0, False)
    else:
        assert passes > 0 and enabled


def test_only_a_one_shot_simulate_process_pauses_the_collector(monkeypatch):
    for argv, paused in ((["simulate", "--model", "m"], True), (["--version"], False), (["serve", "x"], False),
                         (["simulate", "--scenarios", "s.csv", "--output", "o.csv"], False),
                         (["simulate", "--scenarios=s.csv"], False), (["sweep", "grid.yaml"], False)):
        monkeypatch.setattr(sys, "argv", ["jalapeno", *argv])
        assert cli._pauses_gc(None) is paused, argv
        assert cli._pauses_gc(argv) is False  # in-process callers keep the collector as it was
