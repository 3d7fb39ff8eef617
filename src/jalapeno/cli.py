"""The ``jalapeno`` command line.

Each concern registers its own commands (``register(app)`` in ``<package>/commands.py``) so this file stays a
thin index. Commands import heavy dependencies (torch, fastapi) lazily, inside the command, so the simulator
side starts fast and runs without torch installed.
"""

from __future__ import annotations

import gc
import importlib
import sys

from typing import TYPE_CHECKING

import typer

from jalapeno.errors import JalapenoError

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

app = typer.Typer(
    name="jalapeno",
    help="Jalapeño: chip twin and serving simulator, inference engine, and InferenceX-compatible bench.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text is plain: "[r·L, L]" must not be read as a rich style tag
)

# Packages that contribute commands, in help order. A package listed here must define
# ``register(app: typer.Typer) -> None`` in ``jalapeno/<name>/commands.py``.
COMMAND_PACKAGES = [
    "demo",
    "hardware",
    "models",
    "perf",
    "sim",
    "backends",
    "server",
    "bench",
    "report",
    "calibration",
    "design",
    "native",
]


#: first CLI word -> the package that defines it. Used to import only that package's commands when the
#: command is known (the simulator's start-up time is part of its speed budget); --help imports all.
COMMAND_OWNERS = {
    "hardware": "hardware",
    "models": "models",
    "roofline": "perf",
    "simulate": "sim",
    "generate": "backends",
    "serve": "server",
    "bench": "bench",
    "sweep": "report",
    "recommend": "report",
    "report": "report",
    "demo": "demo",
    "calibrate": "calibration",
    "design": "design",
    "build-native": "native",
}


def _register(packages: list[str]) -> None:
    for pkg in packages:
        if pkg in _registered:
            continue
        _registered.add(pkg)
        try:
            mod = importlib.import_module(f"jalapeno.{pkg}.commands")
        except ModuleNotFoundError as exc:  # package has no commands (yet)
            if exc.name == f"jalapeno.{pkg}.commands":
                continue
            raise
        mod.register(app)


#: packages whose commands are already on ``app`` (registration is idempotent and incremental)
_registered: set[str] = set()


def _ensure_registered(argv: list[str] | None) -> None:
    args = sys.argv[1:] if argv is None else argv
    first = next((a for a in args if not a.startswith("-")), None)
    owner = COMMAND_OWNERS.get(first or "")
    if owner is not None:
        _register([owner])
    else:
        _register(COMMAND_PACKAGES)


#: commands that load torch and may run on the CPU: the OpenMP thread policy must be set before torch loads
#: (``jalapeno serve`` sets it in ``server.build.build_torch``, which only its torch backend reaches)
CPU_TORCH_COMMANDS = ("generate",)


def _apply_thread_policy(argv: list[str] | None) -> None:
    """Before a CPU torch command runs (and so before torch loads): this machine's measured OpenMP thread policy
    (:func:`jalapeno.hardware.threads.apply_thread_policy`), unless the environment sets one."""
    args = sys.argv[1:] if argv is None else argv
    first = next((a for a in args if not a.startswith("-")), None)
    if first in CPU_TORCH_COMMANDS and "cuda" not in args and "--help" not in args:
        from jalapeno.hardware.threads import apply_thread_policy

        apply_thread_policy()  # silently: the command's stderr stays its own (one line on an error)


#: one-shot commands whose process runs without the cyclic garbage collector, from ``main`` to exit, when
#: ``main`` is the process's entry point (called without arguments: the console script, ``python -m
#: jalapeno.cli``). Start-up imports and builds tens of thousands of objects that are not garbage (numpy,
#: pydantic, typer's parameter adapters, the chip and model specs, the workload's requests) and a simulation
#: makes none (``drive`` pauses the collector while it runs), yet the collector's passes walked them: ≈ 45 ms of
#: a 0.45 s concurrency-1 ``jalapeno simulate``. The collector is not turned back on: its young generation then
#: holds every object made while it was off, and the next allocation would walk them all (≈ 50 ms) just before
#: the process exits. Not with ``--scenarios`` (any number of simulations in one process), not for long-lived
#: commands (``serve``, ``bench``, sweeps) whose garbage must keep being reclaimed, and not when ``main`` is
#: given arguments (in-process callers: tests, scripts), where the collector stays as it was.
GC_PAUSED_COMMANDS = ("simulate",)


def _pauses_gc(argv: list[str] | None) -> bool:
    """Whether this ``main`` call runs without the cyclic collector (see :data:`GC_PAUSED_COMMANDS`)."""
    if argv is not None:
        return False
    args = sys.argv[1:]
    first = next((a for a in args if not a.startswith("-")), None)
    return first in GC_PAUSED_COMMANDS and not any(a == "--scenarios" or a.startswith("--scenarios=") for a in args)


def _print_version(value: bool) -> None:
    """Eager option callback: runs while parsing, before click asks for a command."""
    if value:
        from jalapeno import __version__

        typer.echo(f"jalapeno {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
    ),
) -> None:
    """Jalapeño: chip twin and serving simulator, inference engine, and InferenceX-compatible bench."""


#: top-level modules of the optional extras -> the extra that installs them
EXTRA_OF_MODULE = {
    "torch": "torch",
    "transformers": "torch",
    "safetensors": "torch",
    "gguf": "torch",
    "fastapi": "server",
    "uvicorn": "server",
    "starlette": "server",
    "prometheus_client": "server",
    "ray": "ray",
    "pynvml": "gpu",
}


def missing_extra_message(exc: ModuleNotFoundError) -> str | None:
    """One line naming the extra to install when ``exc`` is a missing optional dependency, else None."""
    root = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(root)
    if extra is None:
        return None
    msg = f"this command needs '{root}', which is not installed: pip install 'jalapeno[{extra}]'"
    if extra in ("torch", "server"):
        msg = f"this command needs '{root}', which is not installed: pip install 'jalapeno[torch,server]'"
    if extra == "torch":
        msg += " (CPU-only machine: first pip install torch --index-url https://download.pytorch.org/whl/cpu)"
    return msg


def err_console() -> "Console":
    """A rich console on stderr for error lines (rich is imported only when an error is printed: start-up time
    is part of the simulator's speed budget)."""
    from rich.console import Console

    return Console(stderr=True)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point.

    Typer/click handle usage errors themselves (usage line, exit 2); user errors raised by commands
    (:class:`JalapenoError`) become one clean line on stderr and exit code 2 — never a traceback. As the
    process's entry point (no ``argv``), a ``simulate`` command runs without the cyclic garbage collector, to
    the process's exit (:data:`GC_PAUSED_COMMANDS`).
    """
    if _pauses_gc(argv):
        gc.disable()
    _main(argv)


def _main(argv: list[str] | None) -> None:
    _ensure_registered(argv)
    try:
        _apply_thread_policy(argv)
        app(args=argv, prog_name="jalapeno")
    except JalapenoError as exc:
        from rich.markup import escape

        err_console().print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True, markup=True)
        sys.exit(exc.exit_code)
    except ModuleNotFoundError as exc:
        msg = missing_extra_message(exc)
        if msg is None:
            raise
        from rich.markup import escape

        err_console().print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console().print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
