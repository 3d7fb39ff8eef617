"""Model runner: owns the paged KV cache and runs one forward pass over a step's sequences.

Engine-agnostic: it takes :class:`SeqSlice` objects (start, num_tokens, block table) plus the flat token ids,
so it can be driven by :class:`TorchBackend` or directly in tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from jalapeno.backends.torch.attention import SeqSlice, StepMetadata
from jalapeno.backends.torch.config import ModelConfig
from jalapeno.backends.torch.linear import gemv_threads
from jalapeno.backends.torch.models.common import CausalLM


def allocate_kv_cache(
    cfg: ModelConfig, num_blocks: int, block_size: int, device: str | torch.device, dtype: torch.dtype
) -> list[tuple[torch.Tensor, ...]]:
    """Per layer: (K, V) of ``[num_blocks, block_size, kv_heads, head_dim]``, or (latent,) for MLA."""
    shape = (num_blocks, block_size, cfg.kv_cache_heads, cfg.kv_cache_head_dim)
    return [
        tuple(torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.kv_cache_tensors))
        for _ in range(cfg.num_hidden_layers)
    ]


#: CPU steps feeding at most this many tokens run on one intra-op thread (see :func:`cpu_threads`)
SERIAL_MAX_TOKENS = 1


@contextmanager
def cpu_threads(n: int) -> Iterator[None]:
    """Run the block with at most ``n`` intra-op threads, restoring the previous count afterwards.

    A one-token decode step is a chain of single-row GEMVs (MKL runs those on one thread anyway) and ~20 tiny
    ops per layer; fanning those tiny ops out to a second thread costs a wake-up each, which on a busy 2-core
    machine took longer than the op itself (SDPA over 50 keys: 155 us on 2 threads, 20 us on 1).
    """
    old = torch.get_num_threads()
    if n >= old:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


class ModelRunner:
    def __init__(
        self, model: CausalLM, num_blocks: int, block_size: int, device: str | torch.device, dtype: torch.dtype
    ) -> None:
        self.model = model
        self.cfg: ModelConfig = model.config
        self.device = torch.device(device)
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.kv_cache = allocate_kv_cache(self.cfg, num_blocks, block_size, self.device, dtype)

    @torch.inference_mode()
    def forward(self, slices: list[SeqSlice], token_ids: list[int], logits_rows: list[int]) -> torch.Tensor:
        """Feed ``token_ids`` (the slices' new tokens, concatenated) and return float32 logits for the
        flat token rows ``logits_rows`` (``[len(logits_rows), vocab]``)."""
        serial = self.device.type == "cpu" and len(token_ids) <= SERIAL_MAX_TOKENS
        threads = torch.get_num_threads()
        with cpu_threads(1 if serial else threads), gemv_threads(threads if serial else 1):
            meta = StepMetadata.build(slices, self.block_size, self.device)
            ids = torch.tensor(token_ids, dtype=torch.int64, device=self.device)
            rows = torch.tensor(logits_rows, dtype=torch.int64, device=self.device)
            return self.model(ids, meta, self.kv_cache, rows)
