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
from jalapeno.backends.torch.runner import PYTORCH_ONLY, ModelRunner
from jalapeno.backends.torch.sampler import RowSampling, _mix, filter_logits
from jalapeno.errors import ConfigError
from jalapeno.speculative.proposer import AdaptiveK, Draft, DraftRequest, NgramProposer, Proposer, SpeculativeConfig, SpeculativeStats
from jalapeno.speculative.rejection import greedy_verify, one_hot_probs, rejection_sample

#: xor'ed into a seeded request's generator seed for its draft draws (kept apart from its verification draws)
_DRAFT_SALT = 0x5EED_D4AF


def seq_spec(seq, index: int) -> RowSampling:
    sp = seq.sampling
    return RowSampling(sp.temperature, sp.top_p, sp.top_k, sp.seed, index)


def probs_of(logits: torch.Tensor, spec: RowSampling) -> torch.Tensor:
    """``[n, V]`` sampling distributions of logits rows, filtered exactly as the plain sampler does."""
    return torch.stack([torch.softmax(filter_logits(row, spec.temperature, spec.top_k, spec.top_p), -1) for row in logits])


def _generator(spec: RowSampling, device: torch.device, salt: int = 0) -> torch.Generator | None:
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


class _ModelProposer(Proposer):
    """Drafts k tokens one position at a time with a model, sampling each from q filtered like the target's p."""

    def _logits(self, j: int, requests: list[DraftRequest], live: list[int], feed: list[int]) -> torch.Tensor:
        """Draft logits ``[len(live), V]`` for draft position ``j`` of the ``live`` requests."""
        raise NotImplementedError

    def _device(self) -> torch.device:
        raise NotImplementedError

    @torch.inference_mode()
    def propose(self, requests: list[DraftRequest]) -> list[Draft]:
        dev = self._device()
        drafts = [Draft([], []) for _ in requests]
        feed = [r.seq.token_ids[r.start] for r in requests]
        for j in range(max((r.k for r in requests), default=0)):
            live = [i for i, r in enumerate(requests) if r.k > j]
            logits = self._logits(j, requests, live, feed)
            for row, i in enumerate(live):
                seq = requests[i].seq
                spec = seq_spec(seq, seq.num_output_tokens + j)
                if spec.greedy:
                    tok = int(logits[row].argmax())
                else:
                    q = probs_of(logits[row : row + 1], spec)[0]
                    tok = int(torch.multinomial(q, 1, generator=_generator(spec, dev, _DRAFT_SALT)).item())
                    drafts[i].probs.append(q)
                drafts[i].tokens.append(tok)
                feed[i] = tok
        for d in drafts:
            d.probs = torch.stack(d.probs) if d.probs else None
        return drafts


class SelfSpecProposer(_ModelProposer):
    """Draft = the target's first ``num_layers`` layers + LM head, run k times (one token per sequence each)."""

    def __init__(self, runner: Callable[[], object], num_layers: int) -> None:
        self._runner = runner
        self.num_layers = num_layers

    def _device(self) -> torch.device:
        return self._runner().device

    def _logits(self, j, requests, live, feed):
        runner = self._runner()
        slices = [SeqSlice(requests[i].start + j, 1, requests[i].seq.block_table) for i in live]
        meta = StepMetadata.build(slices, runner.block_size, runner.device)
        ids = torch.tensor([feed[i] for i in live], dtype=torch.int64, device=runner.device)
        rows = torch.arange(len(live), device=runner.device)
        return partial_forward(runner.model, ids, meta, runner.kv_cache, rows, self.num_layers)


class DraftModelProposer(_ModelProposer):
    """A separate, smaller draft model with its own paged KV cache. Its cache has as many blocks as the
    target's and is indexed by the same block table, so the scheduler's blocks (and their rollback) cover it
    too. Each proposal first feeds the tokens the draft has not seen (the prompt, or what was accepted since)."""

    def __init__(self, model, target_runner: Callable[[], object], dtype: torch.dtype) -> None:
        self.model = model
        self._target = target_runner
        self._dtype = dtype
        self._runner: ModelRunner | None = None
        self._done: dict[int | str, int] = {}  # seq_id -> tokens whose draft KV is in the draft cache

    def _device(self) -> torch.device:
        return self._target().device

    def _draft_runner(self) -> ModelRunner:
        t = self._target()
        r = self._runner
        if r is None or r.num_blocks != t.num_blocks or r.block_size != t.block_size:
            self._runner = None
            self._runner = ModelRunner(self.model, t.num_blocks, t.block_size, t.device, self._dtype, PYTORCH_ONLY)
        return self._runner

    def _logits(self, j, requests, live, feed):
        runner = self._draft_runner()
        slices, ids, rows = [], [], []
        for i in live:
            r = requests[i]
            if j == 0:  # catch up: every token from the first the draft has not seen through the newest
                done = min(self._done.get(r.seq.seq_id, 0), r.start)
                slices.append(SeqSlice(done, r.start + 1 - done, r.seq.block_table))
                ids.extend(r.seq.token_ids[done : r.start + 1])
                self._done[r.seq.seq_id] = r.start + 1
            else:
                slices.append(SeqSlice(r.start + j, 1, r.seq.block_table))
                ids.append(feed[i])
            rows.append(len(ids) - 1)
        return runner.forward(slices, ids, rows)

    def forget(self, seq) -> None:
        self._done.pop(seq.seq_id, None)


class Speculator:
    """Per-step drafting and verification for :class:`~jalapeno.backends.torch.backend.TorchBackend`."""

    def __init__(self, config: SpeculativeConfig, runner: Callable[[], object], num_layers: int, vocab: int,
                 device: str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        if config.method == "draft":
            from jalapeno.backends.torch.loader import load_model

            draft = load_model(config.draft_model, device, dtype)
            if draft.config.vocab_size != vocab:
                raise ConfigError(
                    f"the draft model's vocabulary ({draft.config.vocab_size} tokens) differs from the target's "
                    f"({vocab}); use a draft model of the same family and tokenizer"
                )
            self.proposer: Proposer = DraftModelProposer(draft.model, runner, dtype)
            self.draft_kv_elems_per_token = draft.config.kv_elems_per_token_layer() * draft.config.num_layers
        elif config.method == "self":
            layers = config.draft_layers if config.draft_layers is not None else max(1, num_layers // 4)
            if layers >= num_layers:
                raise ConfigError(
                    f"--draft-layers {layers} must be below the model's {num_layers} layers "
                    "(the draft is the target's first N layers)"
                )
            self.proposer = SelfSpecProposer(runner, layers)
        else:
            self.proposer = NgramProposer(config.ngram_max, config.ngram_min)
        self.config = config
        self.vocab = vocab
        if config.method != "draft":  # n-gram keeps no KV; the self-speculative draft reuses the target's
            self.draft_kv_elems_per_token = 0
        self.adaptive = AdaptiveK(config)
        self.stats = SpeculativeStats(config.num_speculative_tokens)

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
                self.stats.num_draft_requests += 1
                requests.append(DraftRequest(seq, c.start, k))
                index.append(i)
            else:
                self.adaptive.skip(seq)
        if not requests:
            return {}
        out = {}
        for i, r, d in zip(index, requests, self.proposer.propose(requests)):
            if d.tokens:
                out[i] = d
            else:
                self.adaptive.skip(r.seq)  # an n-gram miss: no draft, no verification
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
        self.proposer.forget(seq)

    def reset(self) -> None:
        """Start a new engine's run: counters and the adaptive policy's workload prior from zero."""
        self.adaptive.reset()
        self.stats = SpeculativeStats(self.config.num_speculative_tokens)
