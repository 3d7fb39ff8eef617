"""What the scheduler hands a backend (:class:`ScheduledBatch` of :class:`SeqChunk`) and what comes back
(:class:`StepResult`): the data that crosses the seam (``interface.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence as Seq

if TYPE_CHECKING:  # pragma: no cover
    from jalapeno.engine.lockstep import DecodeGroup
    from jalapeno.engine.sequence import Sequence


@dataclass
class SeqChunk:
    """One sequence's share of a step.

    ``start`` is the position of the first token fed this step (== tokens already in the KV cache), and
    ``num_tokens`` how many are fed: a prefill chunk, or 1 for decode (1 + k with speculative decoding).
    ``sample`` is True when the step must return a new token for the sequence (decode, or the last chunk
    of its prefill).
    """

    seq: "Sequence"
    start: int
    num_tokens: int
    sample: bool

    @property
    def is_prefill(self) -> bool:
        return self.start < self.seq.prompt_len

    @property
    def context_len(self) -> int:
        """Tokens in the KV cache after this step."""
        return self.start + self.num_tokens


@dataclass
class ScheduledBatch:
    chunks: list[SeqChunk]
    #: K > 1 asks the backend for K steps at once: this step as scheduled, then K-1 decode steps of every
    #: chunk's sequence (only when every chunk samples — decodes, and prompts whose last chunk this is —
    #: and the scheduler proved that nothing can change the batch for K steps). Real backends may refuse
    #: (see :attr:`Backend.max_multi_step`).
    num_steps: int = 1
    #: multi-step only (simulated backends): stop after the first step that ends at or after ``stop_at_s``,
    #: where step ends are ``start_s + d1``, ``+ d2``, ... summed one by one in float64 on the engine's clock
    #: (the next external arrival). ``None``: run all ``num_steps``. Report the steps run in ``step_durations``.
    stop_at_s: float | None = None
    start_s: float = 0.0
    #: ``chunks[:num_decodes]`` are the decode chunks (each feeds a sequence's newest token on) and the rest
    #: are prefill chunks: the scheduler orders them so and always sets it (0 in a hand-built batch: a backend
    #: then tells decodes from prefills by each chunk's position)
    num_decodes: int = 0
    #: when set, the sum of the decode chunks' ``start`` (the scheduler may know it without summing)
    decode_start_sum: int | None = None
    #: simulation: ``chunks[:num_grouped]`` are the decode chunks of this lockstep ``group``'s members, whose
    #: context sums it can give without a walk (:meth:`DecodeGroup.window_sums`)
    num_grouped: int = 0
    group: "DecodeGroup | None" = None
    #: KV tokens brought back from the offload tier before this step (sequences readmitted after an offload):
    #: the backend prices the transfer (:meth:`Backend.num_offload_blocks`)
    loaded_tokens: int = 0

    @property
    def num_prefill_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks if c.is_prefill)

    @property
    def num_decode_seqs(self) -> int:
        return sum(1 for c in self.chunks if not c.is_prefill)


@dataclass
class StepResult:
    """Outcome of one (or ``num_steps``) step(s).

    ``tokens[i]`` holds the tokens produced for ``batch.chunks[i]`` (empty when the chunk did not sample);
    with speculative decoding or multi-step decode a chunk can produce several. ``step_durations`` lists the
    duration of each of the ``num_steps`` steps (seconds); ``duration_s`` is their sum.
    """

    tokens: list[list[int]]
    duration_s: float
    energy_j: float = 0.0
    step_durations: Seq[float] = field(default_factory=tuple)
    #: simulated backends: how many (placeholder) tokens each chunk produced over all steps run, instead of
    #: materialising them in ``tokens`` (which may then be empty)
    token_counts: Seq[int] | None = None
    #: simulated backends: ``token_counts`` leaves out the first ``counts_skip`` chunks (at most the batch's
    #: ``num_grouped``: lockstep group members, which gain one token per step run, as the scheduler knows) and
    #: ``token_counts[j]`` is chunk ``counts_skip + j``'s: no per-member list at every event
    counts_skip: int = 0
