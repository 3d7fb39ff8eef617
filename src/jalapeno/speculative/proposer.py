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
class KPolicy:
    """The adaptive draft length's knobs (:class:`AdaptiveK`), the engine's and the simulator's alike."""

    num_speculative_tokens: int = 3
    min_acceptance: float = 0.1
    probe_tokens: int = 8
    probe_interval: int = 32
    prior_window: int = 64


@dataclass(frozen=True)
class SpeculativeConfig:
    """How the backend speculates. ``num_speculative_tokens`` (K) is the most draft tokens per step;
    ``draft_layers``: the self-speculative draft's depth (the target's first N layers + its LM head; None: a
    quarter of the target's layers, at least 1);
    ``ngram_max``/``ngram_min``: the suffix lengths the n-gram proposer tries, longest first.
    ``min_acceptance``/``probe_tokens``/``probe_interval``: the adaptive draft length (:class:`AdaptiveK`): a
    sequence whose acceptance estimate (its own ``probe_tokens`` verified draft tokens, or fewer topped up with
    the workload's recent acceptance) is below ``min_acceptance`` decodes plainly (k = 0), probing with one draft
    every ``probe_interval`` steps;
    ``prior_window``: how many recent draft tokens (all sequences) the workload-wide acceptance prior weighs."""

    method: str = "ngram"
    num_speculative_tokens: int = 3
    #: ``draft``: path of the draft model (same vocabulary as the target; it gets its own paged KV)
    draft_model: str | None = None
    draft_layers: int | None = None
    ngram_max: int = 3
    ngram_min: int = 1
    min_acceptance: float = 0.1
    probe_tokens: int = 8
    probe_interval: int = 32
    prior_window: int = 64

    def __post_init__(self) -> None:
        if self.method not in SPECULATIVE_METHODS:
            raise ConfigError(f"unknown --speculative {self.method!r}; use one of: {', '.join(SPECULATIVE_METHODS)}")
        if (self.method == "draft") != (self.draft_model is not None):
            raise ConfigError("--speculative draft needs --draft-model PATH (and only it takes one)")
        if self.num_speculative_tokens < 1:
            raise ConfigError(f"--num-speculative-tokens must be >= 1 with --speculative (got {self.num_speculative_tokens})")
        if self.draft_layers is not None and self.draft_layers < 1:
            raise ConfigError(f"--draft-layers must be >= 1 (got {self.draft_layers})")
        if self.probe_tokens < 1 or self.probe_interval < 1 or self.prior_window < 1:
            raise ConfigError("probe_tokens, probe_interval and prior_window must be >= 1")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ConfigError(f"need 1 <= ngram_min <= ngram_max (got {self.ngram_min}, {self.ngram_max})")

    @property
    def policy(self) -> KPolicy:
        return KPolicy(self.num_speculative_tokens, self.min_acceptance, self.probe_tokens, self.probe_interval,
                       self.prior_window)


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


def acceptance_chain(num_drafts: int, accepted_per_pos: list[int]) -> list[float]:
    """a_1..a_K from the counters: a_j = accepted at position j / accepted at position j−1 (a_1: / drafts)."""
    rates, prev = [], num_drafts
    for n in accepted_per_pos:
        rates.append(n / prev if prev else 0.0)
        prev = n
    return rates


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
    #: decode steps the adaptive policy let speculate (k > 0); ``num_drafts`` of them found a draft (n-gram: a match)
    num_draft_requests: int = 0

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

    @property
    def draft_rate(self) -> float:
        """P(a proposal comes back non-empty | the policy asked for one): the simulator's n-gram hit rate."""
        return self.num_drafts / self.num_draft_requests if self.num_draft_requests else 1.0

    def per_position_rate(self) -> list[float]:
        """P(position j accepted | a draft reached position j), j = 0..K-1."""
        return [a / d if d else 0.0 for a, d in zip(self.accepted_per_pos, self.drafts_per_pos)]

    def acceptance_chain(self) -> list[float]:
        """The simulator's per-position acceptance a_1..a_K (``Speculation``): P(position j accepted | positions
        before it accepted), per verified draft. Steps that had no draft (an n-gram miss, k dropped to 0) are
        not counted: they decode plainly."""
        return acceptance_chain(self.num_drafts, self.accepted_per_pos)

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
            "num_draft_requests": self.num_draft_requests,
            "draft_rate": self.draft_rate,
        }


