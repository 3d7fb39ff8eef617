"""The Triton kernels, run by Triton's CPU interpreter, match the PyTorch path and a float64 reference.

TRITON_INTERPRET must be set before triton is first imported, so the checks run in a fresh interpreter
process (this pytest process may already have imported triton for something else).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")

SCRIPT = textwrap.dedent(
    """
    import os, sys
    assert os.environ["TRITON_INTERPRET"] == "1" and "triton" not in sys.modules
    import numpy as np, torch
    from jalapeno.quant import quantize_fp8_block, fp8_block_matmul, dequantize_fp8_block
    from jalapeno.quant import quantize_mxfp4, mxfp4_matmul, dequantize_mxfp4
    from jalapeno.kernels.fp8_matmul import fp8_block_matmul_triton
    from jalapeno.kernels.mxfp4_matmul import mxfp4_matmul_triton

    def check(name, got, torch_y, x, w, bias):
        x64, w64 = x.double(), w.double()
        want = x64 @ w64.T + bias.double()
        mag = x64.abs() @ w64.abs().T + bias.double().abs()
        out = 2.0**-8 if x.dtype == torch.bfloat16 else 2.0**-23
        tol = 1e-5 * mag + out * want.abs()
        assert got.dtype == x.dtype and got.shape == want.shape, name
        assert torch.isfinite(got).all(), name
        assert ((got.double() - want).abs() <= tol).all(), (name, float((got.double() - want).abs().max()))
        # Triton vs PyTorch path: same math, fp32 accumulation in a different order
        assert ((got.double() - torch_y.double()).abs() <= 2 * tol).all(), name
        print("ok", name, float((got.double() - torch_y.double()).abs().max()))

    torch.manual_seed(0)
    fp8_cases = [  # (M, N, K, block, dtype, split_k)
        (1, 200, 300, (128, 128), torch.float32, None),
        (3, 200, 300, (128, 128), torch.bfloat16, 2),
        (33, 96, 256, (128, 128), torch.bfloat16, None),
        (5, 70, 96, (64, 32), torch.float32, 3),
    ]
    for m, n, k, block, dt, split in fp8_cases:
        q, s = quantize_fp8_block(torch.randn(n, k) * 0.05, block)
        x, bias = torch.randn(m, k).to(dt), torch.randn(n)
        w = dequantize_fp8_block(q, s, block)
        ref = fp8_block_matmul(x, q, s, block, bias=bias, backend="torch")
        got = fp8_block_matmul(x, q, s, block, bias=bias, backend="triton")
        check(f"fp8 {m}x{n}x{k} {block} {dt}", got, ref, x, w, bias)
        got = fp8_block_matmul_triton(x, q, s, block, bias=bias, split_k=split)
        check(f"fp8 {m}x{n}x{k} {block} {dt} split={split}", got, ref, x, w, bias)

    mx_cases = [(1, 72, 160, torch.float32, None), (4, 100, 256, torch.bfloat16, 2), (17, 64, 192, torch.float32, 3)]
    for m, n, k, dt, split in mx_cases:
        p, s = quantize_mxfp4(torch.randn(n, k) * 0.05)
        x, bias = torch.randn(m, k).to(dt), torch.randn(n)
        w = dequantize_mxfp4(p, s)
        ref = mxfp4_matmul(x, p, s, bias=bias, backend="torch")
        got = mxfp4_matmul(x, p, s, bias=bias, backend="triton")
        check(f"mxfp4 {m}x{n}x{k} {dt}", got, ref, x, w, bias)
        got = mxfp4_matmul_triton(x, p, s, bias=bias, split_k=split)
        check(f"mxfp4 {m}x{n}x{k} {dt} split={split}", got, ref, x, w, bias)

    # every E2M1 code and a wide E8M0 sweep through the kernel's bit-level decoders (one hot activations
    # read the weight columns back exactly)
    n, k = 16, 32
    packed = torch.arange(256, dtype=torch.uint8).reshape(16, 16)
    scales = torch.tensor([[b] for b in range(0, 256, 17)][:15] + [[252]], dtype=torch.uint8)  # finite products
    eye = torch.eye(k)
    cols = mxfp4_matmul(eye, packed, scales, backend="triton")  # [K, N] = W^T
    w = dequantize_mxfp4(packed, scales)
    assert torch.isfinite(w).all() and torch.equal(cols.T, w), "decode"
    codes = torch.arange(256, dtype=torch.int32)
    codes[(codes & 0x7F) == 0x7F] = 0  # the two NaN codes
    q = codes.to(torch.uint8).reshape(16, 16).view(torch.float8_e4m3fn)
    s = torch.tensor([[2.0**-20]])
    rows = fp8_block_matmul(torch.eye(16), q, s, (16, 16), backend="triton")
    assert torch.equal(rows.T, dequantize_fp8_block(q, s, (16, 16))), "e4m3 decode"
    print("ok decoders")
    """
)


def test_triton_interpreter_matches_torch_path() -> None:
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.count("ok ") == 15, proc.stdout


def test_triton_backend_on_cpu_without_interpreter_is_a_clear_error() -> None:
    import torch

    from jalapeno.errors import ConfigError
    from jalapeno.quant import fp8_block_matmul, quantize_fp8_block

    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("this process runs the Triton interpreter")
    q, s = quantize_fp8_block(torch.randn(16, 32))
    with pytest.raises(ConfigError, match="TRITON_INTERPRET"):
        fp8_block_matmul(torch.randn(2, 32), q, s, backend="triton")
    with pytest.raises(ConfigError, match="backend"):
        fp8_block_matmul(torch.randn(2, 32), q, s, backend="cuda")  # type: ignore[arg-type]


def _strides(*names: str) -> dict[str, str]:
    return {n: "i32" for n in names}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")
@pytest.mark.parametrize("cap", [90, 100])
def test_kernels_compile_for_hopper_and_blackwell(cap: int) -> None:
    """Ahead-of-time compile (Triton -> PTX -> ptxas cubin, no GPU needed) with the decode tiles the wrappers pick."""
    import importlib.util

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from jalapeno.kernels import fp8_matmul, mxfp4_matmul

    spec = importlib.util.find_spec("triton.backends.nvidia")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("triton's NVIDIA backend is not installed")
    common = {"M": "i32", "N": "i32", "K": "i32", "K_PER_SPLIT": "i32"}
    tail = ("stride_sn", "stride_sk", "stride_ys", "stride_ym", "stride_yn")
    bm, bn, bk, _, warps = fp8_matmul._pick_tiles(1, 2048, 7168, 128, on_gpu=True)
    const = dict(SCALE_BN=128, SCALE_BK=128, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, DOT_FP32=False)
    sig = {"x_ptr": "*bf16", "q_ptr": "*fp8e4nv", "s_ptr": "*fp32", "y_ptr": "*fp32", **common}
    sig |= _strides("stride_xm", "stride_xk", "stride_qn", "stride_qk", *tail) | dict.fromkeys(const, "constexpr")
    src = ASTSource(fp8_matmul._fp8_block_matmul_kernel, sig, constexprs=const)
    try:
        triton.compile(src, target=GPUTarget("cuda", cap, 32), options={"num_warps": warps})
    except RuntimeError as exc:  # no ptxas for this target in this triton build
        if "ptxas" in str(exc).lower():
            pytest.skip(f"ptxas unavailable: {exc}")
        raise
    bm, bn, bk, _, warps = mxfp4_matmul._pick_tiles(1, 2880, 2880, on_gpu=True)
    const = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, DOT_FP32=False)
    sig = {"x_ptr": "*bf16", "p_ptr": "*u8", "s_ptr": "*u8", "y_ptr": "*fp32", **common}
    sig |= _strides("stride_xm", "stride_xk", "stride_pn", "stride_pk", *tail) | dict.fromkeys(const, "constexpr")
    src = ASTSource(mxfp4_matmul._mxfp4_matmul_kernel, sig, constexprs=const)
    compiled = triton.compile(src, target=GPUTarget("cuda", cap, 32), options={"num_warps": warps})
    assert compiled.asm.get("cubin"), "no cubin produced"
