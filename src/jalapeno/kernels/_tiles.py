"""Tile and split-K choice shared by the weight-only Triton matmuls (FP8 block, MXFP4)."""

from __future__ import annotations


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def plan_tiles(m: int, n: int, k: int, block_k: int, on_gpu: bool) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, split_k, num_warps) for an ``[m, k] x [k, n]`` problem with a given BLOCK_K.

    Small M (decode) gets narrow tiles; on a GPU, K is split until there are ~2 programs per SM (132 SMs on
    H100/H200) without going below 4 K tiles per program.
    """
    if m <= 16:
        block_m, block_n, warps = 16, 64, 4
    elif m <= 64:
        block_m, block_n, warps = 64, 64, 4
    else:
        block_m, block_n, warps = 64, 128, 8
    split_k = 1
    if on_gpu:
        tiles = _cdiv(m, block_m) * _cdiv(n, block_n)
        k_tiles = _cdiv(k, block_k)
        while tiles * split_k < 264 and k_tiles // (split_k * 2) >= 4:
            split_k *= 2
    return block_m, block_n, block_k, split_k, warps
