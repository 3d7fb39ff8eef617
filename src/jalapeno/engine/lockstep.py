"""Lazily advanced decode counters: the running sequences that decode in lockstep (simulation only).

While a simulated engine's running batch only decodes, every sequence gains one token per step, its computed
count grows by one, and it takes a new KV block each time that count crosses a multiple of the block size.
Updating ~hundreds of sequences per step in Python is what made long simulations slow, so
:class:`DecodeGroup` keeps one step counter (``steps``) for all its members and stores each member's counters
as offsets from it:

* a member's ``num_output_tokens`` and ``num_computed_tokens`` are its stored values plus ``steps``
  (read-only: :class:`~jalapeno.engine.sequence.Sequence`'s properties, which test ``group``, so every reader
  sees the same values as before; in pure Python a member's class becomes
  :class:`~jalapeno.engine.sequence.LockstepSequence`, which has them, and sequences outside a group keep
  plain slots at no cost);
* ``last_token_s`` is the group's ``t_last`` (every member sampled in every step);
* ``num_blocks = ceil((num_computed_tokens + ahead) / block_size)``: members hold blocks for exactly their
  computed tokens plus the group's look-ahead ``ahead`` (tokens reserved for the steps being run);
* when the group must know *who* crosses a block boundary, members are bucketed by their stored computed count mod ``block_size``
  (their phase): those in bucket ``-steps mod block_size`` cross at the next step; block needs for ``x`` more
  tokens depend only on the phase, so they are counted per bucket (≤ ``block_size`` buckets);
* a member's finishing step is fixed when it joins (``steps + limit − out``), kept in a heap.

So a step costs O(members that finish, cross a block while blocks run short, or are preempted), not
O(members). A member leaves (:meth:`DecodeGroup.release`) when it finishes or is preempted: its counters are
then written back as plain values. The group holds a prefix of the scheduler's ``running`` list, in order
(the oldest sequences, which are the ones that finished their prefill first); the scheduler and the engine
treat the rest of the batch exactly as before. Only sequences without token ids, with a counting block
manager and one token per step (no speculative decoding) join.
"""

from __future__ import annotations

import bisect
import heapq
import itertools

from jalapeno.engine.batch import SeqChunk, lockstep_chunk
from jalapeno.engine.sequence import LockstepSequence, Sequence