class AdaptiveK:
    """Per-sequence draft length, shared by the torch backend and the simulator (one policy).

    A sequence speculates K tokens unless its acceptance estimate is below ``min_acceptance``; then k = 0 (it
    decodes plainly: speculation that keeps failing only costs verify time). The estimate is the sequence's own
    acceptance once it has ``probe_tokens`` verified draft tokens; before that its own counts are topped up to
    ``probe_tokens`` pseudo-tokens at the *workload prior* — the acceptance of the last ~``prior_window`` draft
    tokens of all sequences (once it holds ``probe_tokens`` of them). Until then (cold start) only enough
    sequences speculate to fill it: a sequence gets K while the prior's tokens plus the draft tokens asked and
    not yet verified stay below ``probe_tokens``, else 0 (a batch of 8 does not verify 8 drafts to learn
    what 2 teach). A proposal that comes back empty is reported with :meth:`skip`. So on
    a no-copy workload a new sequence starts at k = 0 after the first drafts failed, instead of spending its own
    probe drafts. A sequence held at 0 still probes with one draft every ``probe_interval`` steps, so a
    copy-heavy request in a no-copy workload, or a text that turns into copying, is found. The state belongs to one
    engine: :meth:`reset` starts over (a benchmark's repeated runs must not inherit a learned prior)."""

    def __init__(self, config: KPolicy | SpeculativeConfig) -> None:
        self.config = config if isinstance(config, KPolicy) else config.policy
        self.reset()

    def reset(self) -> None:
        #: seq_id -> [proposed, accepted, steps held at k = 0 since its last draft]
        self._seen: dict[int | str, list[int]] = {}
        self._prior = [0.0, 0.0]  # decayed [proposed, accepted] of recent drafts, all sequences
        #: cold start: draft tokens asked for and not yet verified (or skipped) while the prior was too thin
        self._pending: dict[int | str, int] = {}

    def estimate(self, seq_id: int | str) -> float | None:
        """The acceptance estimate ``k_for`` compares with ``min_acceptance`` (None: too little evidence)."""
        cfg = self.config
        prop, acc, _ = self._seen.get(seq_id, (0, 0, 0))
        if prop >= cfg.probe_tokens:
            return acc / prop
        p_prop, p_acc = self._prior
        if p_prop < cfg.probe_tokens:
            return None
        return (acc + p_acc / p_prop * (cfg.probe_tokens - prop)) / cfg.probe_tokens

    def k_for(self, seq: "Sequence") -> int:
        """K or 0 for ``seq``'s next decode step (call once per step it decodes)."""
        cfg = self.config
        est = self.estimate(seq.seq_id)
        if est is None:  # cold start: only as many drafts in flight as the prior needs to learn from
            if self._prior[0] + sum(self._pending.values()) >= cfg.probe_tokens:
                return 0
            self._pending[seq.seq_id] = cfg.num_speculative_tokens
            return cfg.num_speculative_tokens
        if est >= cfg.min_acceptance:
            return cfg.num_speculative_tokens
        s = self._seen.setdefault(seq.seq_id, [0, 0, 0])
        s[2] += 1  # held at 0: probe now and then (text can turn into copying; the prior can be wrong)
        return cfg.num_speculative_tokens if s[2] > cfg.probe_interval else 0

    def skip(self, seq: "Sequence") -> None:
        """The k ``k_for`` gave was not used (an n-gram miss, or capped to 0 by ``max_tokens``)."""
        self._pending.pop(seq.seq_id, None)

    def record(self, seq: "Sequence", proposed: int, accepted: int) -> None:
        self._pending.pop(seq.seq_id, None)
        s = self._seen.setdefault(seq.seq_id, [0, 0, 0])
        s[0] += proposed
        s[1] += accepted
        s[2] = 0
        p = self._prior
        p[0] += proposed
        p[1] += accepted
        if p[0] > self.config.prior_window:  # keep ~prior_window recent tokens: older ones weigh less
            f = self.config.prior_window / p[0]
            p[0] *= f
            p[1] *= f

    def forget(self, seq: "Sequence") -> None:
        self._seen.pop(seq.seq_id, None)
        self._pending.pop(seq.seq_id, None)


@dataclass(frozen=True)
class MeasuredAcceptance:
    """What an engine run recorded for the simulator: the per-position chain a_1..a_k (per verified draft) and
    ``draft_rate``, P(a draft came back | the adaptive policy asked for one) — an n-gram miss is a plain step."""

    chain: tuple[float, ...]
    draft_rate: float = 1.0


def acceptance_from_counters(spec: dict) -> MeasuredAcceptance | None:
    """A :class:`MeasuredAcceptance` from a ``spec_decode`` dict (``generate --json``, or ``jalapeno bench``'s
    scraped counters); None when it has no acceptance chain."""
    chain = spec.get("acceptance_chain")
    if not isinstance(chain, list) or not chain:
        return None
    rate = spec.get("draft_rate", 1.0)
    return MeasuredAcceptance(tuple(float(a) for a in chain), float(rate) if isinstance(rate, (int, float)) else 1.0)


def read_acceptance_file(path: str, k: int) -> MeasuredAcceptance:
    """The acceptance a ``generate --json`` run (its ``spec_decode`` entry; a list of results: the first) or a
    ``jalapeno bench --json`` result (its ``spec_decode`` entry, from the server's /metrics) recorded, for
    ``jalapeno simulate --acceptance FILE``."""
    import json
    from pathlib import Path

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--acceptance {path}: cannot read it as JSON ({exc.__class__.__name__}); give the file "
                          "`jalapeno generate --speculative ... --json` or `jalapeno bench --json` wrote") from None
    if isinstance(data, list) and data:
        data = data[0]
    spec = data.get("spec_decode", data) if isinstance(data, dict) else None
    measured = acceptance_from_counters(spec) if isinstance(spec, dict) else None
    if measured is None:
        raise ConfigError(f"--acceptance {path}: no spec_decode.acceptance_chain in it; record it with "
                          "`jalapeno generate --speculative ... --json` or `jalapeno bench --json`")
    if len(measured.chain) != k:
        raise ConfigError(f"--acceptance {path} was recorded with {len(measured.chain)} speculative tokens; pass "
                          f"--spec-tokens {len(measured.chain)}")
    return measured
