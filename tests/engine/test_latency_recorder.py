"""The pooled inter-token gaps: the flat multi-step record (one list of gaps, run lengths of counts) gives the
same arrays, value for value and in the same order, as one array per batch concatenated (the plain reference
written out here), also after ``take`` and with batches of one step (no gaps)."""

from itertools import accumulate
from operator import sub
import random

import numpy as np

from jalapeno.engine.timing import LatencyRecorder


def reference(scalars, batches):
    vals = [np.asarray([v for v, _ in scalars], dtype=np.float64)]
    cnts = [np.asarray([c for _, c in scalars], dtype=np.int64)]
    for ends, w in batches:
        gaps = list(map(sub, ends[2:], ends[1:-1]))
        vals.append(np.asarray(gaps, dtype=np.float64))
        cnts.append(np.full(len(gaps), w, dtype=np.int64))
    return np.concatenate(vals), np.concatenate(cnts)


def test_samples_equal_one_array_per_batch():
    rng = random.Random(7)
    rec = LatencyRecorder()
    v, c = rec.samples()
    assert v.dtype == np.float64 and c.dtype == np.int64 and v.size == c.size == 0
    for _round in range(3):
        scalars, batches = [], []
        for _ in range(200):
            if rng.random() < 0.4:
                g, n = rng.random() * 1e-2, rng.randint(1, 50)
                rec.add(g, n)
                scalars.append((g, n))
            else:
                ends = list(accumulate((rng.random() * 1e-2 for _ in range(rng.randint(1, 12))),
                                       initial=rng.random() * 100))
                w = rng.randint(1, 1024)
                rec.add_steps(ends, w)
                batches.append((ends, w))
        want_v, want_c = reference(scalars, batches)
        got_v, got_c = rec.samples()
        assert got_v.dtype == want_v.dtype and got_c.dtype == want_c.dtype
        assert got_v.tobytes() == want_v.tobytes() and got_c.tobytes() == want_c.tobytes()
        taken_v, taken_c = rec.take()
        assert taken_v.tobytes() == want_v.tobytes() and taken_c.tobytes() == want_c.tobytes()
        assert rec.samples()[0].size == 0
