"""The simulated backend: executes nothing, returns the time and energy the cost model predicts.

``SimBackend(cost_model)`` plugs into the same :class:`~jalapeno.engine.Engine` as a real backend. Each
``execute`` reduces the batch to a :class:`~jalapeno.perf.StepShape` (a few sums, O(chunks)) and prices it;
a multi-step decode of K steps is priced in one vectorised call (``cost_model.decode_steps``) and cut at the
first step that ends at or after ``batch.stop_at_s`` (the next arrival), with step ends summed one by one
exactly as the engine's virtual clock sums them. Tokens are placeholders: only their counts come back.

Speculative decoding (``Speculation``): every decode sequence verifies ``1 + k`` tokens per step and gains the
expected accepted length ``E = 1 + Σ_{i≤k} Π_{j≤i} a_j`` tokens per step on average — deterministically, via
an integer accumulator per sequence (after ``s`` steps it has gained ``floor(s·E)`` tokens). The proposer's
cost is added: a draft model's ``k`` decode steps (a second cost model), ``k`` MTP draft passes (each the MTP
module's one block + input projection + the full LM head, priced by :func:`jalapeno.perf.mtp.mtp_draft_cost_model`;
``k / L`` of a one-token target decode step for a cost model that is not a :class:`CostModel`), or nothing for
n-gram lookup.

With a measured acceptance (``Speculation.policy`` set: ``simulate --acceptance FILE``) the simulator runs the
engine's own adaptive-k policy instead (:class:`jalapeno.speculative.AdaptiveK`, the object the torch backend
asks): each step every decode asks the policy for k (K, or 0 when its acceptance estimate is low), gets a draft
with the measured probability ``draft_rate`` (an n-gram miss is a plain step), and accepts a prefix drawn from
the measured chain a_1..a_k (a seeded generator: the same run, the same result). Only the fed tokens are priced.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal, Protocol, Sequence as Seq

import numpy as np

from jalapeno._mypyc import mypyc_attr  # a compile-time hint (jalapeno build-native); plain Python: a no-op
from jalapeno.engine.batch import ScheduledBatch, StepResult
from jalapeno.engine.interface import Backend, Capabilities
from jalapeno.errors import ConfigError
from jalapeno.perf.model import CostModel
from jalapeno.perf.shape import StepShape, _pairs

if TYPE_CHECKING:  # pragma: no cover
    from jalapeno.speculative.proposer import AdaptiveK, KPolicy

#: denominator of the fixed-point accepted-length accumulator
_ONE = 1 << 32
_start = attrgetter("start")
#: batches of up to this many steps are priced in Python floats (numpy's per-call overhead dominates there)
_SCALAR_STEPS = 64


def _numpy_sum(xs: Seq[float]) -> float:
    """``float(np.sum(xs))`` of a float64 list, bit for bit, without building the array: numpy's pairwise
    summation (a plain loop below 8 values; 8 interleaved partial sums up to 128; halves above, cut at a
    multiple of 8)."""
    n = len(xs)
    if n < 8:
        res = 0.0
        for x in xs:
            res += x
        return res
    if n <= 128:
        r0, r1, r2, r3, r4, r5, r6, r7 = xs[:8]
        i = 8
        end = n - n % 8
        while i < end:
            r0 += xs[i]
            r1 += xs[i + 1]
            r2 += xs[i + 2]
            r3 += xs[i + 3]
            r4 += xs[i + 4]
            r5 += xs[i + 5]
            r6 += xs[i + 6]
            r7 += xs[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for j in range(end, n):
            res += xs[j]
        return res
    half = n // 2
    half -= half % 8
    return _numpy_sum(xs[:half]) + _numpy_sum(xs[half:])


class CostModelLike(Protocol):
    """What the simulator needs from :class:`jalapeno.perf.CostModel` (tests may pass an analytic fake)."""

    model: Any
    num_chips: int

    def step(self, shape: StepShape) -> Any: ...  # StepCost(time_s, energy_j)
    def decode_steps(self, shape: StepShape, k: int) -> tuple[np.ndarray, np.ndarray]: ...
    def memory_plan(self, max_batch_tokens: int = 8192) -> Any: ...  # MemoryPlan


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding: ``method`` proposes ``num_tokens`` (k) tokens per step, accepted with conditional
    probability ``acceptance`` (one value for every position, or one per position a_1..a_k)."""

    method: Literal["mtp", "draft", "ngram"]
    num_tokens: int
    acceptance: float | tuple[float, ...]
    draft_cost_model: CostModelLike | None = None
    #: a measured acceptance: run the engine's adaptive-k policy per sequence (None: every decode drafts k
    #: tokens and gains the expected accepted length)
    policy: KPolicy | None = None
    #: P(a draft comes back | the policy asked for one), measured (n-gram lookups can miss)
    draft_rate: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in ("mtp", "draft", "ngram"):
            raise ConfigError(f"--spec-decode {self.method!r} must be mtp, draft or ngram")
        if self.num_tokens < 1:
            raise ConfigError(f"--spec-tokens must be >= 1 (got {self.num_tokens})")
        acc = self.rates
        if len(acc) != self.num_tokens:
            raise ConfigError(f"--acceptance gives {len(acc)} rates for {self.num_tokens} speculative tokens")
        if any(not 0.0 <= a <= 1.0 for a in acc):
            raise ConfigError(f"--acceptance rates must be in [0, 1] (got {list(acc)})")
        if not 0.0 <= self.draft_rate <= 1.0:
            raise ConfigError(f"draft_rate must be in [0, 1] (got {self.draft_rate})")
        if self.method == "draft" and self.draft_cost_model is None:
            raise ConfigError("speculative decoding with a draft model needs the draft model's cost model")

    @property
    def rates(self) -> tuple[float, ...]:
        a = self.acceptance
        return tuple(float(x) for x in a) if isinstance(a, (tuple, list)) else (float(a),) * self.num_tokens

    @property
    def expected_tokens(self) -> float:
        """Expected tokens gained per decode step: 1 + Σ_i Π_{j≤i} a_j."""
        total, p = 1.0, 1.0
        for a in self.rates:
            p *= a
            total += p
        return total


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled: calibration's TangentBackend and tests subclass it
class SimBackend(Backend):
    """Backend that prices steps with a cost model on a virtual clock, over length-only sequences."""

    max_multi_step = 1 << 30
    capabilities = Capabilities(virtual_time=True, length_only=True)

    def __init__(
        self, cost_model: CostModelLike, speculation: Speculation | None = None, keep_trace: bool = False,
        max_batch_tokens: int = 8192, state_seqs: int | None = None,
    ) -> None:
        self.cm = cost_model
        #: the engine's token budget per step: the activation reserve the memory plan sets aside before KV
        #: (what decides whether a model fits on small-SRAM chips such as Groq's 230 MB)
        self.max_batch_tokens = max_batch_tokens
        #: sequences whose linear-attention state the memory plan reserves (the engine's max_num_seqs)
        self.state_seqs = state_seqs
        self.speculation = speculation
        self.k = speculation.num_tokens if speculation else 0
        self._e_num = int(round(speculation.expected_tokens * _ONE)) if speculation else _ONE
        self._acc: dict[int | str, int] = {}
        #: the engine's adaptive-k policy, fed by draws from the measured acceptance (None: expected values)
        self.adaptive: AdaptiveK | None = None
        if speculation and speculation.policy:  # imported here: a run without speculation never loads it
            from jalapeno.speculative.proposer import AdaptiveK, SpeculativeStats

            self.adaptive = AdaptiveK(speculation.policy)
            self.max_multi_step = 1  # like the torch backend: speculation decodes one step at a time
            self._rng = np.random.default_rng(speculation.seed)
            self.stats = SpeculativeStats(self.k)
        model = cost_model.model  # the keys one query may read: sliding window or DSA top-k (fakes: sliding only)
        window = getattr(model, "attention_window", None) or getattr(model, "sliding_window", None)
        self.window: int | None = window or None
        self.num_layers: int = max(1, int(getattr(cost_model.model, "num_layers", 1)))
        #: the cost model of one MTP draft pass (None: no MTP, or a cost model that is not a CostModel)
        self.mtp_cm: CostModel | None = None
        if speculation is not None and speculation.method == "mtp" and isinstance(cost_model, CostModel):
            from jalapeno.perf.mtp import mtp_draft_cost_model

            self.mtp_cm = mtp_draft_cost_model(cost_model)
        self._plan: Any = None  # the memory plan, once asked (Any: a cost model of a test may return its own)
        self.trace: list[dict] | None = [] if keep_trace else None

    def memory_plan(self):
        if self._plan is None:
            if self.state_seqs and getattr(self.cm.model, "num_linear_layers", 0):
                self._plan = self.cm.memory_plan(max_batch_tokens=self.max_batch_tokens,  # type: ignore[call-arg]
                                                 max_seqs=self.state_seqs)
            else:
                self._plan = self.cm.memory_plan(max_batch_tokens=self.max_batch_tokens)
        return self._plan

    @property
    def idle_power_w(self) -> float:
        """Power (W) the replica's chips draw while no step runs (the cost model's idle power)."""
        return float(getattr(self.cm, "idle_w", 0.0)) * int(getattr(self.cm, "chips_per_replica", 1))

    @property
    def request_latency_s(self) -> float:
        """The serving stack's per-request latency (client to first scheduling), from the chip's
        ``efficiency.request_overhead_ms``; the simulated client adds it to each call's arrival (TTFT and E2E, not step time)."""
        eff = getattr(self.cm, "eff", None)
        return float(getattr(eff, "request_overhead_ms", 0.0)) / 1000.0

    @property
    def request_latency_per_token_s(self) -> float:
        """Front-end time per prompt token (``efficiency.request_overhead_us_per_token``), added to the latency."""
        eff = getattr(self.cm, "eff", None)
        return float(getattr(eff, "request_overhead_us_per_token", 0.0)) / 1e6

    def num_kv_blocks(self, block_size: int) -> int:
        return int(self.memory_plan().kv_capacity_tokens) // block_size

    def num_offload_blocks(self, block_size: int) -> int:
        """Blocks of the cost model's KV offload tier (``CostModel(kv_offload=...)``), 0 without one."""
        return int(getattr(self.cm, "kv_offload_tokens", 0)) // block_size

    def free_sequence(self, seq) -> None:
        self._acc.pop(seq.seq_id, None)
        if self.adaptive is not None:
            self.adaptive.forget(seq)

    def spec_decode_stats(self) -> dict | None:
        """The simulated run's acceptance counters (adaptive policy only): the same fields the engine records."""
        return self.stats.to_dict() if self.adaptive is not None else None

    # ---------------------------------------------------------------------------------------------
    def shape_of(self, batch: ScheduledBatch) -> StepShape:
        """Aggregate the batch's first step (decode = a chunk that feeds the sequence's newest token on)."""
        return self._shapes(batch, False)[0]

    def _shapes(self, batch: ScheduledBatch, multi: bool) -> tuple[StepShape, StepShape | None]:
        """The first step's shape and, for a multi-step batch whose first step prefills, the shape of its second
        step (every chunk then decodes: a finished prompt feeds its first token, a decode its next).

        The accumulators are :class:`StepShape`'s fields (``*_window``: capped at the sliding window) plus the
        second step's decode context sums (``next_*``)."""
        window = self.window
        per = 1 + self.k
        group = batch.group
        if window and group is not None and batch.num_grouped == len(batch.chunks):
            # the lockstep group alone (a KV-bound run's usual event): the general path below with no chunk to
            # walk and no prefill, the same values (and types) without its accumulators
            g = batch.num_grouped
            decode_tokens = g * per
            starts = batch.decode_start_sum
            decode_ctx = (starts if batch.num_decodes == g and starts is not None else group.start_sum()) + decode_tokens
            decode_ctx_window, decode_below = group.window_sums(window, per)
            return StepShape.of(0, 0, 0.0, 0.0, 0, 0, g, decode_tokens, decode_ctx, decode_ctx_window, decode_below), None
        prefill_tokens = prefill_seqs = prefill_kv = prefill_kv_window = fresh_tokens = fresh_seqs = 0
        prefill_pairs = prefill_pairs_window = 0.0
        decode_seqs = decode_tokens = decode_ctx = decode_ctx_window = decode_below = 0
        next_ctx = next_ctx_window = next_below = 0
        chunks = batch.chunks
        nd = batch.num_decodes
        if nd and not window:  # fast path: the scheduler put the decodes first (and may know their starts' sum)
            decode_seqs, decode_tokens = nd, nd * per
            starts = batch.decode_start_sum
            decode_ctx = (sum(map(_start, chunks[:nd])) if starts is None else starts) + decode_tokens
            next_ctx = decode_ctx + nd
            chunks = chunks[nd:]
        elif window and batch.group is not None:  # the lockstep group's members: their sums without a walk
            g = batch.num_grouped
            decode_seqs, decode_tokens = g, g * per
            starts = batch.decode_start_sum  # the scheduler's sum covers the members alone when nd == g
            decode_ctx = (starts if nd == g and starts is not None else batch.group.start_sum()) + decode_tokens
            if multi and len(chunks) > g:  # a chunk behind the group may prefill: the next step's shape is needed
                next_ctx = decode_ctx + g
                decode_ctx_window, decode_below, next_ctx_window, next_below = batch.group.window_sums_pair(window, per)
            else:
                decode_ctx_window, decode_below = batch.group.window_sums(window, per)
            chunks = chunks[g:]
        for c in chunks:
            seq = c.seq
            n = c.num_tokens
            out = seq.num_output_tokens
            if out and c.start >= seq.prompt_len + out - 1:  # a decode: feeds the newest token on
                ctx = c.start + n
                decode_seqs += 1
                decode_tokens += n
                decode_ctx += ctx
                nxt = ctx + 1
                if window:
                    if ctx < window:
                        decode_ctx_window += ctx
                        decode_below += 1
                    else:
                        decode_ctx_window += window
            else:
                prefix = c.start
                prefill_tokens += n
                prefill_seqs += 1
                if not prefix:
                    fresh_tokens += n
                    fresh_seqs += 1
                full = _pairs(n, prefix, None)
                prefill_pairs += full
                prefill_pairs_window += _pairs(n, prefix, window) if window else full
                prefill_kv += prefix + n
                prefill_kv_window += (min(prefix, window) if window else prefix) + n
                nxt = prefix + n + per
            if multi:
                next_ctx += nxt
                if window:
                    if nxt < window:
                        next_ctx_window += nxt
                        next_below += 1
                    else:
                        next_ctx_window += window
        if not window:
            decode_ctx_window = decode_ctx
            next_ctx_window = next_ctx
        first = StepShape.of(prefill_tokens, prefill_seqs, prefill_pairs, prefill_pairs_window, prefill_kv,
                             prefill_kv_window, decode_seqs, decode_tokens, decode_ctx, decode_ctx_window, decode_below,
                             fresh_tokens, fresh_seqs)
        if not (multi and prefill_tokens):  # a decode-only multi-step batch is priced from its first shape alone
            return first, None
        b = len(batch.chunks)
        return first, StepShape.of(0, 0, 0.0, 0.0, 0, 0, b, b * per, next_ctx, next_ctx_window, next_below)

    def _proposer(self, shape: StepShape, steps: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Time and energy the draft proposer adds to each of ``steps`` steps."""
        spec = self.speculation
        if spec is None or spec.method == "ngram":
            return None
        k = self.k
        one_tok = StepShape(
            decode_seqs=shape.decode_seqs,
            decode_tokens=shape.decode_seqs,
            decode_ctx_sum=shape.decode_ctx_sum - k * shape.decode_seqs,
            decode_ctx_sum_window=shape.decode_ctx_sum_window,
            decode_below_window=shape.decode_below_window,
        )
        pre = StepShape(
            prefill_tokens=shape.prefill_tokens,
            prefill_seqs=shape.prefill_seqs,
            prefill_attn_pairs=shape.prefill_attn_pairs,
            prefill_attn_pairs_window=shape.prefill_attn_pairs_window,
            prefill_kv_tokens=shape.prefill_kv_tokens,
            prefill_kv_tokens_window=shape.prefill_kv_tokens_window,
            prefill_fresh_tokens=shape.prefill_fresh_tokens,
            prefill_fresh_seqs=shape.prefill_fresh_seqs,
        )
        t = np.zeros(steps)
        e = np.zeros(steps)
        if spec.method == "draft" or self.mtp_cm is not None:  # k passes of a second cost model
            cm = spec.draft_cost_model if spec.method == "draft" else self.mtp_cm
            assert cm is not None
            if one_tok.decode_seqs:
                dt, de = cm.decode_steps(one_tok, steps * k)
                t += dt.reshape(steps, k).sum(axis=1)
                e += de.reshape(steps, k).sum(axis=1)
            if pre.prefill_tokens:
                c = cm.step(pre)
                t[0] += c.time_s
                e[0] += c.energy_j
        else:  # mtp on a cost model that is not a CostModel (a test's fake): k/L of the target's step
            f = k / self.num_layers
            if one_tok.decode_seqs:
                dt, de = self.cm.decode_steps(one_tok, steps)
                t += dt * f
                e += de * f
            if pre.prefill_tokens:
                c = self.cm.step(pre)
                t[0] += c.time_s / self.num_layers
                e[0] += c.energy_j / self.num_layers
        return t, e

    def _speculate(self, batch: ScheduledBatch) -> tuple[list[int], int, int, int]:
        """One step of the adaptive policy: (tokens each chunk gains, slots the scheduler reserved that stay
        empty, decodes that drafted, Σ the drafting decodes' context for the proposer's cost)."""
        spec, adaptive, rng, stats = self.speculation, self.adaptive, self._rng, self.stats
        assert spec is not None and adaptive is not None
        rates = spec.rates
        counts, asks, unused, drafted, drafted_ctx = [], [], 0, 0, 0
        nd = batch.num_decodes
        for i, c in enumerate(batch.chunks):  # every decode asks the policy first, as the torch backend does
            seq = c.seq
            if not c.sample:
                counts.append(0)
            elif not (i < nd or seq.num_output_tokens and c.start >= seq.num_tokens - 1):
                counts.append(1)  # a finished prompt gains its first token
            else:
                counts.append(1)
                asks.append((i, min(c.num_tokens - 1, adaptive.k_for(seq), seq.remaining_tokens - 1)))
        for i, k in asks:  # ... then the drafts are verified and the policy learns
            c = batch.chunks[i]
            got = 0
            if k > 0:
                stats.num_draft_requests += 1
                if rng.random() < spec.draft_rate:
                    draws = rng.random(k)
                    while got < k and draws[got] < rates[got]:
                        got += 1
                    stats.record(k, got)
                    adaptive.record(c.seq, k, got)
                    drafted += 1
                    drafted_ctx += c.start + 1 + k
                else:
                    adaptive.skip(c.seq)
                    k = 0
            else:
                adaptive.skip(c.seq)
            unused += max(0, c.num_tokens - 1 - k)
            counts[i] = got + 1
        return counts, unused, drafted, drafted_ctx

    def _execute_adaptive(self, batch: ScheduledBatch) -> StepResult:
        """A one-step batch under the adaptive policy: price the tokens actually fed (drafts that exist)."""
        counts, unused, drafted, drafted_ctx = self._speculate(batch)
        shape = self._shapes(batch, False)[0]
        if unused:  # reserved draft slots with no draft: not fed, not attended
            ctx = shape.decode_ctx_sum - unused
            shape = dataclasses.replace(shape, decode_tokens=shape.decode_tokens - unused, decode_ctx_sum=ctx,
                                        decode_ctx_sum_window=ctx if not self.window else shape.decode_ctx_sum_window)
        c = self.cm.step(shape)
        dur, en = float(c.time_s), float(c.energy_j)
        pshape = dataclasses.replace(shape, decode_seqs=drafted, decode_tokens=drafted * (1 + self.k),
                                     decode_ctx_sum=drafted_ctx, decode_ctx_sum_window=drafted_ctx)
        extra = self._proposer(pshape, 1) if (drafted or shape.prefill_tokens) else None
        if extra is not None:
            dur += float(extra[0][0])
            en += float(extra[1][0])
        if batch.loaded_tokens:
            t_load = self.cm.kv_load_time_s(batch.loaded_tokens)  # type: ignore[attr-defined]
            dur += t_load
            en += t_load * self.idle_power_w
        if self.trace is not None:
            self._record(1, shape, dur, [dur], en)
            self.trace[-1]["drafted"] = drafted
        return StepResult(tokens=[], duration_s=dur, energy_j=en, step_durations=[dur], token_counts=counts)

    def execute(self, batch: ScheduledBatch) -> StepResult:
        if self.adaptive is not None:
            return self._execute_adaptive(batch)
        steps = batch.num_steps
        g = batch.num_grouped
        if (g and g == len(batch.chunks) and steps <= _SCALAR_STEPS and self.trace is None and self.speculation is None
                and not batch.loaded_tokens and type(self.cm) is CostModel):
            return self._execute_group(batch, g, steps)
        shape, nxt = self._shapes(batch, steps > 1)
        # the scalar path only for the plain cost model (``self.cm`` may be swapped for a wrapper that records
        # the step/decode_steps calls, as calibration's TangentBackend does, or be a test's fake)
        if steps <= _SCALAR_STEPS and type(self.cm) is CostModel and self.speculation is None and not batch.loaded_tokens:
            return self._execute_lists(batch, shape, nxt)
        if steps > 1 and not shape.prefill_tokens:
            durs, ens = self.cm.decode_steps(shape, steps)
            extra = self._proposer(shape, steps)
        else:
            c = self.cm.step(shape)
            durs, ens = np.array([c.time_s]), np.array([c.energy_j])
            extra = self._proposer(shape, 1)
            if steps > 1:  # the first step finished some prompts; then everyone decodes
                assert nxt is not None
                d2, e2 = self.cm.decode_steps(nxt, steps - 1)
                durs, ens = np.concatenate((durs, d2)), np.concatenate((ens, e2))
                x2 = self._proposer(nxt, steps - 1)
                if extra is not None and x2 is not None:
                    extra = (np.concatenate((extra[0], x2[0])), np.concatenate((extra[1], x2[1])))
        if extra is not None:
            durs = durs + extra[0]
            ens = ens + extra[1]
        if batch.loaded_tokens:  # KV brought back from the offload tier before the first step can run
            t_load = self.cm.kv_load_time_s(batch.loaded_tokens)  # type: ignore[attr-defined]
            durs = durs.copy()
            durs[0] += t_load
            ens = ens.copy()
            ens[0] += t_load * self.idle_power_w  # the chips wait on the host link
        run = steps
        dl = durs.tolist()
        if steps > 1 and batch.stop_at_s is not None:
            ends = list(accumulate(dl, initial=batch.start_s))  # step ends, summed one by one
            run = min(steps, bisect_left(ends, batch.stop_at_s, 1))  # the first end >= stop_at_s
            dl, durs, ens = dl[:run], durs[:run], ens[:run]
        counts = self._token_counts(batch, run)
        energy = float(ens.sum())
        if self.trace is not None:
            self._record(run, shape, float(durs.sum()), dl, energy)
        return StepResult(
            tokens=[],
            duration_s=float(sum(dl)),
            energy_j=energy,
            step_durations=dl,
            token_counts=counts,
        )

    def _record(self, run: int, shape: StepShape, duration_s: float, durations: list, energy_j: float) -> None:
        """Append one executed batch to ``self.trace`` (the caller checks that it traces)."""
        assert self.trace is not None
        self.trace.append({"steps": run, "prefill_tokens": shape.prefill_tokens, "decode_seqs": shape.decode_seqs,
                           "decode_ctx_sum": shape.decode_ctx_sum, "duration_s": duration_s,
                           "step_durations": durations, "energy_j": energy_j})

    def _execute_lists(self, batch: ScheduledBatch, shape: StepShape, nxt: StepShape | None) -> StepResult:
        """:meth:`execute` for a few steps without speculation or KV loads, in Python floats: the same step
        times and energies (``CostModel.decode_step_lists``), the energy summed as numpy sums an array."""
        steps = batch.num_steps
        cm = self.cm
        # a multi-step batch stops after the first step that ends at or after ``stop_at_s`` (the next arrival):
        # the cost model prices the steps up to it only, its ends summed one by one from ``start_s``
        start, stop = batch.start_s, batch.stop_at_s if steps > 1 else None
        if steps > 1 and not shape.prefill_tokens:
            dl, el = cm.decode_step_lists(shape, steps, start, stop)  # type: ignore[attr-defined]
        else:
            c = cm.step(shape)
            dl, el = [c.time_s], [c.energy_j]
            if steps > 1 and (stop is None or start + c.time_s < stop):  # then everyone decodes
                assert nxt is not None
                d2, e2 = cm.decode_step_lists(nxt, steps - 1, start + c.time_s, stop)  # type: ignore[attr-defined]
                dl += d2
                el += e2
        run = len(dl)
        energy = _numpy_sum(el)
        if self.trace is not None:
            self._record(run, shape, _numpy_sum(dl), dl, energy)
        skip = batch.num_grouped  # the group's members: one token per step run (no list of them)
        # positional, in field order (tokens, duration_s, energy_j, step_durations, token_counts, counts_skip):
        # a dataclass's keyword call costs ≈ 1 µs more, once per event
        return StepResult([], float(sum(dl)), energy, dl, self._token_counts(batch, run, skip), skip)

    def _execute_group(self, batch: ScheduledBatch, g: int, steps: int) -> StepResult:
        """:meth:`execute` of a batch that is the lockstep group alone (``g`` members, no speculation, no KV load,
        no trace, the plain cost model; a KV-bound run's usual event): :meth:`_shapes` (no chunk to walk, no
        prefill, so no second shape), :meth:`_execute_lists` and :meth:`_token_counts` (nothing to count: the
        members gain one token per step run) as one routine — the same shape, the same floats
        (``tests/sim/test_backend_lists.py::test_group_only_batches_price_as_the_general_path``)."""
        group = batch.group
        assert group is not None
        starts = batch.decode_start_sum
        decode_ctx = (starts if batch.num_decodes == g and starts is not None else group.start_sum()) + g
        window = self.window
        if window:
            decode_ctx_window, decode_below = group.window_sums(window, 1)
            shape = StepShape.of(0, 0, 0.0, 0.0, 0, 0, g, g, decode_ctx, decode_ctx_window, decode_below)
        else:
            shape = StepShape.of(0, 0, 0.0, 0.0, 0, 0, g, g, decode_ctx, decode_ctx, 0, 0, 0)
        cm = self.cm
        if steps > 1:
            dl, el = cm.decode_step_lists(shape, steps, batch.start_s, batch.stop_at_s)  # type: ignore[attr-defined]
        else:
            c = cm.step(shape)
            dl, el = [c.time_s], [c.energy_j]
        return StepResult([], float(sum(dl)), _numpy_sum(el), dl, [], g)

    def _token_counts(self, batch: ScheduledBatch, steps: int, skip: int = 0) -> Seq[int]:
        """Tokens each chunk gained over ``steps`` steps (every chunk of a multi-step batch samples), leaving out
        the first ``skip`` chunks (lockstep group members, ``StepResult.counts_skip``)."""
        if not self.k:
            if batch.num_steps > 1:
                return [steps] * (len(batch.chunks) - skip)
            nd = batch.num_decodes  # decode chunks always sample
            return [1] * (nd - skip) + [1 if c.sample else 0 for c in batch.chunks[nd:]]
        acc, e = self._acc, self._e_num
        nd = batch.num_decodes  # chunks[:nd] decode (and sample)
        out = []
        for i, c in enumerate(batch.chunks):
            seq = c.seq
            if not c.sample:
                out.append(0)
                continue
            # a finished prompt gains its first token; every decode step gains floor-accumulated E tokens
            dec = steps if (i < nd or seq.num_output_tokens and c.start >= seq.num_tokens - 1) else steps - 1
            got = 0 if dec == steps else 1
            if dec:
                a0 = acc.get(seq.seq_id, 0)
                a1 = a0 + dec * e
                acc[seq.seq_id] = a1
                got += a1 // _ONE - a0 // _ONE
            out.append(got)
        return out
