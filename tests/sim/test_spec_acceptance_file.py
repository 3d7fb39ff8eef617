"""`jalapeno simulate --spec-decode ngram --acceptance FILE` reads the acceptance a `generate --json` run
recorded: the per-position chain from hand-counted acceptance counters, and the same simulation as the rates
given inline."""

import json

import pytest

from jalapeno.cli import main
from jalapeno.speculative import SpeculativeStats
from jalapeno.testing import simulate_json

SMALL = ["--model", "llama-3.1-8b", "--hardware", "h100", "--isl", "256", "--osl", "64", "--num-prompts", "24"]


run_json = simulate_json


def _stats() -> SpeculativeStats:
    st = SpeculativeStats(3)
    for proposed, accepted in [(3, 3), (3, 1), (3, 0), (2, 2), (3, 2)]:  # 5 drafts
        st.record(proposed, accepted)
    return st


def test_acceptance_chain_hand_count():
    st = _stats()
    # accepted at position 0: 4 of 5 drafts; at 1: 3 (of those 4); at 2: 1 (of those 3)
    assert st.accepted_per_pos == [4, 3, 1]
    assert st.acceptance_chain() == pytest.approx([4 / 5, 3 / 4, 1 / 3])
    assert st.num_draft_tokens == 14 and st.num_accepted_tokens == 8


def test_simulate_reads_the_generate_json(tmp_path, capsys):
    """The file's chain drives the engine's adaptive policy (tests/sim/test_spec_adaptive.py); with every ask
    drafting (draft_rate 1) and high acceptance it beats plain decoding."""
    f = tmp_path / "gen.json"
    f.write_text(json.dumps({"token_ids": [1, 2], "text": None, "spec_decode": _stats().to_dict()}))
    args = [*SMALL, "--concurrency", "4", "--spec-decode", "ngram", "--spec-tokens", "3"]
    from_file = run_json(capsys, *args, "--acceptance", str(f))
    assert from_file == run_json(capsys, *args, "--acceptance", str(f))  # seeded
    plain = run_json(capsys, *SMALL, "--concurrency", "4")
    assert from_file["median_tpot_ms"] < plain["median_tpot_ms"]


def test_acceptance_file_with_another_k_is_one_line_error(tmp_path, capsys):
    f = tmp_path / "gen.json"
    f.write_text(json.dumps({"spec_decode": _stats().to_dict()}))
    with pytest.raises(SystemExit) as e:
        main(["simulate", *SMALL, "--concurrency", "2", "--spec-decode", "ngram", "--spec-tokens", "2",
              "--acceptance", str(f), "--json"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--spec-tokens 3" in err and len(err.strip().splitlines()) == 1
