"""metrics' median and percentiles from one sorted copy equal numpy's np.median / np.percentile bit for bit (they
replace them on the simulator's path so that ``numpy.ma``, which those import, stays out of start-up)."""

from __future__ import annotations

import numpy as np

from jalapeno.metrics import PERCENTILES, _median_sorted, _percentile_sorted, _stats


def _same(a: float, b: float) -> bool:
    return np.float64(a).tobytes() == np.float64(b).tobytes()


def test_order_statistics_equal_numpy_bit_for_bit():
    rng = np.random.default_rng(19)
    for t in range(3000):
        n = int(rng.integers(1, 400))
        kind = t % 4
        if kind == 0:
            v = rng.random(n) * 1000
        elif kind == 1:  # many ties
            v = rng.integers(0, 50, n).astype(float) * 0.1
        elif kind == 2:
            v = rng.lognormal(size=n) * 37.3
        else:
            v = rng.normal(size=n) * 1e3
            if n > 2 and t % 8 == 3:
                v[rng.integers(0, n)] = np.nan
        s = np.sort(v)
        assert _same(float(np.median(v)), _median_sorted(s)), (n, kind)
        for q in (*PERCENTILES, 50, 1, 0, 100, 37.5):
            assert _same(float(np.percentile(v, q)), _percentile_sorted(s, q)), (n, kind, q)


def test_stats_equal_numpys_for_floats_and_fall_back_for_other_dtypes():
    rng = np.random.default_rng(3)
    for v in (rng.random(1001) * 20, rng.random(1000) * 20, rng.integers(0, 9, 11), np.array([4.25])):
        out = _stats("x", v)
        assert _same(out["median_x_ms"], float(np.median(v)))
        for p in PERCENTILES:
            assert _same(out[f"p{p}_x_ms"], float(np.percentile(v, p)))
