"""What the scheduler hands a backend (:class:`ScheduledBatch` of :class:`SeqChunk`) and what comes back
(:class:`StepResult`): the data that crosses the seam (``interface.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Sequence as Seq

if TYPE_CHECKING:  # pragma: no cover
    from jalapeno.engine.lockstep import DecodeGroup
    from jalapeno.engine.sequence import Sequence


class SeqChunk:
    """One sequence's share of a step.

    ``start`` is the position of the first token fed this step (== tokens already in the KV cache), and
    ``num_tokens`` how many are fed: a prefill chunk, or 1 for decode (1 + k with speculative decoding).
    ``sample`` is True when the step must return a new token for the sequence (decode, or the last chunk
    of its prefill).

    A lockstep group member's decode chunk (:func:`lockstep_chunk`) has ``start`` always equal to its sequence's
    computed-token count (setting it does nothing). Equality and repr are a dataclass's over (``seq``,
    ``start``, ``num_tokens``, ``sample``), as when this was a dataclass (pure Python: not hashable either).
    """

    __slots__ = ("seq", "_start", "num_tokens", "sample", "_lock")

    def __init__(self, seq: "Sequence", start: int, num_tokens: int, sample: bool) -> None:
        self.seq = seq
        self._start = start
        self.num_tokens = num_tokens
        self.sample = sample
        #: a lockstep member's chunk: ``start`` follows the sequence (compiled; pure Python: the class)
        self._lock = False

    @property
    def start(self) -> int:
        return self.seq.num_computed_tokens if self._lock else self._start

    @start.setter
    def start(self, value: int) -> None:
        if not self._lock:
            self._start = value

    @property
    def is_prefill(self) -> bool:
        return self.start < self.seq.prompt_len

    @property
    def context_len(self) -> int:
        """Tokens in the KV cache after this step."""
        return self.start + self.num_tokens

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        o: SeqChunk = other  # type: ignore[assignment]
        return (self.seq, self.start, self.num_tokens, self.sample) == (o.seq, o.start, o.num_tokens, o.sample)

    def __repr__(self) -> str:
        return (f"{type(self).__qualname__}(seq={self.seq!r}, start={self.start!r}, num_tokens={self.num_tokens!r}, "
                f"sample={self.sample!r})")


def lockstep_chunk(seq: "Sequence") -> SeqChunk:
    """A lockstep group member's decode chunk: one token, sampled, ``start`` = ``seq``'s computed tokens."""
    if LockstepChunk is not None:  # pure Python
        return LockstepChunk(seq, 0, 1, True)
    ch = SeqChunk(seq, 0, 1, True)
    ch._lock = True
    return ch


#: True when this module runs compiled (``jalapeno build-native``): :class:`SeqChunk` is then a native class whose
#: ``start`` is the property above (a member's chunk is told by ``_lock``)
NATIVE: Final = type(lockstep_chunk).__name__ != "function"

#: pure Python: ``start`` is read for every chunk of every step, so there it is the ``_start`` slot's own
#: descriptor (no property call) and a member's chunk is a :class:`LockstepChunk`, whose ``start`` is the
#: property (docs/performance.md, eighteenth session); compiled, every chunk has the property (a C call, a branch)
LockstepChunk: type | None = None
if not NATIVE:
    LockstepChunk = type("LockstepChunk", (SeqChunk,), {
        "__slots__": (),
        "__doc__": "A member's decode chunk (pure Python): ``start`` is always its sequence's computed-token "
                   "count (set is ignored).",
        "__module__": __name__,
        "start": property(lambda self: self.seq.num_computed_tokens, lambda self, value: None),
    })
    setattr(SeqChunk, "start", vars(SeqChunk)["_start"])


@dataclass(init=False)
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

    def __init__(self, chunks: list[SeqChunk], num_steps: int = 1, stop_at_s: float | None = None,
                 start_s: float = 0.0, num_decodes: int = 0, decode_start_sum: int | None = None,
                 num_grouped: int = 0, group: "DecodeGroup | None" = None, loaded_tokens: int = 0) -> None:
        # written out (a dataclass's generated constructor stays interpreted when compiled: slow)
        self.chunks = chunks
        self.num_steps = num_steps
        self.stop_at_s = stop_at_s
        self.start_s = start_s
        self.num_decodes = num_decodes
        self.decode_start_sum = decode_start_sum
        self.num_grouped = num_grouped
        self.group = group
        self.loaded_tokens = loaded_tokens

    @property
    def num_prefill_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks if c.is_prefill)

    @property
    def num_decode_seqs(self) -> int:
        return sum(1 for c in self.chunks if not c.is_prefill)


@dataclass(init=False)
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

    def __init__(self, tokens: list[list[int]], duration_s: float, energy_j: float = 0.0,
                 step_durations: Seq[float] = (), token_counts: Seq[int] | None = None, counts_skip: int = 0) -> None:
        self.tokens = tokens
        self.duration_s = duration_s
        self.energy_j = energy_j
        self.step_durations = step_durations
        self.token_counts = token_counts
        self.counts_skip = counts_skip
