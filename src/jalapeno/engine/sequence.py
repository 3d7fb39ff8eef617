"""A request inside the engine: its tokens (or just their count), sampling parameters, KV blocks and times.

Lifecycle: ``WAITING`` (queued, or preempted and queued again) → ``RUNNING`` (admitted; prefilling in chunks,
then decoding) → ``FINISHED`` (reason ``length``, ``stop`` or ``abort``). Preemption by recompute sends a
running sequence back to ``WAITING`` with its KV dropped; it later prefills prompt + output so far again.

Real backends need token ids; the simulator does not, and must not materialise millions of them: a sequence
built with ``prompt_token_ids=None`` and a ``prompt_len`` is *length-only* — only counters move.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from jalapeno._mypyc import mypyc_attr  # a compile-time hint (jalapeno build-native); plain Python: a no-op
from jalapeno.errors import RequestError

if TYPE_CHECKING:  # pragma: no cover
    from jalapeno.engine.batch import SeqChunk
    from jalapeno.engine.lockstep import DecodeGroup

FinishReason = Literal["length", "stop", "abort"]


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@mypyc_attr(native_class=False)  # compiled: a plain Python class (built by the server and clients, rarely read)
@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling controls (OpenAI / vLLM meanings). ``top_k <= 0`` disables top-k; ``seed`` makes
    sampling reproducible per request; generation stops at ``max_tokens`` or at a token of
    ``stop_token_ids`` (unless ``ignore_eos``: InferenceX runs ignore EOS)."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise RequestError(f"max_tokens must be >= 1 (got {self.max_tokens})")
        if self.temperature < 0:
            raise RequestError(f"temperature must be >= 0 (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise RequestError(f"top_p must be in (0, 1] (got {self.top_p})")


_ids = itertools.count()
_new = object.__new__


class Sequence:
    """One request. ``seq_id`` is unique within the process unless given.

    Token accounting (all counts in tokens): ``num_tokens = prompt_len + num_output_tokens``;
    ``num_computed_tokens`` have their KV in cache (during decode it is ``num_tokens − 1``: the newest
    sampled token is fed next step). ``num_blocks`` counts the KV blocks held; ``block_table`` lists their
    ids when the block manager tracks ids (real backends, prefix caching).

    Times (seconds on the engine clock): ``arrival_s`` (added), ``first_token_s``, ``last_token_s``,
    ``finish_s``. Inter-token gaps are pooled by the engine (weighted samples), not stored per token.

    In a simulation, a decoding sequence may join a lockstep decode group (``group``): its counters
    (``num_output_tokens``, ``num_computed_tokens``, ``num_blocks``, ``last_token_s``) are then derived from the
    group's step counter (read-only), until the group releases it. (Pure Python: the member's class becomes
    :class:`LockstepSequence` meanwhile; see :data:`NATIVE`.)
    """

    __slots__ = (
        "seq_id",
        "prompt_token_ids",
        "output_token_ids",
        "prompt_len",
        "_out",
        "sampling",
        "status",
        "finish_reason",
        "_comp",
        "num_cached_tokens",
        "_blocks",
        "block_table",
        "arrival_s",
        "first_token_s",
        "_last",
        "finish_s",
        "num_preemptions",
        "user_data",
        "max_tokens",
        "decode_chunk",
        "group",
        "offloaded_tokens",
        "kv_key",
    )

    def __init__(
        self,
        prompt_token_ids: list[int] | None = None,
        sampling: SamplingParams | None = None,
        *,
        prompt_len: int | None = None,
        seq_id: int | str | None = None,
        arrival_s: float = 0.0,
        user_data: object = None,
    ) -> None:
        if prompt_token_ids is not None:
            prompt_token_ids = list(prompt_token_ids)
            if prompt_len is not None and prompt_len != len(prompt_token_ids):
                raise RequestError("prompt_len disagrees with the number of prompt token ids")
            prompt_len = len(prompt_token_ids)
        if prompt_len is None or prompt_len < 1:
            raise RequestError(f"a request needs a prompt of at least 1 token (got {prompt_len})")
        self.seq_id = next(_ids) if seq_id is None else seq_id
        self.prompt_token_ids = prompt_token_ids
        self.output_token_ids: list[int] | None = [] if prompt_token_ids is not None else None
        self.prompt_len = int(prompt_len)
        self._out = 0
        self.sampling = sampling or SamplingParams()
        self.max_tokens = self.sampling.max_tokens  # hot-path copy of sampling.max_tokens
        self.decode_chunk: SeqChunk | None = None  # the scheduler's reusable decode SeqChunk for this sequence
        #: the lockstep decode group whose step counter this sequence's counters follow (simulation only), else
        #: None
        self.group: DecodeGroup | None = None
        self.status = SeqStatus.WAITING
        self.finish_reason: FinishReason | None = None
        self._comp = 0
        self.num_cached_tokens = 0  # prompt tokens served from the prefix cache at admission
        self._blocks = 0
        self.block_table: list[int] = []
        self.arrival_s = arrival_s
        self.first_token_s: float | None = None
        self._last: float | None = None
        self.finish_s: float | None = None
        self.num_preemptions = 0
        #: KV tokens parked in the block manager's offload tier while preempted (brought back at readmission)
        self.offloaded_tokens = 0
        #: names the KV this sequence shares with other requests through the offload tier (a chain's calls:
        #: each call's prompt extends the previous call's prompt + output); None = none
        self.kv_key: object = None
        self.user_data = user_data

    @classmethod
    def length_only(cls, sampling: SamplingParams, prompt_len: int, arrival_s: float,
                    user_data: object = None) -> "Sequence":
        """``Sequence(None, sampling, prompt_len=prompt_len, arrival_s=arrival_s, user_data=user_data)`` (a
        length-only sequence, a new id), its slots written directly: ≈ 2× cheaper than the keyword call and the
        token-id branch; the simulated client builds one per request. The same fields (``tests/engine/
        test_positional_records.py`` compares every slot)."""
        if NATIVE:  # a native class: its constructor is the fast path (object.__new__ cannot build one)
            return Sequence(None, sampling, prompt_len=prompt_len, arrival_s=arrival_s, user_data=user_data)
        if prompt_len < 1:
            raise RequestError(f"a request needs a prompt of at least 1 token (got {prompt_len})")
        s = _new(cls)
        s.seq_id = next(_ids)
        s.prompt_token_ids = None
        s.output_token_ids = None
        s.prompt_len = int(prompt_len)
        s._out = 0
        s.sampling = sampling
        s.max_tokens = sampling.max_tokens
        s.decode_chunk = None
        s.group = None
        s.status = SeqStatus.WAITING
        s.finish_reason = None
        s._comp = 0
        s.num_cached_tokens = 0
        s._blocks = 0
        s.block_table = []
        s.arrival_s = arrival_s
        s.first_token_s = None
        s._last = None
        s.finish_s = None
        s.num_preemptions = 0
        s.offloaded_tokens = 0
        s.kv_key = None
        s.user_data = user_data
        return s

    def hand_over(self, sampling: SamplingParams, first_token_s: float) -> None:
        """Make this finished prefill-only sequence (``max_tokens`` 1, its blocks freed) the same request
        arriving at a decode engine with its KV (disaggregated serving): prompt computed, first token sampled
        at ``first_token_s``, to decode under ``sampling``; it keeps its id, arrival time and ``user_data``.
        Every other field is what a new length-only sequence has (the cluster reuses the object rather than
        build a second one per request)."""
        if self.num_blocks or self.group is not None or self.prompt_token_ids is not None:
            raise RequestError(f"sequence {self.seq_id} still holds KV, decodes or has token ids: not handed over")
        self.sampling = sampling
        self.max_tokens = sampling.max_tokens
        self.num_output_tokens = 1
        self.num_computed_tokens = self.prompt_len
        self.first_token_s = self.last_token_s = first_token_s
        self.status = SeqStatus.WAITING
        self.finish_reason = None
        self.finish_s = None
        self.num_preemptions = 0
        self.num_cached_tokens = 0
        self.offloaded_tokens = 0
        self.decode_chunk = None
        self.kv_key = None

    # ---------------------------------------------------------------------------------------------
    # the counters a lockstep decode group advances lazily: a member's (``group`` set) are its stored values
    # (offsets) plus the group's step count, read-only; anyone else's the stored values
    @property
    def num_output_tokens(self) -> int:
        g = self.group
        return self._out if g is None else self._out + g.steps

    @num_output_tokens.setter
    def num_output_tokens(self, value: int) -> None:
        if self.group is not None:
            _read_only(self)
        self._out = value

    @property
    def num_computed_tokens(self) -> int:
        g = self.group
        return self._comp if g is None else self._comp + g.steps

    @num_computed_tokens.setter
    def num_computed_tokens(self, value: int) -> None:
        if self.group is not None:
            _read_only(self)
        self._comp = value

    @property
    def num_blocks(self) -> int:
        g = self.group
        return self._blocks if g is None else -(-(self._comp + g.steps + g.ahead) // g.block_size)

    @num_blocks.setter
    def num_blocks(self, value: int) -> None:
        if self.group is not None:
            _read_only(self)
        self._blocks = value

    @property
    def last_token_s(self) -> float | None:
        g = self.group
        return self._last if g is None else g.t_last

    @last_token_s.setter
    def last_token_s(self, value: float | None) -> None:
        if self.group is not None:
            _read_only(self)
        self._last = value

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output_tokens

    @property
    def has_token_ids(self) -> bool:
        return self.prompt_token_ids is not None

    @property
    def token_ids(self) -> list[int]:
        """Prompt + output ids (real backends only)."""
        if self.prompt_token_ids is None:
            raise RequestError(f"sequence {self.seq_id} is length-only (simulated): it has no token ids")
        return self.prompt_token_ids + self.output_token_ids  # type: ignore[operator]

    @property
    def is_finished(self) -> bool:
        return self.status is SeqStatus.FINISHED

    @property
    def in_prefill(self) -> bool:
        """True until every token but the newest has its KV computed (prompt, or prompt + output after a
        preemption by recompute)."""
        return self.num_computed_tokens < self.num_tokens - 1 or self.num_output_tokens == 0

    @property
    def remaining_tokens(self) -> int:
        """Output tokens still allowed by ``max_tokens``."""
        return self.sampling.max_tokens - self.num_output_tokens

    def __repr__(self) -> str:
        return (
            f"Sequence(id={self.seq_id}, {self.status.value}, prompt={self.prompt_len}, "
            f"out={self.num_output_tokens}, computed={self.num_computed_tokens}, blocks={self.num_blocks})"
        )


def _read_only(seq: Sequence) -> None:
    raise RuntimeError(f"sequence {seq.seq_id} is in a lockstep decode group: its counters are read-only")


#: True when this module runs compiled (``jalapeno build-native``): :class:`Sequence` is then a native class whose
#: counters are the properties above (a group member is told by its ``group``)
NATIVE: Final = type(_read_only).__name__ != "function"

#: the counters a lockstep group advances, and the slots that store them
_COUNTERS = (("num_output_tokens", "_out"), ("num_computed_tokens", "_comp"), ("num_blocks", "_blocks"),
             ("last_token_s", "_last"))

#: pure Python: a property call on every counter read or write would cost ≈ 7 % of a KV-bound simulation
#: (docs/performance.md, eighteenth session), so there a sequence's counters are its plain slots (the slots'
#: own descriptors, under the counters' names) and a group member's class becomes :class:`LockstepSequence`,
#: which has the properties; compiled, every sequence has the properties (a C call and a branch), no class swap
LockstepSequence: type | None = None
if not NATIVE:
    LockstepSequence = type("LockstepSequence", (Sequence,), {
        "__slots__": (),
        "__doc__": "A group member (pure Python: the class of a member, never built): its counters follow the "
                   "group's step count.",
        "__module__": __name__,
        **{name: vars(Sequence)[name] for name, _ in _COUNTERS},
    })
    for _name, _slot in _COUNTERS:
        setattr(Sequence, _name, vars(Sequence)[_slot])


@mypyc_attr(native_class=False)  # compiled: a plain Python class (the real engine's outputs)
@dataclass
class RequestOutput:
    """What one engine step produced for one request (the server streams these).

    ``new_token_ids`` is empty for length-only sequences; ``num_new_tokens`` always counts the new tokens."""

    seq_id: int | str
    new_token_ids: list[int] = field(default_factory=list)
    num_new_tokens: int = 0
    finished: bool = False
    finish_reason: FinishReason | None = None
    num_output_tokens: int = 0
    prompt_len: int = 0
