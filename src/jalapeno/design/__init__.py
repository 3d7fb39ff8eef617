"""``jalapeno design``: what should the chip be? A physical design model (knobs -> area, power, cost -> a
``ChipSpec``) and a search over the knobs judged by the serving simulator (docs/design.md)."""

from jalapeno.design.physical import DesignKnobs, PhysicalDesign, evaluate, to_chipspec

__all__ = ["DesignKnobs", "PhysicalDesign", "evaluate", "to_chipspec"]
