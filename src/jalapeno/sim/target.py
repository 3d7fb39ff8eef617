"""The simulated client's target protocol (its own module: a ``runtime_checkable`` Protocol, which the client's
``isinstance`` checks, must stay a Protocol class when ``jalapeno/sim/client.py`` is compiled by
``jalapeno build-native``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from jalapeno.engine.sequence import Sequence
    from jalapeno.sim.client import Call


@runtime_checkable
class Target(Protocol):
    """What the simulated client drives: one engine (:class:`~jalapeno.sim.client.EngineTarget`) or a cluster of
    them. A target may also have ``submit_many(calls)`` (each call in order, as ``submit`` would take them one by
    one): the client then hands over each release's calls at once."""

    def now(self) -> float: ...
    def request_latency_s(self) -> float: ...
    def busy(self) -> bool: ...
    def wait_until(self, t: float) -> None: ...
    def submit(self, call: Call) -> None: ...
    def advance(self, horizon: float | None) -> list[Sequence]: ...
    def result_parts(self) -> tuple[float, int, np.ndarray, np.ndarray]: ...
