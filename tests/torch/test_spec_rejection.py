"""Exact rejection sampling: the emitted token is distributed as plain sampling from the filtered target p
(chi-square over 20,000 vectorised draws on an 8-token vocabulary, temperature 1, with and without top-p), and the
same test rejects a deliberately wrong residual (resampling from p instead of normalize(max(0, p − q)))."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from jalapeno.backends.torch.speculative import probs_of
from jalapeno.backends.torch.sampler import RowSampling
from jalapeno.speculative.rejection import greedy_verify, one_hot_probs, rejection_sample

N = 20_000
V = 8
K = 2


def _dists(top_p: float):
    g = torch.Generator().manual_seed(11)
    target = torch.randn(K + 1, V, generator=g, dtype=torch.float64) * 1.5
    draft = torch.randn(K, V, generator=g, dtype=torch.float64) * 1.5  # a poor draft: many rejections
    spec = RowSampling(temperature=1.0, top_p=top_p)
    return probs_of(target, spec), probs_of(draft, spec)


def _first_token_pvalue(p, q, draft, residual=None):
    gen = torch.Generator().manual_seed(5)
    kw = {} if residual is None else {"residual": residual}
    toks, acc = rejection_sample(p.expand(N, -1, -1), q.expand(N, -1, -1), draft, gen, **kw)
    counts = torch.bincount(toks[:, 0], minlength=V).double()
    expected = p[0] * N
    support = expected > 0
    assert counts[~support].sum() == 0, "a token outside the target's top-p nucleus was emitted"
    assert ((acc >= 0) & (acc <= K)).all()
    return chisquare(counts[support].numpy(), expected[support].numpy()).pvalue


def _sampled_draft(q):
    gen = torch.Generator().manual_seed(7)
    return torch.stack([torch.multinomial(q[j], N, replacement=True, generator=gen) for j in range(K)], dim=1)


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_rejection_sampling_matches_plain_sampling(top_p):
    p, q = _dists(top_p)
    assert _first_token_pvalue(p, q, _sampled_draft(q)) > 1e-3


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_wrong_residual_fails_the_same_test(top_p):
    p, q = _dists(top_p)
    assert _first_token_pvalue(p, q, _sampled_draft(q), residual=lambda p_, q_: p_) < 1e-6


def test_deterministic_draft_one_hot_q_matches_plain_sampling():
    """n-gram proposals: q is one-hot on the proposed token (accepted with probability p(x))."""
    p, _ = _dists(1.0)
    draft = torch.tensor([[3, 5]]).expand(N, -1)
    q = one_hot_probs([3, 5], V, p.dtype)
    assert _first_token_pvalue(p, q, draft) > 1e-3


def test_greedy_verify_keeps_matching_prefix_then_the_target_token():
    assert greedy_verify([4, 9, 2], [4, 7]) == [4, 9]
    assert greedy_verify([4, 7, 2], [4, 7]) == [4, 7, 2]  # all accepted: bonus token
    assert greedy_verify([1, 7, 2], [4, 7]) == [1]
