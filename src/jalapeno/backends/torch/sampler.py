"""Token sampling: greedy, or temperature / top-k / top-p with per-request seeded generators.

Reproducibility: a request with ``seed`` draws its ``i``-th output token from a generator seeded with
``mix(seed, i)``, so its tokens do not depend on which other requests share the batch, on chunking, or on
preemption and recompute.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: temperatures below this sample greedily (vLLM's ``_SAMPLING_EPS``): dividing logits by a tinier one
#: overflows float32 to inf, and softmax of inf is NaN
SAMPLING_EPS = 1e-5


@dataclass(frozen=True)
class RowSampling:
    """Sampling controls of one row: ``temperature`` below :data:`SAMPLING_EPS` = greedy; ``top_k`` <= 0 and
    ``top_p`` 1 = off (top-p always keeps the most likely token, however small ``top_p`` is)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    #: index of the output token being drawn (mixed into the seed)
    index: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature < SAMPLING_EPS or self.top_k == 1


def _mix(seed: int, index: int) -> int:
    """A 63-bit generator seed from (request seed, token index) (splitmix64 finaliser)."""
    z = (seed * 0x9E3779B97F4A7C15 + index + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) & 0x7FFFFFFFFFFFFFFF


def filter_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Temperature-scaled logits ``[V]`` with everything outside top-k / the top-p nucleus set to -inf."""
    x = logits / temperature
    if 0 < top_k < x.shape[-1]:
        kth = torch.topk(x, top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        # drop a token when the tokens ranked above it already reach top_p (the top token always stays)
        drop = (torch.cumsum(probs, dim=-1) - probs) >= top_p
        drop[0] = False  # explicitly: a top_p below float32's smallest value would compare as 0 >= 0
        x = x.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return x


def sample(logits: torch.Tensor, specs: list[RowSampling]) -> list[int]:
    """One token per row of ``logits [N, V]`` (float32)."""
    out = [0] * len(specs)
    greedy = [i for i, s in enumerate(specs) if s.greedy]
    if greedy:
        ids = logits[greedy].argmax(dim=-1).tolist() if len(greedy) < len(specs) else logits.argmax(-1).tolist()
        for i, t in zip(greedy, ids):
            out[i] = t
    for i, s in enumerate(specs):
        if s.greedy:
            continue
        probs = torch.softmax(filter_logits(logits[i], s.temperature, s.top_k, s.top_p), dim=-1)
        gen = None
        if s.seed is not None:
            gen = torch.Generator(device=logits.device).manual_seed(_mix(s.seed, s.index))
        out[i] = int(torch.multinomial(probs, 1, generator=gen).item())
    return out
