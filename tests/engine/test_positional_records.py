"""The per-event records the simulator builds positionally (a dataclass's keyword call costs ≈ 1 µs more, once
per event or request): their fields must stay in the order those calls pass them, and each call must give the
record the keyword form gives."""

from __future__ import annotations

from dataclasses import fields

from jalapeno.engine.batch import ScheduledBatch, StepResult
from jalapeno.metrics import RequestOutcome


def _names(cls) -> list[str]:
    return [f.name for f in fields(cls)]


def test_scheduled_batch_fields_are_in_the_order_the_scheduler_passes_them():
    assert _names(ScheduledBatch) == ["chunks", "num_steps", "stop_at_s", "start_s", "num_decodes",
                                      "decode_start_sum", "num_grouped", "group", "loaded_tokens"]
    chunks: list = []
    assert ScheduledBatch(chunks, 3, None, 0.0, 5, 7, 4, None, 2) == ScheduledBatch(
        chunks, num_steps=3, num_decodes=5, decode_start_sum=7, loaded_tokens=2, num_grouped=4, group=None)


def test_step_result_fields_are_in_the_order_the_simulated_backend_passes_them():
    assert _names(StepResult) == ["tokens", "duration_s", "energy_j", "step_durations", "token_counts", "counts_skip"]
    assert StepResult([], 1.5, 2.5, [1.0, 0.5], [2], 3) == StepResult(
        tokens=[], duration_s=1.5, energy_j=2.5, step_durations=[1.0, 0.5], token_counts=[2], counts_skip=3)


def test_request_outcome_fields_are_in_the_order_the_client_passes_them():
    assert _names(RequestOutcome) == ["success", "prompt_tokens", "output_tokens", "ttft_s", "e2el_s", "itl_s",
                                      "itl_counts", "start_s", "error"]
    assert RequestOutcome(False, 10, 3, 0.25, 0.5, (), None, 1.0, "aborted") == RequestOutcome(
        success=False, prompt_tokens=10, output_tokens=3, ttft_s=0.25, e2el_s=0.5, start_s=1.0, error="aborted",
        itl_s=())


def test_length_only_sequence_equals_the_keyword_constructor_slot_by_slot():
    """Every slot of ``Sequence.length_only`` equals the constructor's (the id aside: each takes the next), and a
    prompt of no tokens is refused the same way."""
    import pytest

    from jalapeno.engine.sequence import SamplingParams, Sequence
    from jalapeno.errors import RequestError

    sp = SamplingParams(max_tokens=17, ignore_eos=True)
    call = object()
    a = Sequence(None, sp, prompt_len=1024, arrival_s=0.25, user_data=call)
    b = Sequence.length_only(sp, 1024, 0.25, call)
    assert type(a) is type(b) and b.seq_id == a.seq_id + 1
    for slot in getattr(Sequence, "__slots__", None) or Sequence.__mypyc_attrs__:  # compiled: no __slots__
        if slot != "seq_id":
            assert getattr(a, slot) == getattr(b, slot), slot
    assert b.block_table is not a.block_table
    for bad in (0, -3):
        with pytest.raises(RequestError, match="at least 1 token"):
            Sequence.length_only(sp, bad, 0.0)
