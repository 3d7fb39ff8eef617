"""mypyc's class hints for the modules ``jalapeno build-native`` compiles (``jalapeno.native.MODULES``):
``mypy_extensions.mypyc_attr`` where it is installed, else a decorator that returns the class unchanged (plain
Python needs neither)."""

from __future__ import annotations

from typing import Any

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # pragma: no cover
    def mypyc_attr(*args: Any, **kwargs: Any) -> Any:  # type: ignore[no-redef]
        return lambda cls: cls

__all__ = ["mypyc_attr"]
