#!/usr/bin/env bash
# Issue 16's closed loop with InferenceX's length spread (--random-range-ratio 0.8: lengths drawn in [0.8, 1] x
# ISL / OSL), on a subset of the grid: concurrency 1, 4, 8, 16, 32 x ISL 128, 512 x OSL 64 (GRID=full adds OSL 256),
# 3 prompts per slot (thirteenth session; docs/fidelity.md). Usage, from the repository root, on a quiet machine:
#
#     OUT=/some/dir bash benchmarks/grid_check.sh [--probe]
#
# --probe (or no probed chip yet in $JALAPENO_CACHE/hardware, default ~/.cache/jalapeno/hardware): first
# `jalapeno hardware probe` and `jalapeno calibrate --probe` (about 3.5 min quiet; calibrate also times the serving
# front end, so the chip as probed then carries request_overhead_ms, and the panel switch is measured at every batch
# 1-8). Then `sim_vs_engine.py` serves
# SmolLM2-135M once with `serve --step-trace` (steps and request records) and benches each point with
# `--compare-sim` on the probed chip as it is (before: its request_overhead_ms, 0 until measured); then, from the
# trace, it measures the front end's latency (send -> engine thread; written into $OUT/local_front_end.yaml) and
# simulates every point again with its first wave as the served engine admitted it and that front end (after),
# printing measured / before / admitted / + front end per point and median / worst |error| of each. Last, each point
# served and simulated lined up step for step (`--lineup`: TTFT split into front end / wait for a step / prefill,
# the prefill groups that agree, the served steps priced by kind). Estimated (the 17:50 probe): about 7 min for the
# grid (GRID=full: 26 min), + 3.5 min with --probe; a slower machine state takes up to 2x.
# The drift reference (`--drift-ref`, on unless DRIFT_REF=0; fourteenth session): before and after every point the
# served model's decode step at batch 1 and 8 and its 512-token prefill (nineteenth session) are timed in a process
# of their own (~8-13 s each) against the probe's samples of the same steps (local.samples.json, copied to $OUT),
# and every point is reported raw and drift-corrected (the chip's bandwidths and fixed times scaled by that point's
# decode reference / probe ratio, its compute by the prefill's). CONC / ISL / OSL override the grid's concurrencies / ISLs /
# OSLs (e.g. ISL=128,512,2048 OSL=256).
set -eo pipefail
OUT=${OUT:-grid-check-out}
OSL=${OSL:-64}
[ "$GRID" = "full" ] && OSL=64,256
mkdir -p "$OUT/trace"
CHIP="${JALAPENO_CACHE:-$HOME/.cache/jalapeno}/hardware/local.yaml"
uptime | tee "$OUT/uptime.txt"
if [ "$1" = "--probe" ] || [ ! -f "$CHIP" ]; then
    jalapeno hardware probe --device cpu 2>&1 | tee "$OUT/probe.txt"
    jalapeno calibrate --probe "$CHIP" 2>&1 | tee "$OUT/calibrate.txt"
fi
cp "$CHIP" "$OUT/local.yaml"
cp "${CHIP%.yaml}.samples.json" "$OUT/local.samples.json"  # the probe's every sample (a later probe overwrites it)
DRIFT=--drift-ref
[ "$DRIFT_REF" = "0" ] && DRIFT=
python benchmarks/sim_vs_engine.py --concurrency "${CONC:-1,4,8,16,32}" --isl "${ISL:-128,512}" --osl "$OSL" \
    --random-range-ratio 0.8 $DRIFT --step-trace "$OUT/trace" --out "$OUT/grid.json" \
    --write-chip "$OUT/local_front_end.yaml" 2>&1 | tee "$OUT/grid.txt"
python benchmarks/sim_vs_engine.py --resimulate "$OUT/grid.json" --lineup "$OUT/trace/served.jsonl" \
    --hardware "$OUT/local_front_end.yaml" 2>&1 | tee "$OUT/lineup.txt"
uptime | tee -a "$OUT/uptime.txt"
