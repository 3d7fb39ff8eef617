"""The :class:`Proposer` seam, the n-gram (prompt-lookup) proposer, the per-sequence adaptive draft length and
the acceptance counters (vLLM's metric names). Pure Python: no torch."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jalapeno.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from jalapeno.engine.sequence import Sequence

#: ``--speculative`` choices (``draft`` needs ``--draft-model``)
SPECULATIVE_METHODS = ("ngram", "self", "draft")


@dataclass(frozen=True)
class SpeculativeConfig:
    """How the backend speculates. ``num_speculative_tokens`` (K) is the most draft tokens per step;
    ``draft_layers``: the self-speculative draft's depth (the target's first N layers + its LM head; None: a
    quarter of the target's layers, at least 1);
    ``ngram_max``/``ngram_min``: the suffix lengths the n-gram proposer tries, longest first.
    ``min_acceptance``: once a sequence has had ``probe_tokens`` draft tokens verified and accepted fewer than
    this fraction, its k drops to 0 (it decodes plainly from then on)."""

    method: str = "ngram"
    num_speculative_tokens: int = 3
    #: ``draft``: path of the draft model (same vocabulary as the target; it gets its own paged KV)
    draft_model: str | None = None
    draft_layers: int | None = None
    ngram_max: int = 3
    ngram_min: int = 1
    min_acceptance: float = 0.1
    probe_tokens: int = 8

    def __post_init__(self) -> None:
        if self.method not in SPECULATIVE_METHODS:
            raise ConfigError(f"unknown --speculative {self.method!r}; use one of: {', '.join(SPECULATIVE_METHODS)}")
        if (self.method == "draft") != (self.draft_model is not None):
            raise ConfigError("--speculative draft needs --draft-model PATH (and only it takes one)")
        if self.num_speculative_tokens < 1:
            raise ConfigError(f"--num-speculative-tokens must be >= 1 with --speculative (got {self.num_speculative_tokens})")
        if self.draft_layers is not None and self.draft_layers < 1:
            raise ConfigError(f"--draft-layers must be >= 1 (got {self.draft_layers})")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ConfigError(f"need 1 <= ngram_min <= ngram_max (got {self.ngram_min}, {self.ngram_max})")


def spec_config_from_options(
    method: str | None, num_tokens: int | None, draft_model: str | None = None, draft_layers: int | None = None,
    context: int | None = None,
) -> SpeculativeConfig | None:
    """The ``--speculative / --num-speculative-tokens / --draft-model / --draft-layers`` options of ``generate``
    and ``serve`` as a :class:`SpeculativeConfig` (None: no speculation); bad combinations fail in one line.
    ``context``: the model's context length (K must leave room in it)."""
    if num_tokens is not None and num_tokens < 0:
        raise ConfigError(f"--num-speculative-tokens must be >= 0 (got {num_tokens})")
    if method is None:
        if num_tokens or draft_model or draft_layers:
            raise ConfigError("--num-speculative-tokens/--draft-model/--draft-layers need --speculative ngram|self|draft")
        return None
    if method not in SPECULATIVE_METHODS:
        raise ConfigError(f"unknown --speculative {method!r}; use one of: {', '.join(SPECULATIVE_METHODS)}")
    if method == "draft" and not draft_model:
        raise ConfigError("--speculative draft needs --draft-model PATH (a smaller model with the same vocabulary)")
    if draft_model and method != "draft":
        raise ConfigError(f"--draft-model is for --speculative draft, not {method}")
    if draft_layers is not None and method != "self":
        raise ConfigError(f"--draft-layers is for --speculative self, not {method}")
    k = 3 if num_tokens is None else num_tokens
    if k == 0:
        return None
    if context is not None and k >= context - 1:
        raise ConfigError(f"--num-speculative-tokens {k} is too large for the model's context of {context} tokens")
    return SpeculativeConfig(method, num_speculative_tokens=k, draft_model=draft_model, draft_layers=draft_layers)


@dataclass
class DraftRequest:
    """Propose up to ``k`` tokens to follow ``seq``'s tokens (its newest one is fed at position ``start``)."""

    seq: "Sequence"
    start: int
    k: int


@dataclass
class Draft:
    """Proposed tokens; ``probs`` is the draft distribution q they were drawn from (``[len(tokens), V]`` torch
    tensor, filtered exactly as the target's p) or None for a deterministic proposal (q = one-hot)."""

    tokens: list[int]
    probs: Any = None


class Proposer(ABC):
    """Proposes draft tokens for a batch of decoding sequences (one call per engine step)."""

    @abstractmethod
    def propose(self, requests: list[DraftRequest]) -> list[Draft]: ...

    def forget(self, seq: "Sequence") -> None:  # noqa: B027 - optional hook
        """``seq`` finished or was preempted (its KV blocks are gone): drop any state kept for it."""


