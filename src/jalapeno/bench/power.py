"""GPU power sampling over NVML (``nvidia-ml-py``), for servers running on this machine.

A background thread reads every GPU's board power (``nvmlDeviceGetPowerUsage``, milliwatts) every
``interval_s`` and integrates it (trapezoids) into joules. Without NVML or without NVIDIA GPUs the sampler says
so (``available`` False, ``reason`` set) and reports no energy: power is never invented.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class PowerReading:
    energy_j: float | None
    duration_s: float
    num_samples: int
    gpus: list[str] = field(default_factory=list)

    @property
    def avg_power_w(self) -> float | None:
        if self.energy_j is None or self.duration_s <= 0:
            return None
        return self.energy_j / self.duration_s


class PowerSampler:
    """Context manager: ``with PowerSampler() as p: ...; p.reading``."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.available = False
        self.reason = ""
        self.reading: PowerReading | None = None
        self._nvml = None
        self._handles: list = []
        self._names: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples: list[tuple[float, float]] = []  # (time s, total watts)
        self._init()

    def _init(self) -> None:
        try:
            import pynvml  # from nvidia-ml-py; optional
        except ImportError:
            self.reason = "nvidia-ml-py is not installed"
            return
        try:
            pynvml.nvmlInit()
            n = pynvml.nvmlDeviceGetCount()
            if n == 0:
                self.reason = "no NVIDIA GPU on this machine"
                pynvml.nvmlShutdown()
                return
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
            self._names = [_name(pynvml.nvmlDeviceGetName(h)) for h in self._handles]
            for h in self._handles:  # fail now, not in the thread, if power readings are unsupported
                pynvml.nvmlDeviceGetPowerUsage(h)
        except Exception as exc:  # noqa: BLE001 - NVMLError subclasses vary by driver
            self.reason = f"NVML unavailable ({type(exc).__name__}: no NVIDIA driver/GPU or power not readable)"
            self._handles = []
            return
        self._nvml = pynvml
        self.available = True

    @property
    def gpus(self) -> list[str]:
        """Names of the GPUs being sampled."""
        return list(self._names)

    def _watts(self) -> float:
        assert self._nvml is not None
        return sum(self._nvml.nvmlDeviceGetPowerUsage(h) for h in self._handles) / 1000.0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._samples.append((time.perf_counter(), self._watts()))
            except Exception:  # noqa: BLE001 - a transient read failure drops one sample
                pass
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "PowerSampler":
        self._t0 = time.perf_counter()
        if self.available:
            self._thread = threading.Thread(target=self._run, name="jalapeno-power", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        t1 = time.perf_counter()
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            try:  # close the sampled window with a final reading; the window (and duration) ends there
                t1 = time.perf_counter()
                self._samples.append((t1, self._watts()))
            except Exception:  # noqa: BLE001
                pass
        energy = integrate_energy(self._samples) if len(self._samples) >= 2 else None
        self.reading = PowerReading(energy, t1 - self._t0, len(self._samples), list(self._names))
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass


def integrate_energy(samples: list[tuple[float, float]]) -> float:
    """Trapezoidal integral (joules) of ``(time s, power W)`` samples."""
    e = 0.0
    for (t0, p0), (t1, p1) in zip(samples, samples[1:]):
        e += 0.5 * (p0 + p1) * (t1 - t0)
    return e


def _name(raw) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
