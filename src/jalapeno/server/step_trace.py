"""Where a served step's time goes: a per-step trace ``jalapeno serve --step-trace PATH`` writes, and its split.

The engine thread (:class:`~jalapeno.server.async_engine.AsyncEngine`) records, for every engine step, when it
started and ended, when the step's outputs had been handed to the event loop, the step's shape (sequences,
prefill tokens, decoded tokens) and, from the kernel's ``/proc/<pid>/task/<tid>/schedstat`` (Linux), how long the
server's threads ran and how long they sat runnable on a run queue, waiting for a core, and from ``/proc/stat`` how
much CPU time the hypervisor took from the machine (steal, ``steal_s``), which no guest thread's wait shows:

* ``engine``: the thread that calls ``Engine.step()`` (scheduler, backend, sampling, delivery);
* ``loop``: the asyncio event loop thread (HTTP, detokenisation, SSE encoding, socket writes);
* ``other``: every other thread of the process (torch's intra-op workers, tokeniser worker threads).

One JSON object per line: a header (``"kind": "header"``), then one per step (``"kind": "step"``) and one per
request as the engine thread takes it into its waiting queue (``"kind": "request"``, :class:`RequestRecord`: when
the HTTP handler started, when the prompt was tokenised, when the handler queued it for the engine thread, when the
engine thread added it to the scheduler's waiting queue — always between two steps — and its prompt tokens). Times are
``time.monotonic()`` seconds (system-wide on Linux, so a bench client on the same machine can window them),
CPU and wait times are seconds over the step ``[t_start, t_done]``.

:func:`split` divides a time window (a bench run) into engine steps / the serving loop between them / idle, and
reports the CPU each group of threads took and the time they waited for a core; :func:`decode_step_ms` gives the
decode steps' wall time by batch, to set against the same engine's steps offline. With the bench client's own CPU
(``client_cpu_s`` in ``jalapeno bench``'s results) this divides a served TPOT (``benchmarks/sim_vs_engine.py
--step-trace``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from jalapeno.errors import ConfigError

GROUPS = ("engine", "loop", "other")


@dataclass(frozen=True)
class RequestRecord:
    """One request's way into the engine (monotonic seconds): the serving layer's ingest."""

    t_recv: float  # the HTTP handler started (headers parsed; the body not yet read)
    t_tokenised: float  # the body parsed and the prompt tokenised (a worker thread)
    t_submit: float  # handed to the engine thread's command queue
    t_queued: float  # the engine thread added it to the scheduler's waiting queue (between two steps)
    prompt_tokens: int


@dataclass(frozen=True)
class StepRecord:
    """One engine step as the serving loop saw it (monotonic seconds; CPU / wait seconds over the step)."""

    t_start: float  # ``Engine.step()`` called
    t_end: float  # it returned
    t_done: float  # its outputs handed to the event loop (the loop's per-step work done)
    idle_before: bool  # the engine had nothing to run at some point since the previous step
    seqs: int  # requests that got output this step
    prefill_tokens: int
    decode_tokens: int
    #: seconds each thread group ran on a core during [t_start, t_done] (``GROUPS`` order)
    run_s: tuple[float, float, float] = (0.0, 0.0, 0.0)
    #: seconds each thread group waited, runnable, for a core during [t_start, t_done]
    wait_s: tuple[float, float, float] = (0.0, 0.0, 0.0)
    #: CPU seconds the hypervisor ran something else on this machine's virtual CPUs during [t_start, t_done], all
    #: CPUs summed (``/proc/stat``'s steal; 0 on bare metal, where Linux gives none, and in a trace written before
    #: the twentieth session): a step slowed by the host, which no thread's run-queue wait shows (issue 16)
    steal_s: float = 0.0


class _SchedStat:
    """{tid: (ns on a core, ns runnable waiting)} for the threads of ``pid``, from ``/proc/<pid>/task/*/schedstat``
    (empty where Linux gives none). The files stay open and are re-read in place (``pread`` at 0 regenerates a
    procfs file); the thread list is re-listed every ``relist`` reads, so threads started later are picked up."""

    def __init__(self, pid: int, relist: int = 64) -> None:
        self.base = f"/proc/{pid}/task"
        self.relist = relist
        self._fds: dict[int, int] = {}
        self._reads = 0

    def _list(self) -> None:
        try:
            tids = {int(t) for t in os.listdir(self.base)}
        except OSError:
            return
        for tid in tids - self._fds.keys():
            try:
                self._fds[tid] = os.open(f"{self.base}/{tid}/schedstat", os.O_RDONLY)
            except OSError:
                continue  # the thread ended meanwhile, or no schedstat on this kernel
        for tid in self._fds.keys() - tids:
            os.close(self._fds.pop(tid))

    def read(self) -> dict[int, tuple[int, int]]:
        if self._reads % self.relist == 0:
            self._list()
        self._reads += 1
        out: dict[int, tuple[int, int]] = {}
        for tid, fd in list(self._fds.items()):
            try:
                run, wait, _ = os.pread(fd, 96, 0).split()
                out[tid] = (int(run), int(wait))
            except (OSError, ValueError):
                os.close(self._fds.pop(tid))  # the thread ended
        return out

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def parse_steal_s(stat: bytes, ticks_per_s: float) -> float:
    """The machine's steal time in seconds from ``/proc/stat``'s text: the aggregate ``cpu`` line's eighth value,
    in clock ticks (0.0 when the line has no such field, as on kernels before 2.6.11)."""
    first = stat.split(b"\n", 1)[0].split()
    if not first or first[0] != b"cpu" or len(first) < 9:
        return 0.0
    return int(first[8]) / ticks_per_s


class _Steal:
    """The machine's cumulative steal seconds (``/proc/stat``, kept open and re-read in place); 0.0 where there is
    no such file."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open("/proc/stat", os.O_RDONLY)
            self._tick = float(os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError, AttributeError):
            self._fd, self._tick = None, 100.0

    def read(self) -> float:
        if self._fd is None:
            return 0.0
        try:
            return parse_steal_s(os.pread(self._fd, 256, 0), self._tick)
        except (OSError, ValueError):
            return 0.0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class StepTracer:
    """Writes a step trace (one JSON line per step) from the engine thread. ``loop_tid``: the native id of the
    event loop's thread (set by the app when it starts); the engine thread is whichever calls :meth:`begin`."""

    @staticmethod
    def check_path(path: Path | str) -> Path:
        """``path`` as a Path, or a :class:`ConfigError` when its folder does not exist (before a model loads)."""
        path = Path(path)
        if not path.parent.is_dir():
            raise ConfigError(f"--step-trace {path}: folder {path.parent} does not exist; create it or pick another")
        if path.is_dir():
            raise ConfigError(f"--step-trace {path} is a folder: give a file path (e.g. {path}/steps.jsonl)")
        return path

    def __init__(self, path: Path | str, header: dict | None = None) -> None:
        path = self.check_path(path)
        try:
            self._f: IO[str] | None = open(path, "w", buffering=1 << 16)
        except OSError as exc:
            raise ConfigError(f"--step-trace {path}: cannot write it ({exc.strerror}); pick a writable path") from None
        self.path = path
        self.pid = os.getpid()
        self._stat = _SchedStat(self.pid)
        self._steal = _Steal()
        self.loop_tid: int | None = None
        self._engine_tid: int | None = None
        self._pending: dict[str, Any] | None = None
        self._idle = True  # nothing ran before the first step
        self._lock = threading.Lock()
        self._submitted: dict[Any, tuple[float, float, float, int]] = {}  # request id -> (recv, tokenised, submit, len)
        self._write({"kind": "header", "pid": self.pid, "cpus": os.cpu_count(), "clock": "monotonic",
                     "groups": list(GROUPS), **(header or {})})

    def _write(self, obj: dict) -> None:
        with self._lock:
            if self._f is not None:
                self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def _groups(self, before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> tuple[list, list]:
        """Seconds each group ran / waited between two reads (threads present in both only: a thread first seen
        in ``after`` would add its whole life)."""
        run, wait = [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]
        for tid, (r1, w1) in after.items():
            if tid not in before:
                continue
            r0, w0 = before[tid]
            g = 0 if tid == self._engine_tid else 1 if tid == self.loop_tid else 2
            run[g] += (r1 - r0) / 1e9
            wait[g] += (w1 - w0) / 1e9
        return run, wait

    def idle(self) -> None:
        """The engine had nothing to run (the next step's ``idle_before``)."""
        self._idle = True

    def submitted(self, seq_id: Any, marks: tuple[float, float] | None, prompt_tokens: int) -> None:
        """A request handed to the engine thread (event loop; ``marks``: received and tokenised, monotonic s)."""
        t = time.monotonic()
        recv, tok = marks if marks is not None else (t, t)
        with self._lock:
            self._submitted[seq_id] = (recv, tok, t, int(prompt_tokens))

    def queued(self, seq_id: Any) -> None:
        """The engine thread added the request to the waiting queue: write its :class:`RequestRecord`."""
        t = time.monotonic()
        with self._lock:
            got = self._submitted.pop(seq_id, None)
        if got is not None:
            rec = RequestRecord(got[0], got[1], got[2], t, got[3])
            self._write({"kind": "request", **asdict(rec)})

    def begin(self, engine: Any) -> None:
        if self._engine_tid is None:
            self._engine_tid = threading.get_native_id()
        self._pending = {"stat": self._stat.read(), "steal": self._steal.read(), "t_start": time.monotonic(),
                         "gen": engine.tokens_generated, "pre": engine.prompt_tokens_computed}

    def end_step(self) -> None:
        if self._pending is not None:
            self._pending["t_end"] = time.monotonic()

    def done(self, engine: Any, seqs: int) -> None:
        p, self._pending = self._pending, None
        if p is None or "t_end" not in p:
            return
        t_done = time.monotonic()
        run, wait = self._groups(p["stat"], self._stat.read())
        steal = max(self._steal.read() - p["steal"], 0.0)
        rec = StepRecord(
            t_start=p["t_start"], t_end=p["t_end"], t_done=t_done, idle_before=self._idle, seqs=seqs,
            prefill_tokens=engine.prompt_tokens_computed - p["pre"], decode_tokens=engine.tokens_generated - p["gen"],
            run_s=tuple(run), wait_s=tuple(wait), steal_s=steal,  # type: ignore[arg-type]
        )
        self._idle = False
        self._write({"kind": "step", **asdict(rec)})

    def close(self) -> None:
        with self._lock:
            if self._f is not None:
                self._f.close()
                self._f = None
                self._stat.close()
                self._steal.close()


# ---- reading and splitting ------------------------------------------------------------------------------------


def load_trace(path: Path | str) -> tuple[dict, list[StepRecord]]:
    """(header, steps) of a trace; a missing, empty or malformed file is a :class:`ConfigError` naming the line."""
    header, steps, _ = load_trace_requests(path)
    return header, steps


def load_trace_requests(path: Path | str) -> tuple[dict, list[StepRecord], list[RequestRecord]]:
    """(header, steps, requests) of a trace (requests in the order the engine thread queued them; none in a trace
    written before they were recorded); a malformed file is a :class:`ConfigError` naming the line."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"step trace {path}: cannot read it ({exc.strerror})") from None
    if not lines:
        raise ConfigError(f"step trace {path} is empty: write one with `jalapeno serve --step-trace PATH`")
    header: dict | None = None
    steps: list[StepRecord] = []
    requests: list[RequestRecord] = []
    for i, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
            kind = obj.pop("kind")
            if kind == "header":
                header = obj
            elif kind == "step":
                obj["run_s"], obj["wait_s"] = tuple(obj["run_s"]), tuple(obj["wait_s"])
                steps.append(StepRecord(**obj))
            elif kind == "request":
                requests.append(RequestRecord(**obj))
            else:
                raise ValueError(f"unknown kind {kind!r}")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"step trace {path} line {i} is not a step-trace record ({exc})") from None
    if header is None:
        raise ConfigError(f"step trace {path} has no header line: was it written by `jalapeno serve --step-trace`?")
    return header, steps, requests


@dataclass(frozen=True)
class WindowSplit:
    """A time window of a served run, divided (seconds unless named otherwise)."""

    wall_s: float
    steps: int
    step_s: float  # inside ``Engine.step()``
    deliver_s: float  # after a step, handing its outputs to the event loop (engine thread)
    between_s: float  # from one step's delivery to the next step's start while the engine had work
    idle_s: float  # the engine had nothing to run
    decode_tokens: int
    prefill_tokens: int
    run_s: dict[str, float]  # CPU seconds each thread group ran on a core
    wait_s: dict[str, float]  # seconds each thread group waited, runnable, for a core
    steal_s: float = 0.0  # CPU seconds the hypervisor took from the machine's virtual CPUs over those steps

    def per_decode_token_ms(self) -> dict[str, float]:
        n = max(self.decode_tokens, 1)
        return {"step": 1e3 * self.step_s / n, "deliver": 1e3 * self.deliver_s / n,
                "between": 1e3 * self.between_s / n}


def split(steps: list[StepRecord], t0: float, t1: float) -> WindowSplit:
    """Divide ``[t0, t1]`` (monotonic s) by the steps that start in it: time in engine steps, in delivery, between
    steps while busy, and idle; with the CPU and run-queue wait of each thread group over those steps. A client
    sees a step's tokens before the engine thread records their delivery, so the window ends at the later of
    ``t1`` and the last step's delivery (``wall_s`` is that span: the parts add up to it)."""
    if not t1 > t0:
        raise ConfigError(f"the window must end after it starts (got {t0} .. {t1})")
    inside = [s for s in steps if t0 <= s.t_start < t1]
    step_s = sum(s.t_end - s.t_start for s in inside)
    deliver_s = sum(s.t_done - s.t_end for s in inside)
    between = idle = 0.0
    prev = t0
    for s in inside:
        gap = s.t_start - prev
        if s.idle_before or prev == t0:
            idle += gap
        else:
            between += gap
        prev = s.t_done
    end = max(t1, prev)
    idle += end - prev
    run = {g: sum(s.run_s[i] for s in inside) for i, g in enumerate(GROUPS)}
    wait = {g: sum(s.wait_s[i] for s in inside) for i, g in enumerate(GROUPS)}
    return WindowSplit(end - t0, len(inside), step_s, deliver_s, between, idle,
                       sum(s.decode_tokens for s in inside), sum(s.prefill_tokens for s in inside), run, wait,
                       sum(s.steal_s for s in inside))


def decode_step_ms(steps: list[StepRecord], t0: float = float("-inf"), t1: float = float("inf")) -> dict[int, float]:
    """Median wall ms of the decode-only steps (no prefill tokens) in ``[t0, t1]``, by batch (sequences)."""
    import numpy as np

    by: dict[int, list[float]] = {}
    for s in steps:
        if s.prefill_tokens == 0 and s.decode_tokens > 0 and t0 <= s.t_start < t1:
            by.setdefault(s.decode_tokens, []).append(s.t_end - s.t_start)
    return {b: 1e3 * float(np.median(v)) for b, v in sorted(by.items())}
