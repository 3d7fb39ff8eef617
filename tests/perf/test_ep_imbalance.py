"""Expert-parallel load imbalance: the busiest rank's load (features ``Ue``, ``Tm``) against a Monte Carlo of
uniform top-k routing, and its effect on step time (time follows the busiest rank; FLOPs stay the average)."""

import numpy as np
import pytest
from perf_refdata import DEEPSEEK_R1, H200

from jalapeno.perf import CostModel, Parallelism, Precision, StepShape
from jalapeno.perf.ops import IDX, Routing, features


def monte_carlo(E: int, k: int, ep: int, T: int, trials: int, rng) -> tuple[float, float]:
    """Expected max over ranks of (token, expert) pairs and of touched experts, by sampling the router."""
    n = E // ep
    pairs, touched = [], []
    for _ in range(trials):
        chosen = np.argsort(rng.random((T, E)), axis=1)[:, :k]  # k distinct experts per token, uniformly
        pairs.append(np.bincount((chosen // n).ravel(), minlength=ep).max())
        hit = np.zeros(E, bool)
        hit[chosen.ravel()] = True
        touched.append(hit.reshape(ep, n).sum(axis=1).max())
    return float(np.mean(pairs)), float(np.mean(touched))


@pytest.mark.parametrize("E, k, ep", [(256, 8, 8), (128, 4, 4), (128, 4, 8)])
@pytest.mark.parametrize("T", [16, 64, 256])
def test_busiest_rank_matches_monte_carlo(E, k, ep, T):
    f = features(StepShape(decode_seqs=T, decode_tokens=T), Routing.of(E, k, ep))
    mc_pairs, mc_touched = monte_carlo(E, k, ep, T, 150, np.random.default_rng(E + k + ep + T))
    model_pairs = f[IDX["Tm"]] * k / ep
    model_touched = f[IDX["Ue"]] * E / ep
    assert model_pairs == pytest.approx(mc_pairs, rel=0.05)
    assert model_touched == pytest.approx(mc_touched, rel=0.05)
    assert model_pairs > T * k / ep  # busier than the average rank
    assert f[IDX["Ue"]] >= f[IDX["U"]]


def test_no_expert_parallelism_means_no_imbalance():
    shape = StepShape(decode_seqs=32, decode_tokens=32)
    f = features(shape, Routing.of(256, 8, 1))
    assert f[IDX["Ue"]] == f[IDX["U"]] == pytest.approx(1 - (1 - 8 / 256) ** 32)
    assert f[IDX["Tm"]] == 32
    assert features(shape, 1 - 8 / 256) == f  # the legacy float argument gives the same vector
    dense = features(shape, Routing.of(0, 0, 8))
    assert dense[IDX["U"]] == dense[IDX["Ue"]] == 0.0


def test_imbalance_fades_as_tokens_per_rank_grow():
    ro = Routing.of(256, 8, 8)
    ratio = [features(StepShape(prefill_tokens=t, prefill_seqs=1), ro)[IDX["Tm"]] / t for t in (8, 64, 512, 8192)]
    assert ratio == sorted(ratio, reverse=True) and ratio[-1] < 1.03 and ratio[0] > 1.2


def test_ep_step_is_slower_than_balanced_but_counts_the_same_flops():
    """R1 on 8xH200 TP8 EP8, decode of 64 sequences: the busiest rank reads ~10% more expert weights than the
    average one, so the step is slower than the balanced model while the FLOP total is unchanged."""
    cm = CostModel(DEEPSEEK_R1, H200, Parallelism(tp=8, ep=8), Precision("fp8"))
    shape = StepShape.from_lists(decode_ctx=[1024] * 64)
    imbalanced = cm.breakdown(shape)
    cm._routing = 1 - 8 / 256  # the balanced model (same matrices, no EP imbalance in the features)
    balanced = cm.breakdown(shape)
    exp_i = next(o for o in imbalanced.ops if o.name == "moe_experts")
    exp_b = next(o for o in balanced.ops if o.name == "moe_experts")
    assert exp_i.flops == pytest.approx(exp_b.flops) and exp_i.bytes == pytest.approx(exp_b.bytes)
    assert 1.05 < exp_i.time_s / exp_b.time_s < 1.2
    assert imbalanced.time_s > balanced.time_s
