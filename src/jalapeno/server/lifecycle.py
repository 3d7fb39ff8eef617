"""The uvicorn server around the app: bounded shutdown and timed-out stalled connections.

* :class:`GracefulServer`: the first SIGTERM/SIGINT stops accepting and lets open responses finish for
  ``shutdown_timeout_s``; then ``drain`` ends the rest (streams get a final error event and ``[DONE]``) and the
  process exits 0. A second signal exits at once.
* :func:`timed_h11` : uvicorn's h11 protocol that closes a connection whose request line and headers have not
  arrived ``header_timeout_s`` after its first byte (or after the connection opened). Idle keep-alive
  connections are closed by uvicorn's ``timeout_keep_alive``; the app bounds body reads itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol


class _TimedH11(H11Protocol):
    header_timeout_s: float = 10.0

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._hdr_timer: asyncio.TimerHandle | None = None
        self._armed_for = None
        self._arm()

    def _arm(self) -> None:
        self._armed_for = self.cycle
        self._hdr_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._hdr_timer is not None:
            self._hdr_timer.cancel()
            self._hdr_timer = None

    def _headers_late(self) -> None:
        self._hdr_timer = None
        if self.cycle is self._armed_for:  # still no new request: a stalled client
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        idle = self.cycle is None or self.cycle.response_complete
        if idle and self._hdr_timer is None:
            self._arm()  # the first bytes of a new request on a kept-alive connection
        super().data_received(data)
        if self.cycle is not self._armed_for:
            self._disarm()  # its headers arrived

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def timed_h11(header_timeout_s: float) -> type[H11Protocol]:
    """An h11 protocol class for ``uvicorn.Config(http=...)`` with this header timeout."""
    return type("TimedH11Protocol", (_TimedH11,), {"header_timeout_s": float(header_timeout_s)})


class GracefulServer(uvicorn.Server):
    """``uvicorn.Server`` with a bounded graceful shutdown (see the module docstring)."""

    def __init__(self, config: uvicorn.Config, drain: Callable[[], None], shutdown_timeout_s: float) -> None:
        super().__init__(config)
        self.drain = drain
        self.shutdown_timeout_s = shutdown_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def request_exit(self) -> None:
        """What the first signal does (also callable from another thread, e.g. tests)."""
        if self.should_exit:
            self.force_exit = True
            return
        self.should_exit = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.call_later, self.shutdown_timeout_s, self.drain)

    def handle_exit(self, sig, frame) -> None:
        self.request_exit()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            yield
            # uvicorn re-raises captured signals after the shutdown; handled here, so exit 0 instead
            getattr(self, "_captured_signals", []).clear()


def make_server(
    app,
    *,
    host: str,
    port: int,
    log_level: str,
    drain: Callable[[], None],
    shutdown_timeout_s: float = 5.0,
    header_timeout_s: float = 10.0,
    keep_alive_s: float = 30.0,
) -> GracefulServer:
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=timed_h11(header_timeout_s),
        timeout_keep_alive=keep_alive_s,  # type: ignore[arg-type]  (uvicorn takes any number of seconds)
        # the backstop after our own drain: uvicorn then cancels whatever is left
        timeout_graceful_shutdown=int(shutdown_timeout_s) + 5,
    )
    return GracefulServer(config, drain, shutdown_timeout_s)
