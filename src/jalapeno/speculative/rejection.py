"""Exact speculative sampling (Leviathan et al. 2023, Chen et al. 2023), vectorised over a batch of drafts.

Draft token ``x_j`` (drawn from q_j) is accepted with probability ``min(1, p_j(x_j) / q_j(x_j))``; at the
first rejection the token is drawn from ``normalize(max(0, p_j − q_j))``; after k acceptances a bonus token is
drawn from ``p_k``. The emitted tokens are then distributed exactly as k+1 draws from the target p.
p and q must already carry temperature / top-k / top-p exactly as the plain sampler applies them
(:func:`jalapeno.backends.torch.sampler.filter_logits`). Deterministic proposals (n-gram) use q = one-hot.
"""

from __future__ import annotations

from typing import Callable

import torch


def exact_residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``normalize(max(0, p − q))`` per row; where p == q (the residual is empty, so a rejection had
    probability 0) fall back to p."""
    r = (p - q).clamp_min(0)
    s = r.sum(-1, keepdim=True)
    return torch.where(s > 0, r / s.clamp_min(torch.finfo(r.dtype).tiny), p)


def rejection_sample(
    p: torch.Tensor,
    q: torch.Tensor,
    draft: torch.Tensor,
    generator: torch.Generator | None = None,
    residual: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = exact_residual,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``p [B, k+1, V]`` target probabilities, ``q [B, k, V]`` draft probabilities, ``draft [B, k]`` int64.

    Returns ``(tokens [B, k+1], num_accepted [B])``: row b's output is ``tokens[b, :num_accepted[b] + 1]``
    (the accepted drafts, then the resampled or bonus token). ``residual`` is a parameter only so a test can
    show that a wrong one is caught."""
    b, k = draft.shape
    rows = torch.arange(b, device=p.device)
    if k:
        p_d = p[:, :k].gather(-1, draft[..., None]).squeeze(-1)
        q_d = q.gather(-1, draft[..., None]).squeeze(-1)
        u = torch.rand(b, k, generator=generator, device=p.device, dtype=p.dtype)
        accept = u * q_d < p_d  # u < p/q without dividing (q_d > 0 for a token drawn from q)
        num_acc = accept.to(torch.int64).cumprod(-1).sum(-1)
        q_full = torch.cat([q, torch.zeros_like(p[:, :1])], dim=1)  # bonus position: q = 0, residual = p
        dist = residual(p[rows, num_acc], q_full[rows, num_acc])
        # a bonus draw is from p itself, whatever ``residual`` does
        dist = torch.where((num_acc == k)[:, None], p[:, k], dist)
    else:
        num_acc = torch.zeros(b, dtype=torch.int64, device=p.device)
        dist = p[:, 0]
    last = torch.multinomial(dist, 1, generator=generator).squeeze(-1)
    tokens = torch.cat([draft, torch.zeros_like(draft[:, :1])], dim=1)
    tokens[rows, num_acc] = last
    return tokens, num_acc


def one_hot_probs(draft: list[int], vocab: int, dtype: torch.dtype = torch.float32,
                  device: torch.device | str = "cpu") -> torch.Tensor:
    """q of a deterministic proposal: ``[len(draft), vocab]`` one-hot rows."""
    q = torch.zeros(len(draft), vocab, dtype=dtype, device=device)
    if draft:
        q[torch.arange(len(draft), device=device), torch.tensor(draft, device=device)] = 1.0
    return q


def greedy_verify(target: list[int], draft: list[int]) -> list[int]:
    """Greedy verification: ``target`` holds the argmax at each of the k+1 positions. The drafts are kept while
    they equal it; the first mismatch (or the bonus position) emits the target's argmax — token-identical to
    plain greedy decoding."""
    out: list[int] = []
    for j, d in enumerate(draft):
        if target[j] != d:
            break
        out.append(d)
    out.append(target[len(out)])
    return out
