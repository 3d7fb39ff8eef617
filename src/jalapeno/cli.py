"""The ``jalapeno`` command line.

Each concern registers its own commands (``register(app)`` in ``<package>/commands.py``) so this file stays a
thin index. Commands import heavy dependencies (torch, fastapi) lazily, inside the command, so the simulator
side starts fast and runs without torch installed.
"""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console

from jalapeno.errors import JalapenoError

app = typer.Typer(
    name="jalapeno",
    help="Jalapeño: chip twin and serving simulator, inference engine, and InferenceX-compatible bench.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Packages that contribute commands, in help order. A package listed here must define
# ``register(app: typer.Typer) -> None`` in ``jalapeno/<name>/commands.py``.
COMMAND_PACKAGES = [
    "hardware",
    "models",
    "perf",
    "engine",
    "backends",
    "server",
    "bench",
    "report",
]


def _register_all() -> None:
    for pkg in COMMAND_PACKAGES:
        try:
            mod = importlib.import_module(f"jalapeno.{pkg}.commands")
        except ModuleNotFoundError as exc:  # package has no commands (yet)
            if exc.name == f"jalapeno.{pkg}.commands":
                continue
            raise
        mod.register(app)


_register_all()

err_console = Console(stderr=True)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point.

    Typer/click handle usage errors themselves (usage line, exit 2); user errors raised by commands
    (:class:`JalapenoError`) become one clean line on stderr and exit code 2 — never a traceback.
    """
    try:
        app(args=argv, prog_name="jalapeno")
    except JalapenoError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True, markup=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
