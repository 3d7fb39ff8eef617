"""Run the one :class:`jalapeno.engine.Engine` in a thread and connect it to asyncio request handlers.

Requests and aborts enter through a thread-safe queue and are applied between steps; each step's outputs go
back to the event loop with one ``loop.call_soon_threadsafe`` per step, into per-request ``asyncio.Queue``s.
A step that fails because of one request (the backend raises ``SequenceFailed``) aborts that request alone and
the loop steps again for the rest; any other step failure fails the requests in flight, and the loop goes on.

Pacing (simulated backends): the engine runs on its virtual clock, and the thread releases a step's tokens when
wall time reaches ``anchor_wall + (virtual − anchor_virtual) × time_scale`` (1.0 = the simulated chip's real
speed, 0 = as fast as possible). The anchors are reset whenever the engine falls idle, so idle wall time is not
owed; while busy, a thread that fell behind does not sleep until it has caught up.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import numpy as np

from jalapeno.engine.interface import SequenceFailed
from jalapeno.engine.sequence import RequestOutput, SamplingParams, Sequence

log = logging.getLogger("jalapeno.server")


@dataclass
class EngineError:
    """Delivered instead of a :class:`RequestOutput` when the engine failed the request."""

    message: str
    user_error: bool = False


class _CountingQueue(asyncio.Queue):
    """An ``asyncio.Queue`` that counts what its consumer took (``get`` goes through ``get_nowait``)."""

    taken = 0

    def get_nowait(self):
        item = super().get_nowait()
        self.taken += 1
        return item


class _Handle:
    __slots__ = ("loop", "queue", "sent")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: _CountingQueue = _CountingQueue()
        #: outputs handed to the loop for this request (engine thread); unread = sent - queue.taken
        self.sent = 0


class AsyncEngine:
    """Thread owner of an engine. ``submit`` (from asyncio) returns a queue of :class:`RequestOutput`."""

    def __init__(self, engine: Any, *, time_scale: float = 1.0, max_backlog: int = 4096, tracer: Any = None) -> None:
        self.engine = engine
        #: a :class:`~jalapeno.server.step_trace.StepTracer` (``serve --step-trace``): each step's times and shape
        self.tracer = tracer
        #: back-pressure: a request whose consumer has left this many step outputs unread (a client that does
        #: not read its stream) is aborted, so the server never buffers a whole output for it
        self.max_backlog = max_backlog
        self.paced = engine.backend.capabilities.virtual_time and time_scale > 0
        self.time_scale = time_scale
        self._cmds: queue.SimpleQueue = queue.SimpleQueue()
        self._handles: dict[int | str, _Handle] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stats: dict = {}
        self.steps = 0
        #: called on the engine thread with each step's inter-token gaps (s) and their counts
        self.on_itl: Callable[[np.ndarray, np.ndarray], None] | None = None

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._refresh_stats()
            self._thread = threading.Thread(target=self._loop, name="jalapeno-engine", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._cmds.put(("wake", None, None))
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self.tracer is not None:
            self.tracer.close()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # --- asyncio side --------------------------------------------------------------------------------
    def submit(
        self, prompt_ids: list[int] | None, prompt_len: int, sampling: SamplingParams,
        marks: tuple[float, float] | None = None,
    ) -> tuple[int | str, asyncio.Queue]:
        """Queue a request; returns (request id, queue of RequestOutput | EngineError). ``marks``: when the server
        received and tokenised it (monotonic s), kept in the step trace's request record when one is written."""
        seq = Sequence(prompt_ids, sampling, prompt_len=None if prompt_ids is not None else prompt_len)
        h = _Handle(asyncio.get_running_loop())
        with self._lock:
            self._handles[seq.seq_id] = h
        if self.tracer is not None:
            self.tracer.submitted(seq.seq_id, marks, prompt_len)
        self._cmds.put(("add", seq, None))
        return seq.seq_id, h.queue

    def abort(self, seq_id: int | str) -> None:
        """Abort (idempotent, thread-safe): the engine frees the request's KV blocks before its next step."""
        with self._lock:
            known = self._handles.pop(seq_id, None) is not None
        if known:
            self._cmds.put(("abort", seq_id, None))

    def stats(self) -> dict:
        """Latest engine stats (running, waiting, kv_blocks_used, kv_blocks_total), refreshed every step."""
        return self._stats

    # --- engine thread -------------------------------------------------------------------------------
    def _refresh_stats(self) -> None:
        st = self.engine.stats
        self._stats = {
            "running": st.running,
            "waiting": st.waiting,
            "kv_blocks_used": st.kv_blocks_used,
            "kv_blocks_total": st.kv_blocks_total,
            "kv_block_size": int(getattr(getattr(self.engine, "config", None), "block_size", 0) or 0),
        }
        backend = getattr(self.engine, "backend", None)
        spec = backend.spec_decode_stats() if backend is not None else None
        if spec is not None:
            self._stats["spec_decode"] = spec

    def _apply(self, cmd: tuple) -> None:
        kind, arg, _ = cmd
        if kind == "add":
            with self._lock:
                wanted = arg.seq_id in self._handles
            if not wanted:  # aborted before it reached the engine
                return
            if self.tracer is not None:
                self.tracer.queued(arg.seq_id)
            try:
                arg.arrival_s = self.engine.clock.now()
                self.engine.add_sequence(arg)
            except Exception as exc:  # noqa: BLE001 - becomes this request's error, never kills the loop
                from jalapeno.errors import JalapenoError

                self._deliver_one(arg.seq_id, EngineError(str(exc), isinstance(exc, JalapenoError)), final=True)
        elif kind == "abort":
            self.engine.abort(arg)

    def _drain(self, block: bool) -> None:
        try:
            cmd = self._cmds.get(timeout=0.05) if block else self._cmds.get_nowait()
        except queue.Empty:
            return
        self._apply(cmd)
        while True:
            try:
                self._apply(self._cmds.get_nowait())
            except queue.Empty:
                return

    def _loop(self) -> None:
        anchor: tuple[float, float] | None = None  # (wall, virtual) while busy
        while not self._stop.is_set():
            busy = self.engine.has_unfinished()
            if not busy and self.tracer is not None:
                self.tracer.idle()  # waiting for work: the gap before the next step is idle, not the loop's
            self._drain(block=not busy)
            if not self.engine.has_unfinished():
                anchor = None
                self._refresh_stats()
                continue
            if self.paced and anchor is None:
                anchor = (time.perf_counter(), self.engine.clock.now())
            if self.tracer is not None:
                self.tracer.begin(self.engine)
            try:
                outs = self.engine.step()
            except SequenceFailed as exc:  # one request's fault: abort it alone; the others step again
                log.warning("request %s failed: %s", exc.seq_id, exc.message)
                self.engine.abort(exc.seq_id)
                self._deliver_one(exc.seq_id, EngineError(f"request failed: {exc.message}"), final=True)
                continue
            except Exception as exc:  # noqa: BLE001 - fail the in-flight requests, keep serving
                log.exception("engine step failed")
                self._fail_all(f"engine step failed: {type(exc).__name__}: {exc}")
                continue
            self.steps += 1
            if self.tracer is not None:
                self.tracer.end_step()
            if self.paced and anchor is not None:
                target = anchor[0] + (self.engine.clock.now() - anchor[1]) * self.time_scale
                delay = target - time.perf_counter()
                if delay > 0:
                    self._stop.wait(delay)
            self._refresh_stats()
            self._deliver(outs)
            vals, counts = self.engine.take_itl_samples()  # bounded memory: streamed into statistics
            if self.on_itl is not None and len(vals):
                self.on_itl(vals, counts)
            if self.tracer is not None:
                self.tracer.done(self.engine, len(outs))

    def _fail_all(self, msg: str) -> None:
        with self._lock:
            ids = list(self._handles)
        for sid in ids:
            try:
                self.engine.abort(sid)
            except Exception:  # noqa: BLE001
                pass
            self._deliver_one(sid, EngineError(msg), final=True)

    def _deliver_one(self, sid: int | str, item: Any, final: bool) -> None:
        with self._lock:
            h = self._handles.pop(sid, None) if final else self._handles.get(sid)
        if h is not None:
            h.loop.call_soon_threadsafe(h.queue.put_nowait, item)

    def _deliver(self, outs: list[RequestOutput]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        stalled: list[int | str] = []
        with self._lock:
            for o in outs:
                h = self._handles.get(o.seq_id)
                if h is None:
                    continue  # aborted meanwhile
                if o.finished:
                    del self._handles[o.seq_id]
                elif h.sent - h.queue.taken >= self.max_backlog:  # exact even while callbacks are pending
                    del self._handles[o.seq_id]
                    stalled.append(o.seq_id)
                    o = EngineError(f"the client left {self.max_backlog} steps of output unread; request aborted")
                h.sent += 1
                by_loop.setdefault(h.loop, []).append((h.queue, o))
        for sid in stalled:
            log.warning("request %s aborted: its client is not reading", sid)
            self.engine.abort(sid)
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_put_all, items)
            except RuntimeError:  # loop closed (server shutting down)
                pass


def _put_all(items: list) -> None:
    for q, o in items:
        q.put_nowait(o)
