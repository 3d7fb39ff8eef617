"""The Triton paged decode kernel, run by Triton's interpreter on CPU (no GPU in CI), against the PyTorch
reference path (itself checked against float64 numpy in test_attention.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")


def test_triton_paged_decode_matches_reference_in_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    script = Path(__file__).with_name("_triton_check.py")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("max abs err") == 5


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")
@pytest.mark.parametrize("cap", [90, 100])
@pytest.mark.parametrize(
    "case",
    [
        # (dtype, head_dim, v_dim, group, block_size, sinks): Llama-3 70B bf16, GPT-OSS (sinks, 64-dim heads),
        # DeepSeek-V3 MLA latent cache (576-dim keys whose first 512 dims are the values), fp32 test shapes
        ("bf16", 128, 128, 8, 16, False),
        ("bf16", 64, 64, 8, 16, True),
        ("bf16", 576, 512, 128, 16, False),
        ("fp32", 16, 16, 2, 4, False),
    ],
    ids=["llama-bf16", "gpt-oss-sinks", "mla-latent", "fp32-tiny"],
)
def test_paged_decode_kernel_compiles_for_hopper_and_blackwell(cap, case):
    """Ahead-of-time compile (Triton -> PTX -> ptxas cubin, no GPU needed) of the paged decode kernel with the
    constexprs ``paged_decode`` passes for each model family: catches lowering errors (layouts, shapes, dtype
    casts) that the interpreter run above cannot."""
    import importlib.util

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from jalapeno.kernels import paged_attention

    spec = importlib.util.find_spec("triton.backends.nvidia")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("triton's NVIDIA backend is not installed")
    dtype, d, dv, group, block, sinks = case
    ptr = f"*{dtype}"
    sig = {
        "q_ptr": ptr, "k_ptr": ptr, "v_ptr": ptr, "out_ptr": ptr, "tables_ptr": "*i32", "ctx_ptr": "*i64",
        "sinks_ptr": "*fp32" if sinks else ptr, "scale": "fp32", "window": "i32",
    }
    sig |= dict.fromkeys(
        ["s_qb", "s_qh", "s_kn", "s_kt", "s_kh", "s_vn", "s_vt", "s_vh", "s_ob", "s_oh", "s_tb"], "i32"
    )
    const = dict(
        GROUP=group, HEAD_DIM=d, V_DIM=dv, BLOCK_D=triton.next_power_of_2(d), BLOCK_DV=triton.next_power_of_2(dv),
        BLOCK_SIZE=block, HAS_SINKS=sinks,
    )
    sig |= dict.fromkeys(const, "constexpr")
    src = ASTSource(paged_attention._paged_decode_kernel, sig, constexprs=const)
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", cap, 32), options={"num_warps": 4})
    except RuntimeError as exc:  # no ptxas for this target in this triton build
        if "ptxas" in str(exc).lower():
            pytest.skip(f"ptxas unavailable: {exc}")
        raise
    assert compiled.asm.get("cubin"), "no cubin produced"
