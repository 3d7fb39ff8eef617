"""Model runner: owns the paged KV cache and runs one forward pass over a step's sequences.

Engine-agnostic: it takes :class:`SeqSlice` objects (start, num_tokens, block table) plus the flat token ids,
so it can be driven by :class:`TorchBackend` or directly in tests.
"""

from __future__ import annotations

import torch

from jalapeno.backends.torch.attention import SeqSlice, StepMetadata
from jalapeno.backends.torch.config import ModelConfig
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
        meta = StepMetadata.build(slices, self.block_size, self.device)
        ids = torch.tensor(token_ids, dtype=torch.int64, device=self.device)
        rows = torch.tensor(logits_rows, dtype=torch.int64, device=self.device)
        return self.model(ids, meta, self.kv_cache, rows)
