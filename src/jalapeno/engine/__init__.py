"""The inference engine: one scheduler and KV block manager for every backend (real or simulated).

Start at :class:`Engine` (``engine.py``); the seam to backends is ``interface.py``.
"""

from jalapeno.engine.config import EngineConfig
from jalapeno.engine.engine import Engine, EngineStats
from jalapeno.engine.interface import (
    Backend,
    Clock,
    ScheduledBatch,
    SeqChunk,
    StepResult,
    VirtualClock,
    WallClock,
)
from jalapeno.engine.sequence import RequestOutput, SamplingParams, Sequence, SeqStatus

__all__ = [
    "Backend",
    "Clock",
    "Engine",
    "EngineConfig",
    "EngineStats",
    "RequestOutput",
    "SamplingParams",
    "ScheduledBatch",
    "SeqChunk",
    "SeqStatus",
    "Sequence",
    "StepResult",
    "VirtualClock",
    "WallClock",
]
