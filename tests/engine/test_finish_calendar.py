"""The lockstep group's finish calendar (members by finishing step) against a plain sorted recount."""

import random

from jalapeno.engine.lockstep import _FinishCalendar
from jalapeno.engine.sequence import Sequence


def test_finish_calendar_equals_a_sorted_recount_after_random_operations():
    """Members join with a finishing step, some leave early (preempted: their entries go stale), and the
    clock advances by random jumps: what the calendar hands back at each advance, and the earliest step a
    member still in the group finishes at, equal a recount that sorts every live entry by (step, join order)."""
    rng = random.Random(3)
    cal = _FinishCalendar()
    finish: dict[Sequence, int] = {}  # the group's member -> finishing step
    joined: list[tuple[int, int, Sequence]] = []  # every entry: (step, join number, member)
    now = 0
    for jn in range(3000):
        if rng.random() < 0.6:  # a join, finishing 1..400 steps from now
            seq = Sequence(prompt_len=8)
            end = now + rng.randint(1, 400)
            finish[seq] = end
            joined.append((end, jn, seq))
            cal.add(end, seq)
        elif finish and rng.random() < 0.3:  # a member leaves before its step (its entry is stale)
            seq = rng.choice(list(finish))
            del finish[seq]
        else:  # the clock advances, at most to the earliest live finish
            if finish:
                first = cal.first(finish)
                assert first == min(finish.values())
                now = rng.randint(now, first)
            got = [(e, s) for e, seqs in cal.take_until(now) for s in seqs if finish.get(s) == e]
            want = [(e, s) for e, _, s in sorted(joined, key=lambda x: x[:2]) if e <= now and finish.get(s) == e]
            joined = [x for x in joined if x[0] > now]
            assert got == want
            for _, s in got:
                del finish[s]
    assert sorted(finish.values()) == sorted(e for e, _, s in joined if finish.get(s) == e)
