"""The simulated backend's scalar pricing path: the same floats as the numpy path it replaces for short runs."""

from __future__ import annotations

import numpy as np
import pytest

from jalapeno.sim.backend import _numpy_sum


def test_numpy_sum_equals_numpy_bit_for_bit():
    """Energy sums must stay byte-identical to ``float(np.sum(array))`` (numpy's pairwise summation), at every
    length around its block edges (8, 128) and above."""
    rng = np.random.default_rng(3)
    for n in [0, 1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 127, 128, 129, 130, 255, 256, 257, 1000, 4099]:
        for _ in range(20):
            xs = (rng.random(n) * 10.0 ** rng.integers(-6, 6, size=n)).tolist()
            assert _numpy_sum(xs) == float(np.sum(np.array(xs)))
        assert _numpy_sum([0.1] * n) == float(np.sum(np.full(n, 0.1)))


def _full_counts_backend():
    """Reference: a backend whose results list every chunk's token count (``counts_skip`` 0), as before the
    group's members were left out (a subclass: the native build's methods cannot be replaced per instance)."""
    from jalapeno.sim.backend import SimBackend

    class FullCounts(SimBackend):
        skipped = 0

        def execute(self, batch):
            r = super().execute(batch)
            if r.counts_skip:
                self.skipped += 1
                r.token_counts = [len(r.step_durations)] * r.counts_skip + list(r.token_counts)
                r.counts_skip = 0
            return r

    return FullCounts


@pytest.mark.parametrize("model", ["gpt-oss-120b", "llama-3.1-8b"])
def test_counts_without_the_group_members_equal_the_full_list(model):
    """``StepResult.counts_skip`` (the lockstep group's members left out of ``token_counts``) gives the same
    run, request by request and step by step, as every chunk's count listed; the skip is taken (the test can
    fail)."""
    from dataclasses import astuple

    from jalapeno.engine import Engine, EngineConfig
    from jalapeno.sim.backend import SimBackend
    from jalapeno.sim.client import run_workload
    from jalapeno.sim.factory import cost_model_for
    from jalapeno.workload import inferencex_workload

    wl = inferencex_workload(300, 200, concurrency=24, num_prompts=72, seed=5)
    runs = []
    for full in (False, True):
        b = (_full_counts_backend() if full else SimBackend)(cost_model_for(model, "h200"), keep_trace=True)
        e = Engine(b, EngineConfig(max_num_seqs=64, max_num_batched_tokens=2048))
        r = run_workload(e, wl)
        v, c = e.itl_samples()
        runs.append(([astuple(o) for o in r.outcomes], r.num_steps, r.duration_s, r.energy_j, v.tolist(), c.tolist(),
                     b.trace))
        if full:
            assert b.skipped > 10
    assert runs[0] == runs[1]


@pytest.mark.parametrize("model", ["gpt-oss-120b", "llama-3.1-8b"])
def test_group_only_batches_price_as_the_general_path(model):
    """``SimBackend._execute_group`` (a batch that is the lockstep group alone, one routine) returns what the
    general path (``_shapes`` + ``_execute_lists`` + ``_token_counts``, counts listed for every chunk) returns
    for the same batch, batch by batch, in KV-starved closed loops (preemption events of the group alone, one-
    and multi-step; a sliding-window model and a full-attention one); and the whole run is the same with the
    routine replaced by the general path. The routine is taken (the test can fail)."""
    from dataclasses import astuple

    from jalapeno.engine import Engine, EngineConfig
    from jalapeno.sim.backend import SimBackend
    from jalapeno.sim.client import run_workload
    from jalapeno.sim.factory import cost_model_for
    from jalapeno.workload import inferencex_workload

    def general(b, batch):
        shape, nxt = b._shapes(batch, batch.num_steps > 1)
        r = b._execute_lists(batch, shape, nxt)
        return r.step_durations, r.duration_s, r.energy_j, [len(r.step_durations)] * r.counts_skip + list(r.token_counts)

    wl = inferencex_workload(64, 300, concurrency=48, num_prompts=120, seed=7)  # contexts cross the 128 window
    runs = []
    for fast in (True, False):
        taken = {"one": 0, "multi": 0}

        class Checked(SimBackend):  # a subclass: the native build's methods cannot be replaced per instance
            def _execute_group(self, batch, g, steps, fast=fast, taken=taken):
                ref = general(self, batch)
                if not fast:
                    shape, nxt = self._shapes(batch, steps > 1)
                    return self._execute_lists(batch, shape, nxt)
                r = super()._execute_group(batch, g, steps)
                assert (r.step_durations, r.duration_s, r.energy_j, [len(r.step_durations)] * r.counts_skip
                        + list(r.token_counts)) == ref
                assert type(r.duration_s) is type(ref[1]) and type(r.energy_j) is type(ref[2])
                taken["multi" if steps > 1 else "one"] += 1
                return r

        b = Checked(cost_model_for(model, "h200"))
        e = Engine(b, EngineConfig(max_num_seqs=48, max_num_batched_tokens=2048, num_kv_blocks=500))
        r = run_workload(e, wl)
        v, c = e.itl_samples()
        runs.append(([astuple(o) for o in r.outcomes], r.num_steps, r.duration_s, r.energy_j, v.tolist(), c.tolist(),
                     e.scheduler.num_preemptions))
        if fast:
            assert taken["multi"] > 50 and taken["one"] > 5, taken
    assert runs[0][-1] > 50  # KV-starved: preemptions happened
    assert runs[0] == runs[1]
