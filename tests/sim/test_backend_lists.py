"""The simulated backend's scalar pricing path: the same floats as the numpy path it replaces for short runs."""

from __future__ import annotations

import numpy as np

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
