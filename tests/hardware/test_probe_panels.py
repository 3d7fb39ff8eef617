"""The fused kernel's switch from dot tiles to panel GEMMs, measured at every batch where it can fall (issue 16,
thirteenth session): measured at batches 1, 4, 8 only, the switch went to 8, and the served engine decoded batches
5-7 with dot tiles at 1.2-1.3x the panels' time (the 17:52 trace: batch 7 steps 127 ms against 93 ms at batch 8)."""

from __future__ import annotations

import jalapeno.hardware.probe as pr

#: SmolLM2-135M (random weights, 30 layers) fused decode step at 480 keys, best of 3-6 interleaved rounds, ms, on the
#: 2-core VM at load 1.45 (`benchmarks/panel_switch.py`, docs/fidelity.md): panels / dot tiles by batch
PANELS = {1: 44.3, 2: 50.6, 3: 56.3, 4: 58.1, 5: 69.9, 6: 83.8, 7: 95.2, 8: 108.0, 9: 90.4, 10: 97.1}
DOT = {1: 37.5, 2: 33.8, 3: 50.0, 4: 51.3, 5: 80.1, 6: 104.6, 7: 122.3, 8: 99.7, 9: 104.0, 10: 121.9}


def test_the_probe_times_both_gemm_kinds_at_every_small_batch() -> None:
    for b in range(1, 9):
        assert b in pr.crossover_batches(False) and b in pr.panel_batches(False)
    assert pr.crossover_batches(True) == [1, 4, 16]  # the quick probe is unchanged


def test_measured_at_every_batch_the_switch_lands_where_panels_start_to_win() -> None:
    """The 17:52 probe measured the crossover model at 1, 4, 8 (panels / dot tiles 6.93 / 5.53, 8.08 / 6.80,
    8.75 / 12.52 ms) and put the switch at 8; the served trace then had batch-7 decode steps slower than batch 8
    (median 126.9 vs 93.2 ms: dot tiles vs panels). Measured at every batch (the served model's shape, best of the
    rounds; the load rose during the batch 8 rounds, so 8 is left out here), panels win from 5."""
    probe_1752 = ({1: 6.93, 4: 8.08, 8: 8.75}, {1: 5.53, 4: 6.80, 8: 12.52})
    assert pr.choose_panel_min_rows(*probe_1752) == 8
    every = [b for b in PANELS if b != 8]
    assert pr.choose_panel_min_rows({b: PANELS[b] for b in every}, {b: DOT[b] for b in every}) == 5
    for b in (5, 6, 7):
        assert DOT[b] / PANELS[b] > 1.14  # what the coarse switch left on the table
