#!/usr/bin/env bash
# Issue 16's closed loop at c = 1 / 8 / 16, ISL 512, OSL 64, with the serving layer's ingest measured (twelfth
# session; docs/fidelity.md). Usage, from the repository root, on a quiet machine:
#
#     OUT=/some/dir bash benchmarks/ingest_check.sh [--probe]
#
# --probe (or no probed chip yet in $JALAPENO_CACHE/hardware, default ~/.cache/jalapeno/hardware): first
# `jalapeno hardware probe` and `jalapeno calibrate --probe` (about 3.5 min quiet). Then `sim_vs_engine.py` serves
# SmolLM2-135M with `serve --step-trace` (steps and one record per request: handler start, tokenised, handed to the
# engine thread, in its waiting queue) and benches each point with `--compare-sim` (before: the first wave released
# as the client sent it); it then prints the ingest by position in a wave, the front-end latency measured from the
# records (send -> engine thread; written into $OUT/local_front_end.yaml as efficiency.request_overhead_ms, a
# measured Fact), and each point simulated again with its first wave released as the served engine admitted it on
# that chip (after), with median / worst |error| before and after. About 4 min quiet (3 prompts per slot).
set -eo pipefail
OUT=${OUT:-ingest-check-out}
mkdir -p "$OUT/trace"
CHIP="${JALAPENO_CACHE:-$HOME/.cache/jalapeno}/hardware/local.yaml"
uptime | tee "$OUT/uptime.txt"
if [ "$1" = "--probe" ] || [ ! -f "$CHIP" ]; then
    jalapeno hardware probe --device cpu 2>&1 | tee "$OUT/probe.txt"
    jalapeno calibrate --probe "$CHIP" 2>&1 | tee "$OUT/calibrate.txt"
fi
cp "$CHIP" "$OUT/local.yaml"
python benchmarks/sim_vs_engine.py --concurrency 1,8,16 --isl 512 --osl 64 --step-trace "$OUT/trace" \
    --out "$OUT/sim_vs_engine.json" --write-chip "$OUT/local_front_end.yaml" 2>&1 | tee "$OUT/sim_vs_engine.txt"
python benchmarks/sim_vs_engine.py --price-steps "$OUT/trace/served.jsonl" --isl 512 --osl 64 \
    --hardware "$OUT/local.yaml" 2>&1 | tee "$OUT/price_steps.txt"
uptime | tee -a "$OUT/uptime.txt"
