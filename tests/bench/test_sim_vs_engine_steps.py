"""``benchmarks/sim_vs_engine.py --price-steps``: every step of an equal-length served trace rebuilt (prefill chunks
with their cached prefix, decode contexts) and priced by the path the engine takes (issue 16, eleventh session);
``--hardware`` as a chip YAML's path; bad input one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "sim_vs_engine.py"
TRACE = ROOT / "benchmarks" / "data" / "sim_vs_engine_trace_quiet_1113_c1-8-16.jsonl"
CHIP = ROOT / "benchmarks" / "data" / "local_probe_quiet_1113.yaml"


def _step(prefill: int, seqs: int, t0: float = 0.0, dt: float = 1.0):
    from jalapeno.server.step_trace import StepRecord

    return StepRecord(t0, t0 + dt, t0 + dt, False, seqs, prefill, seqs)


def test_steps_are_rebuilt_by_hand(sve) -> None:
    """ISL 4, OSL 3: one prompt alone (its first token), then two more arrive while it decodes (a mixed step: it
    decodes at 5 keys, they prefill from 0), then all three decode (6, 5, 5 keys); the first is done after its third
    token; the other two decode once more at 6 keys. A chunked prompt: 6 tokens of ISL 4 prompts = one whole, half of
    the next, whose second half (after 2 cached) comes with the decode row of the first."""
    steps = [_step(4, 1), _step(8, 3), _step(0, 3), _step(0, 2)]
    assert sve.step_shapes(steps, 4, 3) == [([(4, 0)], []), ([(4, 0), (4, 0)], [5]), ([], [6, 5, 5]), ([], [6, 6])]
    assert sve.step_shapes([_step(6, 1), _step(2, 2)], 4, 3) == [([(4, 0), (2, 0)], []), ([(2, 2)], [5])]
    kinds = [sve.step_kind(p, d) for p, d in sve.step_shapes(steps, 4, 3)]
    assert kinds == ["fresh 1x4", "mixed 8 prefill + 1 decode", "decode b=3", "decode b=2"]
    with pytest.raises(Exception, match="is it ISL 4 / OSL 3 throughout"):
        sve.step_shapes([_step(4, 1), _step(0, 2)], 4, 3)


def test_the_recorded_quiet_trace_is_priced_by_kind(sve) -> None:
    """The lead's 11:13 trace (c = 1 / 8 / 16, ISL 512, OSL 64, 838 steps) rebuilds without a mismatch, every step
    is priced once, and the kinds are the ones the engine ran: fresh prompts alone, mixed steps, decode by batch."""
    rows = sve.price_steps(TRACE, 512, 64, str(CHIP))
    assert sum(r["steps"] for r in rows) == 838
    kinds = {r["kind"] for r in rows}
    assert {"fresh 1x512", "fresh 6x512", "mixed 1024 prefill + 6 decode", "mixed 5632 prefill + 5 decode",
            "decode b=16 @513-768 keys"} <= kinds
    assert all(r["priced_s"] > 0 and r["measured_s"] > 0 for r in rows)


@pytest.mark.parametrize("args, says", [
    (["--price-steps", "missing.jsonl", "--isl", "512", "--osl", "64"], "no such file"),
    (["--price-steps", str(TRACE), "--isl", "512,128", "--osl", "64"], "one --isl and one --osl"),
    (["--price-steps", str(TRACE), "--isl", "512", "--osl", "65", "--hardware", str(CHIP)],
     "is it ISL 512 / OSL 65 throughout"),  # a committed chip: a fresh machine has no probed one
    (["--resimulate", str(ROOT / "benchmarks" / "data" / "sim_vs_engine_grid_quiet_2026-12-02.jsonl"), "--hardware",
      "nowhere.yaml"], "no such chip file"),
])
def test_bad_input_is_one_line(args: list[str], says: str) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and says in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_hardware_takes_a_chip_yaml(sve) -> None:
    """``--hardware PATH.yaml`` loads and validates the recorded probe (the 11:13 chip); a name passes through."""
    from jalapeno.hardware.schema import ChipSpec

    chip = sve.chip_arg(str(CHIP))
    assert isinstance(chip, ChipSpec) and chip.key == "local" and chip.efficiency.decode_attention_ns == 17.29
    assert sve.chip_arg("h100") == "h100"
