#!/bin/bash
# Instructions executed by one `jalapeno simulate` process under a source tree (valgrind --tool=callgrind, whole
# process: imports, set-up, simulation, metrics), deterministic where CPU seconds on a shared box are not.
#   benchmarks/sim_callgrind.sh SRC LABEL <simulate flags>     e.g.
#   benchmarks/sim_callgrind.sh /tmp/before/src before --model gpt-oss-120b --hardware h200 --tp 1 --isl 1024 \
#       --osl 8192 --concurrency 1024 --kv-dtype fp8
# prints "LABEL N M" (millions of instructions); the JSON goes to $OUT/out.LABEL.json (OUT default /tmp) to cmp.
set -e
src=$1; label=$2; shift 2
out=${OUT:-/tmp}
python -m compileall -q "$src/jalapeno" >/dev/null  # both trees byte-compiled, as installed
PYTHONPATH=$src PYTHONHASHSEED=0 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$label.out" python -m jalapeno.cli simulate "$@" --json \
  > "$out/out.$label.json" 2> "$out/cg.$label.err"
grep -o "Collected : [0-9]*" "$out/cg.$label.err" | awk -v l="$label" '{printf "%s %.1f M\n", l, $3/1e6}'
