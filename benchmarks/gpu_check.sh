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
