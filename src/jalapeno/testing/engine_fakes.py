"""An analytic cost model for scheduler tests: step time is affine in the step's sums, energy = power × time.

Independent of :mod:`jalapeno.perf`; ``decode_steps`` is literally ``k`` calls of ``step`` on the advanced
shape, so multi-step equality tests check the engine, not a vectorisation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from jalapeno.engine.batch import StepResult
from jalapeno.engine.interface import Backend
from jalapeno.perf.shape import StepShape


@dataclass
class FakeCost:
    time_s: float
    energy_j: float


@dataclass
class FakeCostModel:
    kv_tokens: int = 1 << 20
    base_s: float = 5e-3
    per_token_s: float = 2e-5
    per_ctx_s: float = 1e-8
    per_pair_s: float = 1e-10
    power_w: float = 700.0
    idle_w: float = 100.0
    num_chips: int = 1
    chips_per_replica: int = 1
    model: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(sliding_window=None, num_layers=4))
    calls: int = 0

    def step(self, s: StepShape) -> FakeCost:
        self.calls += 1
        t = (
            self.base_s
            + self.per_token_s * s.tokens
            + self.per_ctx_s * (s.decode_ctx_sum + s.prefill_kv_tokens)
            + self.per_pair_s * s.prefill_attn_pairs
        )
        return FakeCost(t, self.power_w * t)

    def decode_steps(self, s: StepShape, k: int):
        d = s.decode_seqs
        costs = [
            self.step(
                StepShape(
                    decode_seqs=d,
                    decode_tokens=s.decode_tokens,
                    decode_ctx_sum=s.decode_ctx_sum + i * d,
                    decode_ctx_sum_window=s.decode_ctx_sum_window + i * d,
                )
            )
            for i in range(k)
        ]
        return np.array([c.time_s for c in costs]), np.array([c.energy_j for c in costs])

    def memory_plan(self, max_batch_tokens: int = 8192):
        return SimpleNamespace(kv_capacity_tokens=self.kv_tokens, kv_bytes_per_token=1000.0)


class TokenBackend(Backend):
    """A 'real' (non-simulated) backend for engine tests: returns real token ids (``next_token(seq, pos)``),
    takes ``step_s`` per step and records every batch it was given."""

    def __init__(self, num_blocks: int = 1000, step_s: float = 1e-3, next_token=None) -> None:
        self.blocks = num_blocks
        self.step_s = step_s
        self.next_token = next_token or (lambda seq, pos: 1000 + pos)
        self.batches: list[list[tuple]] = []
        self.freed: list = []

    def num_kv_blocks(self, block_size: int) -> int:
        return self.blocks

    def free_sequence(self, seq) -> None:
        self.freed.append(seq.seq_id)

    def execute(self, batch):
        self.batches.append([(c.seq.seq_id, c.start, c.num_tokens, c.sample) for c in batch.chunks])
        toks = [[self.next_token(c.seq, c.start + c.num_tokens)] if c.sample else [] for c in batch.chunks]
        return StepResult(tokens=toks, duration_s=self.step_s)


def assert_same(m1: dict, m2: dict) -> None:
    """Two metrics dicts are equal: floats to 1e-9 relative, everything else exactly."""
    import math

    assert m1.keys() == m2.keys()
    for k in m1:
        a, b = m1[k], m2[k]
        if isinstance(a, float):
            assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (k, a, b)
        else:
            assert a == b, (k, a, b)


def hand_count_engine(base_s: float, per_token_s: float, multi: bool = False, **cfg):
    """An engine on the simulated backend whose step costs ``base_s + per_token_s x tokens`` (no context terms),
    8 sequences and 1,000 batched tokens at most, on a virtual clock: scheduler-policy tests count its times by
    hand. With ``multi`` False one ``step()`` runs one step, so arrivals land between the steps a test counts."""
    from jalapeno.engine import Engine, EngineConfig, VirtualClock
    from jalapeno.sim.backend import SimBackend

    backend = SimBackend(FakeCostModel(base_s=base_s, per_token_s=per_token_s, per_ctx_s=0.0, per_pair_s=0.0))
    if not multi:
        backend.max_multi_step = 1
    return Engine(backend, EngineConfig(max_num_seqs=8, max_num_batched_tokens=1000, **cfg), clock=VirtualClock())


def run_to_completion(engine, limit: int = 10000) -> None:
    """Step ``engine`` until it has nothing unfinished; an AssertionError after ``limit`` steps."""
    for _ in range(limit):
        if not engine.has_unfinished():
            return
        engine.step()
    raise AssertionError("engine did not finish")