class DecodeGroup:
    """Running sequences that decode one token per step together, with lazily advanced counters."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        #: decode steps the group has taken (members' counters are offsets from it)
        self.steps = 0
        #: tokens every member's KV blocks hold room for beyond its computed tokens
        self.ahead = 0
        #: time (s) of every member's newest token
        self.t_last = 0.0
        #: member → its decode chunk, oldest first (the head of the scheduler's running list)
        self.members: dict[Sequence, SeqChunk] = {}
        self._phase: list[dict[Sequence, None]] = [{} for _ in range(block_size)]
        #: members per phase (``len`` of each ``_phase`` dict): the block counts below read these
        self._pn: list[int] = [0] * block_size
        self._comp_sum = 0  # Σ members' _comp
        self._finish: dict[Sequence, int] = {}  # member → the step count at which it finishes
        self._ends = _FinishCalendar()  # members by finish step, in join order
        #: the earliest finish step of a member (what :meth:`steps_left` counts from), None until asked again
        #: after the member(s) finishing then left: asked at every event, it changes only at joins and leaves
        self._first_end: int | None = None
        #: what the last :meth:`slack_cut` walked (without other chunks): (steps + ahead then, the slack it
        #: stopped at, the members whose slack is below it) — the members' new blocks for that many tokens past
        #: whole blocks, which :meth:`blocks_for` then reads instead of walking the same phases again; forgotten
        #: when a member joins or leaves (``steps + ahead`` is checked)
        self._cut_memo: tuple[int, int, int] | None = None
        self._joins = itertools.count()
        self._window: _WindowIndex | None = None  # built by the first window_sums call
        #: where the members :meth:`advance` released last sat in the list lent to the batch (-1: unknown), in
        #: the order it returned them: their indices in the scheduler's ``running`` (whose head is the group)
        self.left_at: list[int] = []
        #: members whose last token comes before ``max_tokens`` (``max_model_len`` caps them)
        self.capped: set[Sequence] = set()
        self._jn: dict[Sequence, int] = {}  # member → its join number (the order of ``members``)
        self._list = _ChunkList()

    def __len__(self) -> int:
        return len(self.members)

    # --- membership ---------------------------------------------------------------------------------
    def join(self, seq: Sequence, limit: int) -> None:
        """Add a decoding ``seq`` that holds exactly ``ceil(computed / block_size)`` blocks and sampled at
        ``t_last``; it finishes when it has ``limit`` output tokens."""
        steps = self.steps
        out = seq.num_output_tokens
        if self.members:
            assert seq.last_token_s == self.t_last and self.ahead == 0
        else:
            self.t_last = seq.last_token_s  # type: ignore[assignment]
        comp = seq.num_computed_tokens - steps
        seq._out = out - steps
        seq._comp = comp
        seq.group = self
        if LockstepSequence is not None:  # pure Python (see engine/sequence.py)
            seq.__class__ = LockstepSequence  # type: ignore[assignment]
        self.members[seq] = ch = lockstep_chunk(seq)
        self._jn[seq] = jn = next(self._joins)
        self._list.add(ch, jn)
        p = comp % self.block_size
        self._phase[p][seq] = None
        self._pn[p] += 1
        self._cut_memo = None
        self._comp_sum += comp
        if self._window is not None:
            self._window.add(seq, comp, steps)
        if limit < seq.max_tokens:
            self.capped.add(seq)
        end = steps + limit - out
        self._finish[seq] = end
        self._ends.add(end, seq)
        first = self._first_end
        if first is not None and end < first:
            self._first_end = end

    def release(self, seq: Sequence) -> None:
        """Take ``seq`` out of the group, writing its current counters back as plain values."""
        steps, bs = self.steps, self.block_size
        offset = seq._comp
        out, comp = seq._out + steps, offset + steps  # what the member's properties read
        blocks = -(-(comp + self.ahead) // bs)
        self._list.remove(self.members.pop(seq), self._jn.pop(seq))
        p = offset % bs
        del self._phase[p][seq]
        self._pn[p] -= 1
        self._cut_memo = None
        if self._finish.pop(seq) == self._first_end:
            self._first_end = None  # (another member may finish then too: asked again when needed)
        self.capped.discard(seq)
        self._comp_sum -= offset
        if self._window is not None:
            self._window.remove(seq)
        seq.group = None
        if LockstepSequence is not None:
            seq.__class__ = Sequence
        seq._out, seq._comp, seq._blocks, seq._last = out, comp, blocks, self.t_last

    def dissolve(self) -> None:
        """Release every member (before anything outside the fast path touches the running batch)."""
        for seq in list(self.members):
            self.release(seq)

    # --- what the scheduler asks ----------------------------------------------------------------------
    def chunks(self) -> list[SeqChunk]:
        """The members' decode chunks, oldest first, as a list the caller may append to (and delete a
        preempted member's chunk from) until the group's membership next changes or this is called again."""
        return self._list.lend(self.members, self._jn)

    def chunk_deleted(self, seq: Sequence, j: int) -> None:
        """The batch deleted member ``seq``'s chunk, at index ``j`` of the list :meth:`chunks` lent it (a
        preemption, before ``seq`` is released): the group's list keeps in step instead of being rebuilt."""
        self._list.deleted(j, self._jn[seq])

    def start_sum(self) -> int:
        """Σ members' computed tokens (their decode chunks' ``start``)."""
        return self._comp_sum + len(self.members) * self.steps

    def window_sums(self, window: int, shift: int = 1) -> tuple[int, int]:
        """Over members with context ``c = computed + shift`` (``shift`` 1: this step's decode, 2: the next):
        ``(Σ min(c, window), how many have c < window)``, without visiting every member (the index of members
        still below the window is built at the first call and kept up to date as members join and leave)."""
        idx = self._window
        if idx is None or idx.window != window:
            idx = self._window = _WindowIndex(window)
            for seq in self.members:
                idx.add(seq, seq._comp, self.steps)
        return idx.sums(len(self.members), self.steps, shift)

    def window_sums_pair(self, window: int, shift: int = 1) -> tuple[int, int, int, int]:
        """:meth:`window_sums` at ``shift`` and at ``shift + 1`` (this step's decode and the next one's, for a
        multi-step batch), in one call: the same four integers as two calls."""
        idx = self._window
        if idx is None or idx.window != window:
            idx = self._window = _WindowIndex(window)
            for seq in self.members:
                idx.add(seq, seq._comp, self.steps)
        n = len(self.members)
        return idx.sums(n, self.steps, shift) + idx.sums(n, self.steps, shift + 1)

    def steps_left(self) -> int:
        """Fewest steps any member can take before it finishes (finishing at that step is allowed)."""
        first = self._first_end
        if first is None:
            first = self._first_end = self._ends.first(self._finish)
        return first - self.steps

    def crossing(self) -> dict[Sequence, None]:
        """Members whose next token starts a new KV block (``ahead == 0``), oldest first."""
        return self._phase[-self.steps % self.block_size]

    def slack_counts(self) -> list[tuple[int, int]]:
        """(free token slots in a member's last block, how many members) for every phase present."""
        bs, base = self.block_size, self.steps + self.ahead
        return [(-(p + base) % bs, n) for p, n in enumerate(self._pn) if n]

    def slack_cut(self, rem: int, extra: dict[int, int] | None = None) -> int:
        """The smallest slack ``j`` (free token slots in a member's last block) such that more than ``rem``
        members — plus ``extra[j']`` other chunks of slack ``j'`` — have a slack <= ``j``: the slacks walked in
        ascending order, stopping there (``rem`` must be below their total)."""
        bs, pn = self.block_size, self._pn
        base = self.steps + self.ahead  # slack j is phase (-j - base) mod bs
        taken = 0
        if extra:
            for j in range(bs):
                taken += pn[(-j - base) % bs] + extra.get(j, 0)
                if taken > rem:
                    return j
        else:
            for j in range(bs):
                n = pn[(-j - base) % bs]
                taken += n
                if taken > rem:
                    self._cut_memo = (base, j, taken - n)
                    return j
        raise ValueError(f"slack_cut: {rem} is not below the {taken} chunks counted")

    def blocks_for(self, extra: int, slacks: list[tuple[int, int]] | None = None) -> int:
        """New blocks the members need to hold ``extra`` more tokens each (``slacks``: :meth:`slack_counts`,
        when the caller has it).

        A member with ``sl`` free slots in its last block (0 <= sl < bs) needs ``ceil((extra - sl) / bs)``
        more blocks when ``sl < extra``, else none; with ``extra = q·bs + s`` (0 <= s < bs) that is ``q`` plus
        one when ``sl < s``, so the total is ``q·members`` plus the members whose slack is below ``s``: a sum
        over ``s`` phases, not all of them (the integers of the per-phase sum, in another order)."""
        bs = self.block_size
        total = 0
        if slacks is None:
            q, s = divmod(extra, bs)
            if extra <= 0:
                return 0
            pn = self._pn
            total = q * len(self.members)
            base = self.steps + self.ahead  # slack j is phase (-j - base) mod bs
            memo = self._cut_memo
            if memo is not None and memo[1] == s and memo[0] == base:  # slack_cut walked these phases already
                return total + memo[2]
            for j in range(s):
                total += pn[(-j - base) % bs]
            return total
        for sl, cnt in slacks:
            if sl < extra:
                total -= cnt * ((sl - extra) // bs)
        return total

    def trim(self) -> int:
        """Drop the look-ahead (blocks reserved for steps not run); returns how many blocks that frees.

        A member whose computed count is ``r`` past a block boundary (``r = (phase + steps) mod bs``) holds
        ``ceil((r + a) / bs) - ceil(r / bs)`` blocks for the look-ahead ``a = q·bs + s``: ``q``, plus one when
        ``r = 0 < s`` or ``r > bs - s`` — the ``s`` values ``r ∈ {0, bs-s+1, …, bs-1}``: a sum over ``s`` phases."""
        bs, a = self.block_size, self.ahead
        freed = 0
        if a:
            assert a > 0, "the look-ahead is never negative (the steps run are at most those reserved)"
            q, s = divmod(a, bs)
            pn = self._pn
            freed = q * len(self.members)
            steps = self.steps
            for j in range(s):  # r = -j mod bs, phase = (r - steps) mod bs
                freed += pn[(-j - steps) % bs]
            self.ahead = 0
        return freed

    # --- what the engine reports ---------------------------------------------------------------------
    def advance(self, steps: int, t_last: float) -> list[Sequence]:
        """Every member ran ``steps`` more steps, the last ending at ``t_last``. Releases and returns the
        members that finished (oldest first)."""
        self.steps += steps
        self.ahead -= steps
        self.t_last = t_last
        done: list[Sequence] = []
        self.left_at = left = []
        fin, now = self._finish, self.steps
        due = self._ends.queue  # anything finishing by now? (the calendar's heap head; asked once per event)
        if not (due and due[0] <= now):
            return done
        for end, seqs in self._ends.take_until(now):
            for seq in seqs:
                if fin.get(seq) == end:
                    assert end == now, "a member ran past its last token"
                    left.append(self._list.lent_index(self._jn[seq]))
                    self.release(seq)
                    done.append(seq)
        return done


class _FinishCalendar:
    """Group members by the step count at which they finish: one list per step (members in join order) and a
    heap of the distinct steps. At rack scale a heap of one entry per member (thousands of tuples) cost more
    in memory traffic than all else a finishing member needs; here the heap holds a few hundred small ints.
    Entries of members that left the group stay until their step comes (the caller checks them)."""

    def __init__(self) -> None:
        self._at: dict[int, list[Sequence]] = {}
        #: heap of the keys of ``_at`` (read-only outside: its head is the next finishing step)
        self.queue: list[int] = []

    def add(self, end: int, seq: Sequence) -> None:
        members = self._at.get(end)
        if members is None:
            self._at[end] = [seq]
            heapq.heappush(self.queue, end)
        else:
            members.append(seq)

    def take_until(self, now: int) -> list[tuple[int, list[Sequence]]]:
        """Remove and return the entries of every step <= ``now``: (step, its members in join order), by step."""
        steps, at = self.queue, self._at
        out: list[tuple[int, list[Sequence]]] = []
        while steps and steps[0] <= now:
            end = heapq.heappop(steps)
            out.append((end, at.pop(end)))
        return out

    def first(self, finish: dict[Sequence, int]) -> int:
        """The earliest step at which a member still in the group (``finish``: member → its step) finishes;
        steps whose entries all left are dropped."""
        steps, at = self.queue, self._at
        while True:
            end = steps[0]
            for seq in at[end]:
                if finish.get(seq) == end:
                    return end
            heapq.heappop(steps)
            del at[end]


class _ChunkList:
    """A group's member chunks in join order, kept as one list between steps. Copying thousands of chunks
    each step (every one touched for its reference count) was what a decode step cost at rack scale, so
    :meth:`lend` hands the list itself to the batch being built, which appends its other chunks behind the
    members' (``lent`` of them) and may delete a preempted member's. While lent the list is not written:
    a leaving member's index (found by bisection on the parallel join numbers ``order``) waits in
    ``pending``, and :meth:`reclaim` (at the next join or lend) drops the batch's tail and those members.
    A member whose chunk is not where its join number says (the batch deleted one: a preemption) drops the
    list; the next :meth:`lend` rebuilds it from the group's dicts."""

    def __init__(self) -> None:
        self.chunks: list[SeqChunk] | None = None
        self.order: list[int] = []  # join numbers, ascending, parallel to ``chunks``
        self.lent: int | None = None  # members' chunks at the head of the lent list
        self.pending: list[int] = []  # indices of members that left while lent
        self.gone = -1  # join number of the member whose chunk the borrower deleted (its remove is a no-op)

    def add(self, ch: SeqChunk, jn: int) -> None:
        self.reclaim()
        if self.chunks is not None:
            self.chunks.append(ch)
            self.order.append(jn)

    def deleted(self, j: int, jn: int) -> None:
        """The borrower deleted the lent list's chunk ``j``, the member with join number ``jn`` (its
        :meth:`remove` follows, and finds nothing left to do); anything unexpected drops the list."""
        lent, order = self.lent, self.order
        if lent is None or self.chunks is None or not 0 <= j < lent or order[j] != jn:
            self.drop()
            return
        del order[j]
        self.lent = lent - 1
        if self.pending:
            self.pending = [i - 1 if i > j else i for i in self.pending]
        self.gone = jn

    def remove(self, ch: SeqChunk, jn: int) -> None:
        if jn == self.gone:  # its chunk is already out (:meth:`deleted`)
            self.gone = -1
            return
        lst = self.chunks
        if lst is None:
            return
        i = bisect.bisect_left(self.order, jn)
        if self.lent is not None:
            if i < self.lent and i < len(lst) and lst[i] is ch and len(self.pending) < 64:
                self.pending.append(i)
            else:
                self.drop()
        elif i < len(lst) and lst[i] is ch:
            del lst[i]
            del self.order[i]
        else:
            self.drop()

    def lent_index(self, jn: int) -> int:
        """Index in the lent list of the member with join number ``jn`` (-1 when not lent, or not known)."""
        if self.lent is None or self.chunks is None:
            return -1
        i = bisect.bisect_left(self.order, jn)
        return i if i < self.lent and self.order[i] == jn else -1

    def drop(self) -> None:
        self.gone = -1
        self.chunks = None
        self.order = []
        self.pending.clear()

    def reclaim(self) -> None:
        if self.lent is None:
            return
        lst, order = self.chunks, self.order
        if lst is not None:
            del lst[self.lent :]
            if self.pending:
                for i in sorted(self.pending, reverse=True):
                    del lst[i]
                    del order[i]
                self.pending.clear()
        else:
            self.pending.clear()
        self.lent = None

    def lend(self, members: dict[Sequence, SeqChunk], jn: dict[Sequence, int]) -> list[SeqChunk]:
        self.reclaim()
        if self.chunks is None:
            self.chunks = list(members.values())
            self.order = list(jn.values())
        self.lent = len(self.chunks)
        return self.chunks


class _WindowIndex:
    """The members of a group whose decode context (stored offset ``o`` + ``steps`` + 1) is still below a
    sliding window, for :meth:`DecodeGroup.window_sums`. Contexts only grow, so a member leaves the set once
    (the largest offsets first: a max-heap) and never comes back while it stays in the group."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.below: dict[Sequence, int] = {}  # member -> its offset
        self.count: dict[int, int] = {}  # offset -> members below with it
        self.offset_sum = 0
        self._heap: list[tuple[int, int, Sequence]] = []  # (-offset, tie, member); stale entries skipped
        self._tie = itertools.count()

    def add(self, seq: Sequence, offset: int, steps: int) -> None:
        if offset + steps + 1 < self.window:
            self.below[seq] = offset
            self.count[offset] = self.count.get(offset, 0) + 1
            self.offset_sum += offset
            heapq.heappush(self._heap, (-offset, next(self._tie), seq))

    def remove(self, seq: Sequence) -> None:
        offset = self.below.pop(seq, None)
        if offset is not None:
            self.count[offset] -= 1
            self.offset_sum -= offset

    def sums(self, members: int, steps: int, shift: int) -> tuple[int, int]:
        w, below, heap = self.window, self.below, self._heap
        limit = w - steps - 1  # offsets >= limit have reached the window at shift 1
        while heap and -heap[0][0] >= limit:
            neg, _, seq = heapq.heappop(heap)
            if below.get(seq) == -neg:
                self.remove(seq)
        n = len(below)
        total = self.offset_sum + n * (steps + shift)
        for off in range(w - steps - shift, limit):  # shift > 1: those that reach the window one step later
            c = self.count.get(off, 0)
            if c:
                n -= c
                total -= c * (off + steps + shift - w)
        return total + (members - len(below)) * w, n
