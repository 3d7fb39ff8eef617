"""Model runner: owns the paged KV cache, decides how each step runs, and runs it.

Engine-agnostic: it takes :class:`SeqSlice` objects (start, num_tokens, block table) plus the flat token ids,
so it can be driven by :class:`TorchBackend` or directly in tests. Like nano-vllm's ``ModelRunner.run_model``
(CUDA-graph replay or eager), :meth:`ModelRunner.run_model` picks the execution path: the fused CPU decode
kernel (:mod:`~jalapeno.backends.torch.fused_decode`, when :class:`DecodePolicy` takes the step and the model
is one the kernel implements) or the model's own ``forward``. The model knows nothing of the choice; the
runner holds the kernel's plan.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from jalapeno.backends.torch.attention import SeqSlice, StepMetadata
from jalapeno.backends.torch.fused_decode import (
    MAX_BATCH,
    PANEL_MIN_ROWS,
    DecodePlan,
    fused_decode_step,
    plan_for,
)
from jalapeno.backends.torch.linear import gemv_thread_count, gemv_threads
from jalapeno.backends.torch.models.layers import CausalLM
from jalapeno.errors import ConfigError
from jalapeno.kernels.cpu_build import KernelUnavailable
from jalapeno.models.arch import ModelArch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecodePolicy:
    """Which steps the fused CPU decode kernel may take; every other step runs the model's PyTorch forward.

    ``fused_max_batch`` is the crossover: the most tokens of a step (sequences of a decode step, or all the
    positions of a verification / prefill step) the kernel takes; 0 switches it off. ``panel_min_rows``: from
    that many tokens the kernel's GEMMs run its outer-product panel micro-kernels (compute-bound steps) instead
    of its dot-product tiles (bandwidth-bound ones). The default is the crossover measured on the 2-core AVX2 VM
    (:data:`~jalapeno.backends.torch.fused_decode.MAX_BATCH`, docs/performance.md); pass a measured one for
    another machine. Whether the model qualifies is not the policy's business (the plan checks that).
    """

    fused_max_batch: int = MAX_BATCH
    #: fewest tokens of a step that take the kernel's outer-product panel micro-kernels (compute-bound steps)
    panel_min_rows: int = PANEL_MIN_ROWS

    def __post_init__(self) -> None:
        if self.fused_max_batch < 0:
            raise ConfigError(
                f"fused_max_batch must be >= 0 (0 switches the fused kernel off), got {self.fused_max_batch}"
            )
        if self.panel_min_rows < 1:
            raise ConfigError(f"panel_min_rows must be >= 1, got {self.panel_min_rows}")

    def wants_fused(self, device: torch.device, num_tokens: int, max_q: int) -> bool:
        """A step on CPU feeding at most ``fused_max_batch`` tokens: a decode step of that many sequences, or
        one with several tokens per sequence (speculative verification, a short prefill chunk), which the kernel
        runs as one row per token."""
        return device.type == "cpu" and 0 < num_tokens <= self.fused_max_batch


#: the PyTorch path for every step (tests and benchmarks compare it with the kernel)
PYTORCH_ONLY = DecodePolicy(fused_max_batch=0)


def allocate_kv_cache(
    cfg: ModelArch, num_blocks: int, block_size: int, device: str | torch.device, dtype: torch.dtype
) -> list[tuple[torch.Tensor, ...]]:
    """Per layer: (K, V) of ``[num_blocks, block_size, kv_heads, head_dim]``, or for MLA one latent
    ``[num_blocks, block_size, 1, kv_lora_rank + qk_rope_head_dim]`` (the compressed KV and the shared rope key).
    Every layer holds every block (sliding layers too), so the elements per token and layer are
    :meth:`ModelArch.kv_elems_per_token_layer`."""
    if cfg.attention == "mla":
        shape, tensors = (num_blocks, block_size, 1, cfg.kv_lora_rank + cfg.qk_rope_head_dim), 1
    else:
        shape, tensors = (num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim), 2
    return [
        tuple(torch.zeros(shape, device=device, dtype=dtype) for _ in range(tensors)) for _ in range(cfg.num_layers)
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
        self,
        model: CausalLM,
        num_blocks: int,
        block_size: int,
        device: str | torch.device,
        dtype: torch.dtype,
        policy: DecodePolicy | None = None,
    ) -> None:
        self.model = model
        self.cfg: ModelArch = model.config
        self.device = torch.device(device)
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.kv_cache = allocate_kv_cache(self.cfg, num_blocks, block_size, self.device, dtype)
        #: which steps may take the fused kernel (replaceable at any time)
        self.policy = policy or DecodePolicy()
        self._plan: DecodePlan | None = None  # the kernel's view of model + cache, rebuilt when either moves
        self._kernel_missing = False  # no C compiler here: stop asking

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
            return self.run_model(ids, meta, rows)

    def run_model(self, input_ids: torch.Tensor, meta: StepMetadata, logits_index: torch.Tensor) -> torch.Tensor:
        """One step down the path the policy and the model allow: the fused kernel (the whole step in one C
        call) or ``model(...)``; float32 logits ``[len(logits_index), vocab]`` either way."""
        if self.policy.wants_fused(input_ids.device, input_ids.numel(), meta.max_q):
            plan = self._decode_plan()
            if plan is not None:
                x, cos, sin = self.model.embed(input_ids, meta.positions)
                threads = max(gemv_thread_count(), torch.get_num_threads())
                return fused_decode_step(plan, x, cos, sin, meta, logits_index, threads, self.policy.panel_min_rows)
        return self.model(input_ids, meta, self.kv_cache, logits_index)

    def _decode_plan(self) -> DecodePlan | None:
        """The kernel's plan for the model and cache as they are now (None: the kernel does not apply)."""
        if self._kernel_missing:
            return None
        try:
            self._plan = plan_for(self.model, self.kv_cache, self.block_size, self._plan)
        except KernelUnavailable as exc:
            log.warning("fused CPU decode kernel unavailable, using the PyTorch path: %s", exc)
            self._kernel_missing, self._plan = True, None
        return self._plan
