"""``efficiency.decode_attention_ns``: a CPU attention kernel's cost per (query head, context key, layer) of each
decode row, on top of what the roofline prices (issue 16: decode on the probed CPU slows with the context far more
than its KV bytes say). Hand counts on SmolLM2-135M (30 layers, 9 query heads)."""

from __future__ import annotations

import pytest

from jalapeno.hardware.catalog import get_chip
from jalapeno.perf.shape import StepShape
from jalapeno.sim import cost_model_for


def _decode(b: int, ctx: int, k: int = 0) -> StepShape:
    return StepShape(decode_seqs=b, decode_tokens=b * (1 + k), decode_ctx_sum=b * ctx, decode_ctx_sum_window=b * ctx,
                     decode_below_window=b)


def _cm(ns: float):
    eff = get_chip("h100").efficiency.model_copy(update={"decode_attention_ns": ns})
    return cost_model_for("smollm2-135m", "h100", precision="fp32", kv="fp32", efficiency=eff)


@pytest.mark.parametrize("b, ctx", [(1, 65), (1, 577), (8, 544), (16, 300)])
def test_the_term_adds_layers_times_heads_times_keys(b, ctx):
    base, with_term = _cm(0.0), _cm(50.0)
    added = with_term.step(_decode(b, ctx)).time_s - base.step(_decode(b, ctx)).time_s
    assert added == pytest.approx(30 * 9 * 50e-9 * b * ctx, rel=1e-9)  # 13.5 us per key of one row


def test_verification_rows_each_attend_the_context():
    """A speculative verification step feeds k + 1 query rows per sequence: each attends the context."""
    base, with_term = _cm(0.0), _cm(50.0)
    added = with_term.step(_decode(2, 400, k=3)).time_s - base.step(_decode(2, 400, k=3)).time_s
    assert added == pytest.approx(30 * 9 * 50e-9 * 2 * 400 * 4, rel=1e-9)


def test_no_term_no_change_and_prefill_untouched():
    assert get_chip("h100").efficiency.decode_attention_ns == 0.0  # catalogue chips: byte-identical results
    pre = StepShape(prefill_tokens=512, prefill_seqs=1, prefill_attn_pairs=512 * 513 / 2,
                    prefill_attn_pairs_window=512 * 513 / 2, prefill_kv_tokens=512, prefill_kv_tokens_window=512)
    assert _cm(50.0).step(pre).time_s == _cm(0.0).step(pre).time_s


def test_a_negative_value_is_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        get_chip("h100").efficiency.model_validate({"decode_attention_ns": -1.0})


def test_multi_step_decode_runs_price_the_growing_context():
    """``decode_steps`` (the simulator's closed-form decode runs) adds the term as each step's context grows: the
    same times as pricing the steps one by one."""
    import numpy as np

    from jalapeno.perf.model import advance_decode

    cm = _cm(50.0)
    sh = _decode(4, 300)
    times, _ = cm.decode_steps(sh, 5)
    one_by_one = [cm.step(advance_decode(sh, i)).time_s for i in range(5)]
    assert np.asarray(times)[:5] == pytest.approx(one_by_one, rel=1e-9)
    assert one_by_one[1] - one_by_one[0] == pytest.approx(
        _cm(0.0).step(advance_decode(sh, 1)).time_s - _cm(0.0).step(sh).time_s + 30 * 9 * 50e-9 * 4, rel=1e-6)
