"""The inference engine: one scheduler and KV block manager for every backend (real or simulated).

Start at :class:`Engine` (``engine.py``); the seam to backends is ``interface.py``.
"""

from jalapeno.engine.config import EngineConfig
from jalapeno.engine.engine import Engine, EngineStats
from jalapeno.engine.batch import ScheduledBatch, SeqChunk, StepResult
from jalapeno.engine.interface import Backend, Capabilities, Clock, VirtualClock, WallClock
from jalapeno.engine.sequence import RequestOutput, SamplingParams, Sequence, SeqStatus

__all__ = [
    "Backend",
    "Capabilities",
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
