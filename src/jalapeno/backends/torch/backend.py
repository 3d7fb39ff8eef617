"""``TorchBackend``: the real backend behind :mod:`jalapeno.engine.interface` — runs the model, returns tokens
and measured wall time.

The engine's block manager owns block ids (``seq.block_table``); this backend owns the KV tensors those ids
index. Each step it flattens the scheduled chunks into one token batch, runs one forward pass and samples one
token per sampling chunk. With ``max_multi_step > 1`` it runs up to K decode steps per call, feeding each
sampled token straight back (the scheduler has reserved the blocks), which saves per-step engine overhead.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from jalapeno.backends.torch.attention import SeqSlice
from jalapeno.backends.torch.linear import WEIGHT_LAYOUTS
from jalapeno.backends.torch.loader import LoadedModel, load_model
from jalapeno.backends.torch.models.layers import set_weight_layout
from jalapeno.backends.torch.runner import DecodePolicy, ModelRunner
from jalapeno.backends.torch.sampler import RowSampling, sample
from jalapeno.engine.batch import ScheduledBatch, StepResult
from jalapeno.engine.interface import Backend, SequenceFailed
from jalapeno.errors import CapacityError, ConfigError, JalapenoError, RequestError
from jalapeno.speculative.proposer import SpeculativeConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str) -> torch.device:
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ConfigError(f"unknown device {device!r}; use cpu or cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise JalapenoError("--device cuda was requested but no CUDA GPU is available; use --device cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


class TorchBackend(Backend):
    """Real execution of a Hugging Face-format model (safetensors or GGUF) on CPU or CUDA.

    ``kv_cache_gb`` bounds the KV cache on CPU (GiB); on CUDA the cache takes ``gpu_memory_fraction`` of the
    memory free after loading the weights. ``num_blocks`` forces a block count (tests). The cache is allocated
    when the engine calls :meth:`num_kv_blocks` (with its block size), and reused by later engines.
    ``speculative``: draft tokens (n-gram or self-speculative, :mod:`jalapeno.backends.torch.speculative`) fill
    the ``1 + k`` positions the scheduler reserves per decode (``EngineConfig.num_speculative_tokens`` = k) and are
    verified in the same forward pass as the other chunks, by exact rejection sampling (docs/speculative.md).
    ``quantize`` ("fp8" | "mxfp4") quantizes the float linear layers at load time (docs/quantization.md);
    block-scaled checkpoints (DeepSeek FP8, GPT-OSS MXFP4) stay quantized without it.
    ``weight_layout``: "batched" (default) stores float CPU weights row-major; steps of dense GQA models then
    run the fused C kernel (:mod:`jalapeno.backends.torch.fused_decode`, 2-3x the PyTorch ops at 1-8
    sequences, ~2x at 32-64) up to ``decode_policy``'s crossover in tokens per step
    (:class:`~jalapeno.backends.torch.runner.DecodePolicy`, default 128). "single" stores the tall ones input-major: ~25% faster one-sequence decode through
    PyTorch ops, for models the kernel does not cover, and slower batches (:mod:`jalapeno.backends.torch.linear`).
    With ``loaded=``, the shared model is re-laid out in place.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        device: str = "cpu",
        dtype: str | torch.dtype = "float32",
        kv_cache_gb: float = 1.0,
        gpu_memory_fraction: float = 0.9,
        num_blocks: int | None = None,
        max_multi_step: int = 1,
        loaded: LoadedModel | None = None,
        quantize: str | None = None,
        weight_layout: str = "batched",
        decode_policy: DecodePolicy | None = None,
        speculative: SpeculativeConfig | None = None,
    ) -> None:
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype)
        if kv_cache_gb <= 0:
            raise ConfigError(f"kv_cache_gb must be > 0 (got {kv_cache_gb})")
        if weight_layout not in WEIGHT_LAYOUTS:
            raise ConfigError(f"unknown weight_layout {weight_layout!r}; use one of: {', '.join(WEIGHT_LAYOUTS)}")
        if loaded is None:
            loaded = load_model(model, str(self.device), self.dtype, quantize, weight_layout)
        else:
            set_weight_layout(loaded.model, weight_layout)
        self.loaded = loaded
        self.model = self.loaded.model
        self.config = self.loaded.config
        self.kv_cache_gb = kv_cache_gb
        self.gpu_memory_fraction = gpu_memory_fraction
        self._forced_blocks = num_blocks
        self.max_multi_step = max(1, int(max_multi_step))
        self.decode_policy = decode_policy or DecodePolicy()
        self.runner: ModelRunner | None = None
        #: speculative decoding (drafts fill the ``1 + k`` slots the scheduler reserves per decode), or None
        self.speculator = None
        if speculative is not None:
            self.enable_speculation(speculative)

    def enable_speculation(self, config: SpeculativeConfig) -> None:
        """Speculate from now on (the engine must reserve ``config.num_speculative_tokens`` per decode)."""
        from jalapeno.backends.torch.speculative import Speculator

        self.speculator = Speculator(config, lambda: self.runner, self.config.num_layers, self.config.vocab_size,
                                     str(self.device), self.dtype)
        self.max_multi_step = 1  # every step verifies drafts: no blind multi-step decode

    def set_decode_policy(self, policy: DecodePolicy) -> None:
        """Which decode steps take the fused CPU kernel from now on (this runner and any later one)."""
        self.decode_policy = policy
        if self.runner is not None:
            self.runner.policy = policy

    # --- Backend ---------------------------------------------------------------------------------------
    def num_kv_blocks(self, block_size: int) -> int:
        """Blocks that fit the KV budget; allocates the cache for that many blocks of ``block_size`` tokens."""
        n = self._forced_blocks if self._forced_blocks is not None else self._budget_blocks(block_size)
        if n < 1:
            raise CapacityError("the KV-cache budget holds no block: raise --kv-cache-gb")
        r = self.runner
        if r is None or r.num_blocks != n or r.block_size != block_size:  # reuse the cache across engines
            self.runner = None  # free the old cache before allocating the new one
            self.runner = ModelRunner(self.model, n, block_size, self.device, self.dtype, self.decode_policy)
        return n

    def _budget_blocks(self, block_size: int) -> int:
        """Blocks the budget holds. A draft model's paged KV has as many blocks as the target's (it is indexed
        by the same block table), so the budget is split between the two caches in proportion to their bytes
        per token: each block costs the target's and the draft's share."""
        per_elem = torch.finfo(self.dtype).bits // 8
        per_token = self.config.kv_elems_per_token_layer() * self.config.num_layers
        if self.speculator is not None:
            per_token += self.speculator.draft_kv_elems_per_token
        per_block = block_size * per_token * per_elem
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            budget = free * self.gpu_memory_fraction
        else:
            budget = self.kv_cache_gb * 2**30
        return int(budget // per_block)

    def execute(self, batch: ScheduledBatch) -> StepResult:
        """One step. A failure is pinned on a sequence when it can be (:class:`SequenceFailed`): a request
        error names its sequence; any other error in a batch of several sequences re-runs each alone (one
        forward step, KV written at the same slots the retry rewrites) and blames the first that fails alone,
        so one bad request never fails the batch it shares."""
        try:
            return self._execute(batch)
        except SequenceFailed:
            raise
        except Exception as exc:
            if len(batch.chunks) > 1:
                self._blame(batch, exc)
            raise

    def _blame(self, batch: ScheduledBatch, exc: Exception) -> None:
        """Raise :class:`SequenceFailed` for the first chunk of ``batch`` that fails on its own, if any."""
        for c in batch.chunks:
            try:
                self._execute(ScheduledBatch([c]))
            except Exception as alone:  # noqa: BLE001 - this sequence fails by itself: it is the culprit
                raise SequenceFailed(c.seq.seq_id, f"{type(alone).__name__}: {alone}") from exc

    def _execute(self, batch: ScheduledBatch) -> StepResult:
        runner = self.runner
        if runner is None:  # the engine sizes the cache through num_kv_blocks(); without it slots are unknown
            raise ConfigError(
                "TorchBackend's KV cache was never sized: leave EngineConfig.num_kv_blocks unset and pass "
                "num_blocks= to TorchBackend instead"
            )
        t0 = time.perf_counter()
        chunks = batch.chunks
        max_pos = self.config.max_position_embeddings
        spec = self.speculator
        drafts = spec.drafts(chunks, max_pos) if spec is not None else {}
        slices, ids, rows, specs, sampled = [], [], [], [], []
        verify: list[tuple[int, int]] = []  # (chunk index, its first logits row) of chunks with a draft
        plain: list[int] = []  # logits rows the plain sampler draws from (one per entry of ``sampled``)
        for i, c in enumerate(chunks):
            seq = c.seq
            if not seq.has_token_ids:
                raise RequestError("the torch backend needs prompt token ids (got a length-only request)")
            n = c.num_tokens
            if n > 1 and seq.num_output_tokens and c.start == seq.num_tokens - 1:
                n = 1  # a decode with slots for draft tokens: the newest token, plus the draft if there is one
            end = c.start + n
            if end > max_pos:
                raise SequenceFailed(
                    seq.seq_id,
                    f"sequence {seq.seq_id} reaches {end} tokens, beyond the model's context of "
                    f"{max_pos}; shorten the prompt or max_tokens",
                )
            if seq.block_table and max(seq.block_table) >= runner.num_blocks:
                raise CapacityError("engine block ids exceed the backend's KV cache: let the engine size it")
            new_ids = _tokens(seq, c.start, n)
            draft = drafts.get(i)
            if draft is not None:
                verify.append((i, len(rows)))
                rows.extend(range(len(ids), len(ids) + 1 + len(draft.tokens)))
                new_ids = new_ids + draft.tokens
                n += len(draft.tokens)
            elif c.sample:
                plain.append(len(rows))
                rows.append(len(ids) + n - 1)
                specs.append(_spec(seq, seq.num_output_tokens))
                sampled.append(i)
            slices.append(SeqSlice(c.start, n, seq.block_table))
            ids.extend(new_ids)
        tokens: list[list[int]] = [[] for _ in chunks]
        if verify:  # one step: verification of every draft, plain decodes and prefill chunks together
            logits = runner.forward(slices, ids, rows)
            for i, t in zip(sampled, sample(logits[plain], specs) if plain else []):
                tokens[i].append(t)
            for i, r0 in verify:
                k = len(drafts[i].tokens)
                tokens[i] = spec.verify(chunks[i].seq, logits[r0 : r0 + k + 1], drafts[i])
            d = time.perf_counter() - t0
            return StepResult(tokens=tokens, duration_s=d, step_durations=(d,))
        durations: list[float] = []
        new: list[int] = []
        for step in range(batch.num_steps):
            if step:
                slices = [SeqSlice(s.start + s.num_tokens, 1, s.block_table) for s in slices]
                ids = new
                rows = list(range(len(slices)))
                specs = [_spec(chunks[i].seq, chunks[i].seq.num_output_tokens + step) for i in sampled]
            logits = runner.forward(slices, ids, rows)
            new = sample(logits, specs)
            for i, t in zip(sampled, new):
                tokens[i].append(t)
            t1 = time.perf_counter()
            durations.append(t1 - t0 - sum(durations))
        return StepResult(tokens=tokens, duration_s=sum(durations), step_durations=tuple(durations))

    def spec_decode_stats(self) -> dict | None:
        return self.speculator.stats.to_dict() if self.speculator is not None else None

    def free_sequence(self, seq) -> None:
        if self.speculator is not None:
            self.speculator.forget(seq)


def _tokens(seq, start: int, n: int) -> list[int]:
    """``seq.token_ids[start:start+n]`` without concatenating prompt and output."""
    prompt, out = seq.prompt_token_ids, seq.output_token_ids
    p = len(prompt)
    if start >= p:
        return out[start - p : start - p + n]
    if start + n <= p:
        return prompt[start : start + n]
    return prompt[start:] + out[: start + n - p]


def _spec(seq, index: int) -> RowSampling:
    sp = seq.sampling
    return RowSampling(sp.temperature, sp.top_p, sp.top_k, sp.seed, index)
