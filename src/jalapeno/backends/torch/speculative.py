"""Speculative decoding on the torch backend: the self-speculative proposer (the target's first N layers and its
LM head, sharing the target's paged KV cache) and :class:`Speculator`, which the backend asks for drafts before a
step and to verify them after it.

Why the self-speculative draft needs no KV of its own: its layers *are* the target's first N layers, so the
target's cache already holds their K/V for every computed token. The draft writes K/V for its N layers at the
draft positions (inside the blocks the scheduler reserved for ``1 + k`` tokens); the verification pass then
rewrites every layer at those positions, and the scheduler gives back the blocks past the accepted tokens.
"""

from __future__ import annotations

from typing import Callable

import torch

from jalapeno.backends.torch.attention import SeqSlice, StepMetadata
from jalapeno.backends.torch.linear import run_linear
from jalapeno.backends.torch.sampler import SampleSpec, _mix, filter_logits
from jalapeno.errors import ConfigError
from jalapeno.spec.proposer import AdaptiveK, Draft, DraftRequest, NgramProposer, Proposer, SpecConfig, SpecStats
from jalapeno.spec.rejection import greedy_verify, one_hot_probs, rejection_sample

#: xor'ed into a seeded request's generator seed for its draft draws (kept apart from its verification draws)
_DRAFT_SALT = 0x5EED_D4AF


def seq_spec(seq, index: int) -> SampleSpec:
    sp = seq.sampling
    return SampleSpec(sp.temperature, sp.top_p, sp.top_k, sp.seed, index)


def probs_of(logits: torch.Tensor, spec: SampleSpec) -> torch.Tensor:
    """``[n, V]`` sampling distributions of logits rows, filtered exactly as the plain sampler does."""
    return torch.stack([torch.softmax(filter_logits(row, spec.temperature, spec.top_k, spec.top_p), -1) for row in logits])


def _generator(spec: SampleSpec, device: torch.device, salt: int = 0) -> torch.Generator | None:
    if spec.seed is None:
        return None
    return torch.Generator(device=device).manual_seed(_mix(spec.seed, spec.index) ^ salt)


def partial_forward(model, input_ids: torch.Tensor, meta: StepMetadata, kv_caches, logits_index: torch.Tensor,
                    num_layers: int) -> torch.Tensor:
    """The model's forward through its first ``num_layers`` decoder layers, then its final norm and LM head."""
    x, cos, sin = model.embed(input_ids, meta.positions)
    for layer, cache in zip(model.model.layers[:num_layers], kv_caches[:num_layers]):
        x = layer(x, cos, sin, meta, cache)
    x = model.model.norm(x[logits_index])
    return run_linear(model.lm_head, x).float()


class SelfSpecProposer(Proposer):
    """Draft = the target's first ``num_layers`` layers + LM head, run k times (one token per sequence each)."""

    def __init__(self, runner: Callable[[], object], num_layers: int) -> None:
        self._runner = runner
        self.num_layers = num_layers

    @torch.inference_mode()
    def propose(self, requests: list[DraftRequest]) -> list[Draft]:
        runner = self._runner()
        dev = runner.device
        drafts = [Draft([], []) for _ in requests]
        feed = [r.seq.token_ids[r.start] for r in requests]
        for j in range(max((r.k for r in requests), default=0)):
            live = [i for i, r in enumerate(requests) if r.k > j]
            if not live:
                break
            slices = [SeqSlice(requests[i].start + j, 1, requests[i].seq.block_table) for i in live]
            meta = StepMetadata.build(slices, runner.block_size, dev)
            ids = torch.tensor([feed[i] for i in live], dtype=torch.int64, device=dev)
            rows = torch.arange(len(live), device=dev)
            logits = partial_forward(runner.model, ids, meta, runner.kv_cache, rows, self.num_layers)
            for row, i in enumerate(live):
                seq = requests[i].seq
                spec = seq_spec(seq, seq.num_output_tokens + j)
                if spec.greedy:
                    tok = int(logits[row].argmax())
                    drafts[i].probs = None
                else:
                    q = probs_of(logits[row : row + 1], spec)[0]
                    tok = int(torch.multinomial(q, 1, generator=_generator(spec, dev, _DRAFT_SALT)).item())
                    drafts[i].probs.append(q)
                drafts[i].tokens.append(tok)
                feed[i] = tok
        for d in drafts:
            d.probs = torch.stack(d.probs) if d.probs else None
        return drafts


class Speculator:
    """Per-step drafting and verification for :class:`~jalapeno.backends.torch.backend.TorchBackend`."""

    def __init__(self, config: SpecConfig, runner: Callable[[], object], num_layers: int, vocab: int) -> None:
        if config.method == "self":
            layers = config.draft_layers if config.draft_layers is not None else max(1, num_layers // 4)
            if layers >= num_layers:
                raise ConfigError(
                    f"--draft-layers {layers} must be below the model's {num_layers} layers "
                    "(the draft is the target's first N layers)"
                )
            self.proposer: Proposer = SelfSpecProposer(runner, layers)
        else:
            self.proposer = NgramProposer(config.ngram_max, config.ngram_min)
        self.config = config
        self.vocab = vocab
        self.adaptive = AdaptiveK(config)
        self.stats = SpecStats(config.num_speculative_tokens)

    def drafts(self, chunks, max_positions: int) -> dict[int, Draft]:
        """Drafts for the decode chunks that have room for them (``chunk.num_tokens - 1`` reserved slots), keyed
        by chunk index. A draft never runs past ``max_tokens`` or the model's context."""
        requests, index = [], []
        for i, c in enumerate(chunks):
            seq = c.seq
            if c.num_tokens < 2 or not seq.num_output_tokens or c.start != seq.num_tokens - 1:
                continue  # not a decode, or nothing reserved for drafts
            k = min(c.num_tokens - 1, self.adaptive.k_for(seq), seq.remaining_tokens - 1,
                    max_positions - c.start - 1)
            if k > 0:
                requests.append(DraftRequest(seq, c.start, k))
                index.append(i)
        if not requests:
            return {}
        out = {}
        for i, d in zip(index, self.proposer.propose(requests)):
            if d.tokens:
                out[i] = d
        return out

    def verify(self, seq, logits: torch.Tensor, draft: Draft) -> list[int]:
        """Tokens for ``seq`` from the target's ``logits [k+1, V]`` at the fed positions (newest token, drafts)."""
        spec = seq_spec(seq, seq.num_output_tokens)
        k = len(draft.tokens)
        if spec.greedy:
            out = greedy_verify(logits.argmax(-1).tolist(), draft.tokens)
        else:
            p = probs_of(logits, spec)
            q = draft.probs if draft.probs is not None else one_hot_probs(draft.tokens, p.shape[-1], p.dtype, p.device)
            d = torch.tensor([draft.tokens], dtype=torch.int64, device=p.device)
            toks, acc = rejection_sample(p[None], q[None].to(p.dtype), d, _generator(spec, p.device))
            out = toks[0, : int(acc[0]) + 1].tolist()
        accepted = len(out) - 1
        self.stats.record(k, accepted)
        self.adaptive.record(seq, k, accepted)
        return out

    def forget(self, seq) -> None:
        self.adaptive.forget(seq)
