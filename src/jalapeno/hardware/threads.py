"""The OpenMP thread policy: how idle OpenMP workers wait (``OMP_WAIT_POLICY``) and whether they are pinned to
cores (``GOMP_CPU_AFFINITY``), chosen by measurement on the machine at hand.

OpenMP reads these variables once, when the runtime initialises (for PyTorch: at ``import torch``), so a policy
can only be applied to a process that has not imported torch yet, and measured only in fresh child processes:

* :func:`measure_thread_policies` (``jalapeno hardware probe``) runs a short batch-1 decode and one prefill step
  of a random SmolLM2-shaped model in a child process per candidate (:data:`CANDIDATES`: PASSIVE / ACTIVE wait,
  unpinned / pinned), rounds alternating, best of each kept; :func:`choose_thread_policy` picks the winner
  (a busy machine may measure PASSIVE best: spinning workers then steal the core the main thread needs).
* :func:`apply_thread_policy` is the one call an entry point makes before it imports torch (``jalapeno
  generate``, ``jalapeno serve``, the benchmarks' own side): it sets the recorded policy in the process
  environment unless the user set any of the OpenMP policy variables (:data:`POLICY_VARS`) themselves.

This module does not import torch (the measuring child does, in its own process).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from jalapeno.errors import ConfigError

#: the OpenMP variables that make up a thread policy; a user who sets any of them owns the policy
POLICY_VARS = ("OMP_WAIT_POLICY", "GOMP_CPU_AFFINITY", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_SPINCOUNT",
               "KMP_AFFINITY", "KMP_BLOCKTIME")

WaitPolicy = Literal["PASSIVE", "ACTIVE"]

#: libgomp's spin count when ``OMP_WAIT_POLICY`` is undefined (its documentation of ``GOMP_SPINCOUNT``): an
#: ACTIVE worker spins this long after a parallel region, then sleeps (ACTIVE's own default is 3e10: never sleeps)
ACTIVE_SPINCOUNT = 300_000


@dataclass(frozen=True)
class ThreadPolicy:
    """How OpenMP workers wait between parallel regions and whether they are pinned (worker i to the i-th
    usable core, libgomp's ``GOMP_CPU_AFFINITY``, as vLLM's CPU worker runs)."""

    wait: WaitPolicy = "PASSIVE"
    pinned: bool = False

    def __post_init__(self) -> None:
        if self.wait not in ("PASSIVE", "ACTIVE"):
            raise ConfigError(f"OpenMP wait policy must be PASSIVE or ACTIVE, got {self.wait!r}")

    @property
    def label(self) -> str:
        return f"{self.wait.lower()}-{'pinned' if self.pinned else 'unpinned'}"

    def env(self, cores: Sequence[int]) -> dict[str, str]:
        """The environment variables that set this policy (``cores``: the usable cores, in order).

        ACTIVE spins a bounded count (:data:`ACTIVE_SPINCOUNT`) and then sleeps, as libgomp does when no policy
        is set (what vLLM's CPU worker runs with). ``OMP_WAIT_POLICY=ACTIVE`` alone means 30 billion spins, i.e.
        idle workers that never sleep: measured 2026-12-02, an idle engine's two spinning workers took both cores
        while vLLM's side of a same-run comparison was timed (its batch-1 decode 4.5 tok/s against 15.5)."""
        out = {"OMP_WAIT_POLICY": self.wait}
        if self.wait == "ACTIVE":
            out["GOMP_SPINCOUNT"] = str(ACTIVE_SPINCOUNT)
        if self.pinned:
            out["GOMP_CPU_AFFINITY"] = " ".join(str(c) for c in cores)
        return out

    @classmethod
    def from_label(cls, label: str) -> ThreadPolicy:
        wait, _, pin = label.partition("-")
        if pin not in ("pinned", "unpinned"):
            raise ConfigError(f"unknown thread policy {label!r}; use e.g. passive-unpinned or active-pinned")
        return cls(wait.upper(), pin == "pinned")  # type: ignore[arg-type]


#: the default where nothing was measured: idle workers sleep, threads float (safe on a shared machine)
DEFAULT_POLICY = ThreadPolicy()
CANDIDATES = tuple(ThreadPolicy(w, p) for w in ("PASSIVE", "ACTIVE") for p in (False, True))


def usable_cores() -> list[int]:
    """The cores this process may run on, in order."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def choose_thread_policy(times: Mapping[ThreadPolicy, tuple[float, float]]) -> ThreadPolicy:
    """The policy with the lowest geometric mean of its (decode step, prefill step) seconds; on a tie the
    earlier in :data:`CANDIDATES` order (the default first). Policies measured with a non-positive time are
    ignored."""
    valid = {p: t for p, t in times.items() if min(t) > 0}
    if not valid:
        raise ConfigError("no thread policy was measured; cannot choose one")
    order = {p: i for i, p in enumerate(CANDIDATES)}
    return min(valid, key=lambda p: (math.log(valid[p][0]) + math.log(valid[p][1]), order.get(p, len(order))))


def _user_policy(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: environ[k] for k in POLICY_VARS if k in environ}


def apply_thread_policy(environ: MutableMapping[str, str] | None = None, probe_dir: Path | None = None,
                        loaded: Callable[[], bool] = lambda: "torch" in sys.modules, serving: bool = False) -> str:
    """Set this process's OpenMP thread policy before torch loads: the one ``jalapeno hardware probe`` recorded
    in ``local.yaml`` (``execution.thread_policy``), else :data:`DEFAULT_POLICY`; nothing when the user set any
    of :data:`POLICY_VARS`, or when torch is already loaded (OpenMP has read its settings; the line says so).

    ``serving``: the process shares its cores with an event loop and its clients (``jalapeno serve``). The probe
    times an engine alone; spinning or pinned workers that win there took the cores a server's other threads need
    (2026-12-02, quiet 2-core VM, active-unpinned recorded: served batch-1 TPOT 129.5 ms against 52.9 ms with the
    default twelve minutes earlier, docs/performance.md; measured before ACTIVE's spin was bounded). With the bounded
    spin the served loop is level with the default (2026-12-02 08:31-08:34, load 1.4-1.7, ISL 512 OSL 64: batch-1
    TPOT 37.2 vs 37.8 ms, c = 8 81.2 vs 77.6 ms, within the runs' own spread, docs/fidelity.md), so a server keeps
    the default unless the user sets one.
    Returns one line saying which policy is in force."""
    env = os.environ if environ is None else environ
    user = _user_policy(env)
    if user:
        return "thread policy: set in the environment (" + ", ".join(f"{k}={v}" for k, v in user.items()) + ")"
    policy, source = recorded_policy(probe_dir)
    if serving and policy != DEFAULT_POLICY:
        policy, source = DEFAULT_POLICY, (f"default for a server: the probe's {policy.label} was measured on an "
                                          "engine alone; set OMP_WAIT_POLICY / GOMP_CPU_AFFINITY to override")
    if loaded():
        return f"thread policy: torch was already loaded; OpenMP keeps its defaults ({policy.label} not applied)"
    env.update(policy.env(usable_cores()))
    return f"thread policy: {policy.label} ({source})"


def recorded_policy(probe_dir: Path | None = None) -> tuple[ThreadPolicy, str]:
    """The policy recorded in the probed ``local.yaml`` and its source, or the default and why."""
    from jalapeno.hardware.catalog import LOCAL_KEY, default_probe_dir, load_spec_file

    path = (probe_dir or default_probe_dir()) / f"{LOCAL_KEY}.yaml"
    if not path.is_file():
        return DEFAULT_POLICY, "default; `jalapeno hardware probe` measures this machine's"
    ex = load_spec_file(path).execution
    if ex is None or ex.thread_policy is None:
        return DEFAULT_POLICY, f"default; {path} has no measured thread policy (re-run `jalapeno hardware probe`)"
    tp = ex.thread_policy
    return ThreadPolicy(tp.wait, tp.pinned), f"measured: {tp.source}"


# ---- measurement (child processes) ---------------------------------------------------------------------------


def child_env(policy: ThreadPolicy, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without any OpenMP policy variable, plus ``policy``'s."""
    env = {k: v for k, v in base.items() if k not in POLICY_VARS}
    env.update(policy.env(usable_cores()))
    return env


def _run_child(policy: ThreadPolicy, quick: bool, timeout_s: float) -> tuple[float, float]:
    cmd = [sys.executable, "-m", "jalapeno.hardware.threads", "--quick" if quick else "--full"]
    out = subprocess.run(cmd, env=child_env(policy, os.environ), capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"thread policy {policy.label}: the measuring process failed ({tail})")
    msg = json.loads(out.stdout.strip().splitlines()[-1])
    return float(msg["decode_s"]), float(msg["prefill_s"])


def measure_thread_policies(quick: bool, rounds: int | None = None, timeout_s: float = 300.0,
                            run: Callable[[ThreadPolicy, bool, float], tuple[float, float]] = _run_child,
                            ) -> dict[ThreadPolicy, tuple[float, float]]:
    """Best (decode step, prefill step) seconds per candidate policy, each measured in a fresh child process,
    the candidates alternating ``rounds`` times (default 1 quick, 2 otherwise)."""
    best: dict[ThreadPolicy, tuple[float, float]] = {}
    for _ in range(rounds or (1 if quick else 2)):
        for policy in CANDIDATES:
            d, p = run(policy, quick, timeout_s)
            old = best.get(policy, (math.inf, math.inf))
            best[policy] = (min(old[0], d), min(old[1], p))
    return best


def _measure_here(quick: bool) -> dict[str, float]:
    """In the child: a batch-1 decode step and a prefill step of a random SmolLM2-shaped model through the model
    runner (the engine's own path choice), best times."""
    import torch

    from jalapeno.backends.torch.attention import SeqSlice
    from jalapeno.backends.torch.runner import ModelRunner
    from jalapeno.hardware.probe import CROSSOVER_MODEL, _best_time, random_llama

    layers, prompt, budget = (2, 128, 0.3) if quick else (6, 512, 1.0)
    loaded = random_llama(layers, *CROSSOVER_MODEL, "cpu")
    blocks = -(-prompt // 16) + 1
    runner = ModelRunner(loaded.model, blocks, 16, "cpu", torch.float32)
    table = list(range(blocks))
    decode = [SeqSlice(64, 1, table)]
    prefill = [SeqSlice(0, prompt, table)]
    d = _best_time(lambda: runner.forward(decode, [1], [0]), budget, lambda: None, min_reps=5)
    p = _best_time(lambda: runner.forward(prefill, [1] * prompt, [prompt - 1]), budget, lambda: None)
    return {"decode_s": d, "prefill_s": p}


if __name__ == "__main__":
    print(json.dumps(_measure_here("--quick" in sys.argv[1:])))
