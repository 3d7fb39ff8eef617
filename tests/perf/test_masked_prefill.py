"""``efficiency.masked_prefill_attention_ns``: a prefill chunk on the CPU torch backend's PyTorch attention path (the
context gathered through the block table, SDPA under an explicit ``[chunk, context]`` mask: a later chunk of a prompt)
computes the whole rectangle at a per-pair cost the roofline does not price; fresh prompts (from position 0) take the
flash kernel, alone or beside decode rows and later chunks (fourteenth session), and are untouched. Hand counts on
SmolLM2-135M (30 layers, 9 query heads)."""

from __future__ import annotations

import pytest

from jalapeno.hardware.catalog import get_chip
from jalapeno.perf.model import masked_prefill_pairs
from jalapeno.perf.shape import StepShape
from jalapeno.sim import cost_model_for

S = StepShape.from_lists


def _cm(ns: float):
    eff = get_chip("h100").efficiency.model_copy(update={"masked_prefill_attention_ns": ns})
    return cost_model_for("smollm2-135m", "h100", precision="fp32", kv="fp32", efficiency=eff)


@pytest.mark.parametrize("prefill, decode, pairs", [
    ([(512, 0)], [], 0),  # a fresh prompt alone: the flash kernel
    ([(512, 0)] * 6, [], 0),  # equal fresh prompts alone: the flash kernel, batched
    ([(512, 0)], [600], 0),  # beside a decode row: still the flash kernel on its own K/V
    ([(512, 0)] * 2, [600] * 6, 0),
    ([(512, 0), (256, 0)], [], 0),  # unequal fresh prompts: one flash group per length
    ([(2048, 0)], [2049], 0),  # the probe's former masked step
    ([(1024, 1024)], [], 1024 * 2048),  # a later chunk: chunk x (prefix + chunk)
    ([(7, 2041)], [900] * 4, 7 * 2048),
    ([(512, 0), (1024, 1024)], [600], 1024 * 2048),  # a fresh prompt beside a later chunk: only the chunk's rectangle
    ([(300, 0), (300, 0), (512, 1536)], [513] * 3, 512 * 2048),
    ([(512, 1536), (512, 512)], [], 512 * 2048 + 512 * 1024),  # two later chunks of one length: exact
])
def test_the_rectangle_by_hand(prefill, decode, pairs):
    assert masked_prefill_pairs(S(prefill=prefill, decode_ctx=decode)) == pairs


def test_unequal_fresh_prompts_beside_a_later_chunk_within_the_bounds():
    """Fresh prompts of 400 and 200 tokens beside a 100-token chunk after 900: the exact rectangle is 100 x 1000; the
    step's sums price the fresh pairs from their mean length (under-counted: 2 x 300 x 301 / 2 = 90,300 against
    80,200 + 20,100 = 100,300), so the estimate is the rectangle plus at most that 10,000-pair difference."""
    got = masked_prefill_pairs(S(prefill=[(400, 0), (200, 0), (100, 900)], decode_ctx=[700]))
    assert got == 100 * 1000 + (400 * 401 / 2 + 200 * 201 / 2 - 2 * 300 * 301 / 2)


def test_a_shape_that_does_not_count_its_fresh_chunks():
    """A hand-made shape without the fresh counts: every chunk from 0 (kv tokens = tokens) is known fresh; otherwise
    every chunk is priced as a later one (the rectangle of the mean chunk)."""
    fresh = StepShape(prefill_tokens=512, prefill_seqs=1, prefill_attn_pairs=512 * 513 / 2, prefill_kv_tokens=512,
                      decode_seqs=1, decode_tokens=1, decode_ctx_sum=600)
    assert masked_prefill_pairs(fresh) == 0.0
    both = S(prefill=[(512, 0), (512, 512)])
    uncounted = StepShape(prefill_tokens=both.prefill_tokens, prefill_seqs=2, prefill_attn_pairs=both.prefill_attn_pairs,
                          prefill_kv_tokens=both.prefill_kv_tokens)
    assert masked_prefill_pairs(uncounted) == 512 * 512 + 512 * 1024  # both rectangles
    assert masked_prefill_pairs(both) == 512 * 1024


def test_the_simulator_counts_fresh_chunks():
    """The simulator's step shapes (``SimBackend.shape_of``) carry the fresh prompts' count and tokens, so the term
    prices only the later chunk of a mixed step."""
    from jalapeno.engine.batch import ScheduledBatch, SeqChunk
    from jalapeno.engine.sequence import Sequence
    from jalapeno.sim.backend import SimBackend

    def NS(prompt_len: int, num_output_tokens: int) -> Sequence:  # a real sequence: native chunks check the type
        s = Sequence(None, prompt_len=prompt_len)
        s.num_output_tokens = num_output_tokens
        return s

    decode = SeqChunk(NS(prompt_len=512, num_output_tokens=5), 516, 1, True)
    fresh = [SeqChunk(NS(prompt_len=300, num_output_tokens=0), 0, 300, True) for _ in range(2)]
    later = SeqChunk(NS(prompt_len=2048, num_output_tokens=0), 1536, 512, False)
    shape = SimBackend(_cm(40.0)).shape_of(ScheduledBatch([decode, *fresh, later], num_decodes=1))
    assert shape == S(prefill=[(300, 0), (300, 0), (512, 1536)], decode_ctx=[517])
    assert (shape.prefill_fresh_tokens, shape.prefill_fresh_seqs) == (600, 2)
    assert masked_prefill_pairs(shape) == 512 * 2048


def test_a_step_the_fused_kernel_takes_has_none():
    assert masked_prefill_pairs(S(prefill=[(64, 64)], decode_ctx=[600] * 3), fused_max_tokens=128) == 0.0
    assert masked_prefill_pairs(S(prefill=[(64, 64)], decode_ctx=[600] * 3), fused_max_tokens=0) == 64 * 128


@pytest.mark.parametrize("prefill, decode", [([(512, 512)], [600]), ([(1024, 1024)], []),
                                             ([(2048, 0)] * 3 + [(512, 2048)], [900] * 5)])
def test_the_term_adds_layers_times_heads_times_pairs(prefill, decode):
    shape = S(prefill=prefill, decode_ctx=decode)
    added = _cm(40.0).step(shape).time_s - _cm(0.0).step(shape).time_s
    assert added == pytest.approx(30 * 9 * 40e-9 * masked_prefill_pairs(shape), rel=1e-9)
    assert added > 0


def test_fresh_prompts_decode_steps_and_catalogue_chips_unchanged():
    assert get_chip("h100").efficiency.masked_prefill_attention_ns == 0.0  # catalogue chips: results identical
    for shape in (S(prefill=[(2048, 0)]), S(prefill=[(512, 0)] * 4), S(decode_ctx=[700] * 16),
                  S(prefill=[(512, 0)] * 3, decode_ctx=[513]), S(prefill=[(2048, 0)], decode_ctx=[2049])):
        assert _cm(40.0).step(shape).time_s == _cm(0.0).step(shape).time_s


def test_the_breakdown_carries_it():
    shape = S(prefill=[(512, 512)], decode_ctx=[600])
    bd = _cm(40.0).breakdown(shape)
    assert bd.time_s == pytest.approx(sum(o.time_s for o in bd.ops), rel=1e-9)


def test_a_negative_value_is_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        get_chip("h100").efficiency.model_validate({"masked_prefill_attention_ns": -1.0})
