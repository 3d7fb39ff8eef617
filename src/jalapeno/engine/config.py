"""Engine configuration (vLLM-like names and defaults)."""

from __future__ import annotations

from dataclasses import dataclass

from jalapeno.errors import ConfigError


@dataclass(frozen=True)
class EngineConfig:
    """Scheduler limits. Token counts are tokens; ``num_kv_blocks`` overrides what the backend reports."""

    block_size: int = 16
    #: most sequences running at once (vLLM ``--max-num-seqs``)
    max_num_seqs: int = 256
    #: token budget of one step: decode tokens + prefill chunk tokens (vLLM ``--max-num-batched-tokens``)
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    #: draft tokens verified per decode step (speculative decoding); 0 = off
    num_speculative_tokens: int = 0
    #: longest sequence (prompt + output); None = unlimited
    max_model_len: int | None = None
    num_kv_blocks: int | None = None
    #: serving-stack scheduling policy (``jalapeno.perf.frameworks.SchedulingPolicy``; defaults = vLLM V1):
    #: a step that prefills runs no decodes (SGLang without ``--enable-mixed-chunk``: decode pauses)
    separate_prefill: bool = False
    #: prompt tokens in one prefill-only step (SGLang ``--max-prefill-tokens`` / ``--chunked-prefill-size``);
    #: None = ``max_num_batched_tokens``. Only with ``separate_prefill``.
    max_prefill_tokens: int | None = None
    #: new requests are received only every this many decode steps, and right after a step that prefilled
    #: (SGLang ``--scheduler-recv-interval``); 1 = every step
    recv_interval: int = 1
    #: attention-DP context balancing (TensorRT-LLM ``attention_dp_config.enable_balance``): with this many
    #: attention-DP ranks (> 1), while at least that many sequences run, waiting requests are admitted only once
    #: there are as many as ranks (one per rank) or ``balance_timeout_iters`` steps after the last admission
    #: round; 1 = off
    balance_ranks: int = 1
    #: steps a partial set of waiting requests is held (TensorRT-LLM ``attention_dp_config.timeout_iters``)
    balance_timeout_iters: int = 0

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ConfigError("block_size, max_num_seqs and max_num_batched_tokens must all be >= 1")
        if self.num_speculative_tokens < 0:
            raise ConfigError(f"num_speculative_tokens must be >= 0 (got {self.num_speculative_tokens})")
        if self.recv_interval < 1 or (self.max_prefill_tokens is not None and self.max_prefill_tokens < 1):
            raise ConfigError("recv_interval and max_prefill_tokens must be >= 1")
        if self.balance_ranks < 1 or self.balance_timeout_iters < 0:
            raise ConfigError(f"balance_ranks must be >= 1 and balance_timeout_iters >= 0 (got {self.balance_ranks}, "
                              f"{self.balance_timeout_iters})")
        per_seq = 1 + self.num_speculative_tokens
        if self.max_num_batched_tokens < self.max_num_seqs * per_seq:
            raise ConfigError(
                f"max_num_batched_tokens={self.max_num_batched_tokens} must be >= max_num_seqs × (1 + spec tokens)"
                f" = {self.max_num_seqs * per_seq} so every running sequence can decode each step"
            )