class NgramProposer(Proposer):
    """Prompt lookup (vLLM ``ngram``): find the latest earlier occurrence of the sequence's last n tokens
    (n from ``n_max`` down to ``n_min``) and propose the tokens that followed it."""

    def __init__(self, n_max: int = 3, n_min: int = 1) -> None:
        self.n_max, self.n_min = n_max, n_min

    def propose(self, requests: list[DraftRequest]) -> list[Draft]:
        return [Draft(ngram_lookup(r.seq.token_ids, r.k, self.n_max, self.n_min)) for r in requests]


def ngram_lookup(tokens: list[int], k: int, n_max: int = 3, n_min: int = 1) -> list[int]:
    """Up to ``k`` tokens that followed the latest earlier occurrence of ``tokens``' last n tokens."""
    size = len(tokens)
    if k < 1:
        return []
    for n in range(min(n_max, size - 1), n_min - 1, -1):
        suffix = tokens[size - n :]
        first = suffix[0]
        for i in range(size - n - 1, -1, -1):  # latest match first; the suffix itself excluded
            if tokens[i] == first and tokens[i : i + n] == suffix:
                return tokens[i + n : i + n + k]
    return []


@dataclass
class SpeculativeStats:
    """Acceptance counters (vLLM: ``spec_decode_num_drafts``, ``..._num_draft_tokens``,
    ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos``)."""

    num_speculative_tokens: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    #: drafts that reached each position (the denominator of the per-position acceptance rate)
    drafts_per_pos: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        k = self.num_speculative_tokens
        self.accepted_per_pos = self.accepted_per_pos or [0] * k
        self.drafts_per_pos = self.drafts_per_pos or [0] * k

    def record(self, proposed: int, accepted: int) -> None:
        if not proposed:
            return
        self.num_drafts += 1
        self.num_draft_tokens += proposed
        self.num_accepted_tokens += accepted
        for j in range(proposed):
            self.drafts_per_pos[j] += 1
        for j in range(accepted):
            self.accepted_per_pos[j] += 1

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    def per_position_rate(self) -> list[float]:
        """P(position j accepted | a draft reached position j), j = 0..K-1."""
        return [a / d if d else 0.0 for a, d in zip(self.accepted_per_pos, self.drafts_per_pos)]

    def acceptance_chain(self) -> list[float]:
        """The simulator's per-position acceptance a_1..a_K (``Speculation``): P(position j accepted | positions
        before it accepted), per verified draft. Steps that had no draft (an n-gram miss, k dropped to 0) are
        not counted: they decode plainly."""
        rates, prev = [], self.num_drafts
        for n in self.accepted_per_pos:
            rates.append(n / prev if prev else 0.0)
            prev = n
        return rates

    def to_dict(self) -> dict:
        return {
            "num_speculative_tokens": self.num_speculative_tokens,
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "num_accepted_tokens_per_pos": list(self.accepted_per_pos),
            "num_drafts_per_pos": list(self.drafts_per_pos),
            "acceptance_rate": self.acceptance_rate,
            "acceptance_per_pos": self.per_position_rate(),
            "acceptance_chain": self.acceptance_chain(),
        }


class AdaptiveK:
    """Per-sequence draft length: K until a sequence has had ``probe_tokens`` draft tokens verified with an
    acceptance below ``min_acceptance``, then 0 (speculation that keeps failing only costs verify time)."""

    def __init__(self, config: SpeculativeConfig) -> None:
        self.config = config
        self._seen: dict[int | str, list[int]] = {}  # seq_id -> [proposed, accepted]

    def k_for(self, seq: "Sequence") -> int:
        cfg = self.config
        s = self._seen.get(seq.seq_id)
        if s is not None and s[0] >= cfg.probe_tokens and s[1] < cfg.min_acceptance * s[0]:
            return 0
        return cfg.num_speculative_tokens

    def record(self, seq: "Sequence", proposed: int, accepted: int) -> None:
        s = self._seen.setdefault(seq.seq_id, [0, 0])
        s[0] += proposed
        s[1] += accepted

    def forget(self, seq: "Sequence") -> None:
        self._seen.pop(seq.seq_id, None)


def read_acceptance_file(path: str, k: int) -> tuple[float, ...]:
    """The per-position acceptance chain (a_1..a_k) a ``generate --json`` run recorded (its ``spec_decode``
    entry; a list of results: the first), for ``jalapeno simulate --acceptance FILE``."""
    import json
    from pathlib import Path

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--acceptance {path}: cannot read it as JSON ({exc.__class__.__name__}); give the file "
                          "`jalapeno generate --speculative ... --json` wrote") from None
    if isinstance(data, list) and data:
        data = data[0]
    spec = data.get("spec_decode", data) if isinstance(data, dict) else None
    chain = spec.get("acceptance_chain") if isinstance(spec, dict) else None
    if not isinstance(chain, list) or not chain:
        raise ConfigError(f"--acceptance {path}: no spec_decode.acceptance_chain in it; record it with "
                          "`jalapeno generate --speculative ... --json`")
    if len(chain) != k:
        raise ConfigError(f"--acceptance {path} was recorded with {len(chain)} speculative tokens; pass "
                          f"--spec-tokens {len(chain)}")
    return tuple(float(a) for a in chain)
