"""``StepShape.of`` (the simulator's per-step constructor) builds the same frozen object as ``StepShape(...)``."""

from __future__ import annotations

import dataclasses
import inspect
import random

import pytest

from jalapeno.perf.shape import StepShape


def _state(x) -> list:
    """Every field's name, type and value in field order; plus the instance dict where there is one (pure Python:
    ``StepShape`` / ``StepTiming`` compiled by ``jalapeno build-native`` are native classes without one)."""
    out = [(f.name, type(getattr(x, f.name)), getattr(x, f.name)) for f in dataclasses.fields(x)]
    return out + [list(vars(x).items())] if hasattr(x, "__dict__") else out


def test_of_takes_every_field_in_order():
    params = list(inspect.signature(StepShape.of).parameters)
    assert params == [f.name for f in dataclasses.fields(StepShape)]


def test_of_equals_the_dataclass_constructor():
    rng = random.Random(19)
    for _ in range(500):
        v = [rng.randrange(10**6) if f.type in ("int", int) else rng.random() * 1e6
             for f in dataclasses.fields(StepShape)]
        a, b = StepShape.of(*v), StepShape(*v)
        assert a == b and hash(a) == hash(b) and repr(a) == repr(b) and _state(a) == _state(b)
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.decode_seqs = 1  # type: ignore[misc]
        assert dataclasses.replace(a, decode_seqs=3) == dataclasses.replace(b, decode_seqs=3)


def test_memoised_routing_terms_equal_fresh_ones():
    """``features(shape, moe, memo)`` (the cost model keeps the routing terms by step tokens) equals
    ``features(shape, moe)`` across random shapes and routings, including expert-parallel imbalance."""
    from jalapeno.perf.ops import Routing, features

    rng = random.Random(7)
    for moe in (1.0, 0.75, Routing.of(256, 8, 8), Routing.of(128, 4, 8, slots=160), Routing.of(32, 2, 1)):
        memo: dict = {}
        for _ in range(400):
            ds = rng.randrange(0, 64)
            shape = StepShape(rng.choice([0, rng.randrange(1, 4096)]), rng.randrange(0, 4), rng.random() * 1e6,
                              rng.random() * 1e6, rng.randrange(10**5), rng.randrange(10**5), ds,
                              ds * rng.choice([1, 2, 4]), rng.randrange(10**6), rng.randrange(10**6), rng.randrange(64))
            assert features(shape, moe, memo) == features(shape, moe)
        assert memo  # the memo was used


def test_step_timing_of_equals_the_dataclass_constructor():
    from jalapeno.engine.timing import StepTiming

    assert list(inspect.signature(StepTiming.of).parameters) == [f.name for f in dataclasses.fields(StepTiming)]
    rng = random.Random(5)
    for _ in range(200):
        v = (rng.random(), rng.random(), rng.random(), rng.randrange(1, 64))
        a, b = StepTiming.of(*v), StepTiming(*v)
        assert a == b and hash(a) == hash(b) and repr(a) == repr(b) and _state(a) == _state(b)
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.t0 = 1.0  # type: ignore[misc]


def test_step_cost_of_equals_the_dataclass_constructor():
    """``StepCost.of`` (one per priced step) builds the same frozen object as ``StepCost(...)``."""
    from jalapeno.perf.types import StepCost

    assert list(inspect.signature(StepCost.of).parameters) == [f.name for f in dataclasses.fields(StepCost)]
    rng = random.Random(3)
    for _ in range(200):
        v = [rng.random() * 10 ** rng.randrange(-6, 15) for _ in range(4)]
        a, b = StepCost.of(*v), StepCost(*v)
        assert a == b and hash(a) == hash(b) and repr(a) == repr(b) and list(vars(a).items()) == list(vars(b).items())
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.time_s = 1.0  # type: ignore[misc]
