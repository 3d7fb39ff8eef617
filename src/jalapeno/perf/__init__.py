"""Roofline cost model of one engine step: the chip twin's timing and energy (see docs/cost-model.md)."""

from jalapeno.hardware.schema import Efficiency
from jalapeno.perf.model import CostModel, advance_decode
from jalapeno.perf.shape import StepShape
from jalapeno.perf.types import KVTier, MemoryPlan, MemoryRule, OpCost, Parallelism, Precision, StepBreakdown, StepCost

__all__ = [
    "CostModel",
    "Efficiency",
    "KVTier",
    "MemoryPlan",
    "MemoryRule",
    "OpCost",
    "Parallelism",
    "Precision",
    "StepBreakdown",
    "StepCost",
    "StepShape",
    "advance_decode",
]
