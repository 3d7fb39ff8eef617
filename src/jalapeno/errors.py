"""User-facing errors.

Every error a user can cause (a malformed spec, an unknown model, an impossible request) is raised as a
:class:`JalapenoError` subclass with a message that says what is wrong and how to fix it. The CLI prints the
message on one line and exits with code 2; it never shows a traceback for these.
"""

from __future__ import annotations


class JalapenoError(Exception):
    """Base class for errors caused by user input. ``str(err)`` is the one-line message shown to the user."""

    exit_code = 2


class SpecError(JalapenoError):
    """A hardware/sweep/scenario spec file is malformed (missing field, bad value, YAML syntax)."""


class UnknownNameError(JalapenoError):
    """An unknown chip, model, preset or option value."""


class CapacityError(JalapenoError):
    """A model (plus KV cache and activations) does not fit in the memory of the chips in use."""


class ConfigError(JalapenoError):
    """A model config or a parallelism/precision choice is invalid."""


class RequestError(JalapenoError):
    """A request to the engine is invalid (prompt too long, max_tokens <= 0, ...)."""


class CalibrationError(JalapenoError):
    """Measurements cannot be used for a fit (unknown column or unit, a layout that does not parse, too few
    points for the parameters asked for)."""
