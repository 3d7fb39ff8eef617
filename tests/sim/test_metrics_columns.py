"""``compute_metrics`` takes TPOT and the goodput count from columns: the same numbers as the per-request
reference (``RequestOutcome.tpot_s`` and ``SLO.met`` called on each outcome), bit for bit."""

import random

import numpy as np
import pytest

from jalapeno.metrics import SLO, RequestOutcome, _stats, compute_metrics


def outcomes(seed: int) -> list[RequestOutcome]:
    """Random outcomes with the edge cases: one output token (no TPOT), failures, ties at the thresholds,
    NaN latencies."""
    rng = random.Random(seed)
    out = []
    for i in range(400):
        ttft = rng.choice([rng.uniform(0.001, 3.0), 0.2, float("nan")]) if i % 37 else 0.2
        tokens = rng.choice([0, 1, 2, rng.randint(3, 2000)])
        e2el = ttft + (tokens - 1) * rng.choice([0.05, rng.uniform(0.001, 0.2)]) if tokens > 1 else ttft
        if i % 53 == 0:
            e2el = float("nan")
        ok = i % 11 != 0
        out.append(RequestOutcome(ok, rng.randint(1, 9000), tokens, ttft, e2el, (), None, 0.0, "" if ok else "x"))
    return out


@pytest.mark.parametrize("slo", [SLO(200, 50), SLO(ttft_ms=200), SLO(tpot_ms=50), SLO(e2el_ms=30_000),
                                 SLO(1500, 20, 60_000)])
@pytest.mark.parametrize("seed", [1, 2])
def test_tpot_and_goodput_from_columns_equal_the_per_request_reference(slo, seed):
    os_ = outcomes(seed)
    m = compute_metrics(os_, 100.0, slo=slo)
    ok = [o for o in os_ if o.success]
    good = sum(1 for o in ok if slo.met(o))  # the reference: one call per request
    assert m["request_goodput"] == good / 100.0 and m["slo_attainment"] == good / len(os_)
    assert 0 < good < len(ok)  # the thresholds cut: the count can be wrong both ways
    tpot = np.array([t for o in ok if (t := o.tpot_s) is not None], dtype=np.float64) * 1000
    want = _stats("tpot", tpot)
    assert {k: np.float64(m[k]).tobytes() for k in want} == {k: np.float64(v).tobytes() for k, v in want.items()}
