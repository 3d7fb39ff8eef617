"""``efficiency.masked_prefill_attention_ns``: a prefill chunk on the CPU torch backend's PyTorch attention path (the
context gathered through the block table, SDPA under an explicit ``[chunk, context]`` mask: a later chunk of a prompt,
or any prompt beside decode rows) computes the whole rectangle at a per-pair cost the roofline does not price; fresh
prompts alone take the flash kernel and are untouched. Hand counts on SmolLM2-135M (30 layers, 9 query heads)."""

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
    ([(512, 0)], [600], 512 * 512),  # beside a decode row: the whole 512 x 512 rectangle
    ([(512, 0)] * 2, [600] * 6, 2 * 512 * 512),
    ([(1024, 1024)], [], 1024 * 2048),  # a later chunk: chunk x (prefix + chunk)
    ([(7, 2041)], [900] * 4, 7 * 2048),
    ([(512, 0), (256, 0)], [], None),  # unequal fresh prompts: the PyTorch path (mean chunk: a lower bound)
])
def test_the_rectangle_by_hand(prefill, decode, pairs):
    got = masked_prefill_pairs(S(prefill=prefill, decode_ctx=decode))
    if pairs is None:
        assert 512 * 513 / 2 + 256 * 257 / 2 < got <= 512 * 512 + 256 * 256
    else:
        assert got == pairs


def test_a_step_the_fused_kernel_takes_has_none():
    assert masked_prefill_pairs(S(prefill=[(64, 0)], decode_ctx=[600] * 3), fused_max_tokens=128) == 0.0
    assert masked_prefill_pairs(S(prefill=[(64, 0)], decode_ctx=[600] * 3), fused_max_tokens=0) == 64 * 64


@pytest.mark.parametrize("prefill, decode", [([(512, 0)], [600]), ([(1024, 1024)], []), ([(2048, 0)] * 3, [900] * 5)])
def test_the_term_adds_layers_times_heads_times_pairs(prefill, decode):
    shape = S(prefill=prefill, decode_ctx=decode)
    added = _cm(40.0).step(shape).time_s - _cm(0.0).step(shape).time_s
    assert added == pytest.approx(30 * 9 * 40e-9 * masked_prefill_pairs(shape), rel=1e-9)
    assert added > 0


def test_fresh_prompts_decode_steps_and_catalogue_chips_unchanged():
    assert get_chip("h100").efficiency.masked_prefill_attention_ns == 0.0  # catalogue chips: results identical
    for shape in (S(prefill=[(2048, 0)]), S(prefill=[(512, 0)] * 4), S(decode_ctx=[700] * 16)):
        assert _cm(40.0).step(shape).time_s == _cm(0.0).step(shape).time_s


def test_the_breakdown_carries_it():
    shape = S(prefill=[(512, 0)], decode_ctx=[600])
    bd = _cm(40.0).breakdown(shape)
    assert bd.time_s == pytest.approx(sum(o.time_s for o in bd.ops), rel=1e-9)


def test_a_negative_value_is_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        get_chip("h100").efficiency.model_validate({"masked_prefill_attention_ns": -1.0})
