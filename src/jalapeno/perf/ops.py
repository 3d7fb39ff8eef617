"""Operator inventory of one engine step, as coefficients over the step's aggregate features.

Every operator's FLOPs, bytes (per memory level) and network bytes are affine in a small feature vector
computed from a :class:`~jalapeno.perf.shape.StepShape` (see :data:`FEATURES`), so the cost model evaluates a
step with one matrix-vector product. The one non-linear term, the expected fraction of routed experts that
``T`` tokens touch, ``u = 1 - (1 - k/E)^T``, is itself a feature.

All coefficients are **per chip** (one tensor-parallel rank), **summed over the layers** the operator occurs
in; ``mult`` says how many chips of the replica do that work (for totals and energy).
Memory levels are symbolic here: ``W`` (weights), ``KV`` (KV cache), ``A`` (activations); the cost model maps
them to the chip's real levels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from jalapeno.models.arch import ModelArch
from jalapeno.perf.shape import StepShape

#: feature names, in vector order
FEATURES = (
    "one",  # constant
    "T",  # tokens fed this step (prefill + decode)
    "Tp",  # prefill tokens
    "Td",  # decode tokens
    "S",  # rows that go through the LM head: decode tokens + one per prefill sequence
    "P",  # causal (query, key) pairs of prefill chunks
    "Pw",  # same, keys capped at the sliding window
    "K",  # KV tokens read by prefill chunks (cached prefix + chunk)
    "Kw",  # same, capped at the window
    "C",  # sum of decode contexts
    "Cw",  # same, capped at the window
    "Cr",  # C x decode tokens per decode sequence (query rows that attend each context)
    "Cwr",  # Cw x decode tokens per decode sequence
    "U",  # expected fraction of routed experts touched by T tokens: 1 - (1 - k/E)^T
    "Ue",  # the same on the busiest expert-parallel rank (= U without expert parallelism)
    "Tm",  # tokens whose (token, expert) pairs load the busiest EP rank as much as it is loaded (= T without EP)
    "N",  # sequences in the step (decode + prefill chunks): each reads and writes its recurrent state once
    "Pf",  # 1 when the step prefills (an eager / piecewise step), else 0
    "Uep",  # Ue in a step that prefills, else 0 (routed experts the busiest rank runs, as a fraction)
)
#: chunk length of the chunked (parallel) Gated DeltaNet prefill kernels (flash-linear-attention's default)
GDN_CHUNK = 64
NF = len(FEATURES)
IDX = {n: i for i, n in enumerate(FEATURES)}


def vec(**coef: float) -> np.ndarray:
    v = np.zeros(NF)
    for k, x in coef.items():
        v[IDX[k]] += x
    return v


@dataclass(frozen=True)
class Routing:
    """Routed-expert load statistics behind the ``U``, ``Ue`` and ``Tm`` features, for uniform top-k routing
    (each token picks ``k`` distinct experts of ``E``) with the experts split evenly over ``ep`` ranks.

    A step is as slow as its busiest rank. Per rank, the touched experts are ~Binomial(E/ep, U) and the
    (token, expert) pairs a sum of ``T`` independent hypergeometric counts (mean k/ep, variance
    k (1/ep)(1 - 1/ep)(E - k)/(E - 1) each); the busiest of ``ep`` ranks sits ``z`` standard deviations above
    the mean, ``z`` the expected maximum of ``ep`` standard normals (Blom's approximation). Real routers are
    less uniform than this, so it is a lower bound on the imbalance; it vanishes as tokens per rank grow."""

    keep: float = 1.0  # 1 - k/E (1.0: dense)
    experts_per_rank: float = 0.0
    z: float = 0.0  # 0: no expert parallelism
    pair_mean: float = 0.0  # one token's expected pairs on one rank (k/ep)
    pair_var: float = 0.0  # their variance
    pair_cap: float = 0.0  # most pairs one token can put on one rank: min(k, E/ep)

    @classmethod
    def of(cls, num_experts: int, k: int, ep: int, slots: int | None = None) -> "Routing":
        """``slots``: expert slots over the ranks (> ``num_experts`` with redundant copies; each rank holds
        ``slots/ep`` of them, the routing statistics stay those of the ``num_experts`` distinct experts)."""
        if not num_experts:
            return cls()
        keep = 1.0 - k / num_experts
        if ep <= 1:
            return cls(keep)
        from statistics import NormalDist

        n = (slots or num_experts) / ep
        z = NormalDist().inv_cdf((ep - 0.375) / (ep + 0.25))
        var = k * (1 / ep) * (1 - 1 / ep) * (num_experts - k) / max(num_experts - 1, 1)
        return cls(keep, n, z, k / ep, var, min(k, n))


def routing_terms(t: int, moe: "float | Routing") -> tuple[float, float, float]:
    """The ``U``, ``Ue`` and ``Tm`` features of a step of ``t`` tokens (they depend on nothing else)."""
    ro = moe if isinstance(moe, Routing) else None
    u = 1.0 - (ro.keep if ro is not None else moe) ** t  # type: ignore[operator]
    ue, tm = u, float(t)
    if ro is not None and ro.z and t:
        ue = min(1.0, u + ro.z * math.sqrt(u * (1.0 - u) / ro.experts_per_rank))
        tm = min(t * ro.pair_cap, t * ro.pair_mean + ro.z * math.sqrt(t * ro.pair_var)) / ro.pair_mean
    return u, ue, tm


def features(shape: StepShape, moe: "float | Routing",
             memo: "dict[int, tuple[float, float, float]] | None" = None) -> list[float]:
    """Feature vector (as a list, :data:`FEATURES` order) of one step. ``moe``: the model's :class:`Routing`,
    or just 1 - k/E (1.0 if dense) for no expert-parallel imbalance. ``memo``: a dict the caller keeps for one
    ``moe``, of :func:`routing_terms` by token count (a simulation prices the same few batch sizes again and
    again; the same floats either way)."""
    pt, dt, ps, ds = shape.prefill_tokens, shape.decode_tokens, shape.prefill_seqs, shape.decode_seqs
    t = pt + dt
    r = dt / ds if ds else 0.0
    if memo is None:
        u, ue, tm = routing_terms(t, moe)
    else:
        terms = memo.get(t)
        if terms is None:
            if len(memo) > 4096:
                memo.clear()
            terms = memo[t] = routing_terms(t, moe)
        u, ue, tm = terms
    c, cw = shape.decode_ctx_sum, shape.decode_ctx_sum_window
    return [
        1.0,
        t,
        pt,
        dt,
        dt + ps,
        shape.prefill_attn_pairs,
        shape.prefill_attn_pairs_window,
        shape.prefill_kv_tokens,
        shape.prefill_kv_tokens_window,
        c,
        cw,
        c * r,
        cw * r,
        u,
        ue,
        tm,
        ds + ps,
        1.0 if pt else 0.0,
        ue if pt else 0.0,
    ]


@dataclass
class OpSpec:
    """One operator: per-chip coefficient vectors summed over ``layers`` layers (see module doc)."""

    name: str
    kind: str  # "work" | "network" | "overhead"
    layers: int = 0
    dtype: str = ""
    mult: float = 1.0
    flops: np.ndarray = field(default_factory=lambda: np.zeros(NF))
    bytes: dict[str, np.ndarray] = field(default_factory=dict)  # symbolic level -> coefficients
    net_bytes: np.ndarray = field(default_factory=lambda: np.zeros(NF))
    net_time: np.ndarray = field(default_factory=lambda: np.zeros(NF))
    #: the busiest chip's FLOPs / bytes when chips are unevenly loaded (expert parallelism): these set the
    #: step time; ``flops`` / ``bytes`` stay the average chip's (totals, energy). None: evenly loaded
    time_flops: np.ndarray | None = None
    time_bytes: dict[str, np.ndarray] | None = None
    #: weight bytes stored per chip for one occurrence (one layer), and on which layers (for placement)
    stored: float = 0.0
    layer_ids: tuple[int, ...] = ()
    stage: str = ""  # non-layer ops: "first" or "last" pipeline stage


@dataclass(frozen=True)
class Dims:
    """Sharding-resolved sizes, per chip."""

    att_split: int  # the attention batch is split this many ways (dp-attention) else 1
    att_shard: int  # attention heads split this many ways (tp) else 1
    q_heads: float  # query heads per chip
    kv_heads: float  # KV heads per chip (>= 1: replicated when tp > num_kv_heads)


def attention_dims(m: ModelArch, tp: int, dp_attention: bool) -> Dims:
    split, shard = (tp, 1) if dp_attention else (1, tp)
    kvh = m.num_kv_heads / shard if m.num_kv_heads >= shard else 1.0
    return Dims(split, shard, m.num_heads / shard, kvh)


def kv_bytes_per_token_per_layer(m: ModelArch, d: Dims, kvb: float) -> float:
    """KV bytes one token occupies on one chip in one attention layer (MLA: the latent, replicated on every
    rank; DSA adds the indexer key, also replicated). Linear-attention layers hold no KV (see
    :func:`linear_state_bytes_per_layer`)."""
    if m.attention == "mla":
        return (m.kv_lora_rank + m.qk_rope_head_dim) * kvb + m.indexer_bytes_per_token_layer
    return 2 * d.kv_heads * m.head_dim * kvb


def linear_state_bytes_per_layer(m: ModelArch, d: Dims) -> float:
    """Recurrent state one sequence keeps on one chip in one linear-attention layer (heads split by tp):
    the delta-rule state (v heads x dk x dv at the state dtype) + the conv window ((kernel - 1) x channels)."""
    if not m.linear_num_value_heads:
        return 0.0
    return m.linear_state_bytes() / d.att_shard


def _linear_attention_ops(m: ModelArch, d: Dims, layer_op, lin_ids, wb: float, dt_w: str, dt_att: str,
                          a: float) -> None:
    """Gated DeltaNet layers: in-projections, the conv + delta-rule recurrence (a constant per-sequence state,
    read and written once per sequence per step; FLOPs linear in tokens), out-projection. Heads split by tp."""
    h, sh, sp = m.hidden_size, d.att_shard, d.att_split
    nk, nv = m.linear_num_key_heads / sh, m.linear_num_value_heads / sh
    dk, dv, kern = m.linear_key_head_dim, m.linear_value_head_dim, m.linear_conv_kernel
    conv, vdim = 2 * nk * dk + nv * dv, nv * dv  # conv channels (q, k, v) and the value width, per chip
    tok = vec(T=1.0 / sp)
    p_in = h * (conv + vdim + 2 * nv)  # in_proj_qkv, in_proj_z (output gate), in_proj_b (beta), in_proj_a (decay)
    layer_op("linear_in_proj", lin_ids, dt_w, 2 * p_in * tok, p_in * wb, p_in * wb,
             act=tok * (h + conv + vdim + 2 * nv) * a)
    # recurrent decode: decay (1) + k^T S (2) + rank-1 update (2) + q^T S (2) = 7 dk dv per value head;
    # chunked prefill: 6 dk dv (inter-chunk state products) + 4 c (dk + dv) (intra-chunk, c = GDN_CHUNK)
    per_head_dec = 7 * dk * dv
    per_head_pre = 6 * dk * dv + 4 * GDN_CHUNK * (dk + dv)
    flops = (2 * conv * kern + 10 * vdim) * tok + nv * vec(Td=per_head_dec / sp, Tp=per_head_pre / sp)
    state = vec(N=2.0 * m.linear_state_bytes() / sh / sp)  # read + write the whole state once per sequence
    small = (conv * kern + 2 * nv + dv) * 2.0  # conv weights, A_log, dt_bias, gated-norm weight (16-bit)
    layer_op("linear_attention", lin_ids, dt_att, flops, small, small, kv=state,
             act=tok * (conv + 2 * vdim + 2 * nv) * a)
    p_o = vdim * h
    layer_op("linear_out_proj", lin_ids, dt_w, 2 * p_o * tok, p_o * wb, p_o * wb, act=tok * (vdim + h) * a)


def _indexer_op(m: ModelArch, layer_op, ids, sp: int, wb: float, dt_w: str, a: float) -> None:
    """DSA lightning indexer, replicated on every tensor-parallel rank (vLLM builds it from replicated
    linears): q from the q latent (wq_b), one shared key per token (wk + LayerNorm), per-head weights
    (weights_proj); it scores EVERY previous key (2 FLOPs per head-dim per head per (query, key) pair, FLOPs
    ∝ context) from its own small key cache (fp8 + fp32 scale per token), then picks the top-k."""
    h, ih, idim = m.hidden_size, m.index_n_heads, m.index_head_dim
    p_w = (m.q_lora_rank or h) * ih * idim + h * idim  # wq_b, wk (quantized with the attention)
    p_o = (h * ih + 2 * idim) * 2.0  # weights_proj and the key LayerNorm stay 16-bit
    tok = vec(T=1.0 / sp)  # sp: the attention batch split (dp-attention)
    flops = 2 * (p_w + h * ih) * tok + 2 * ih * idim * vec(P=1.0 / sp, Cr=1.0 / sp)
    ib = m.indexer_bytes_per_token_layer
    kv = ib * vec(K=1.0 / sp, C=1.0 / sp, T=1.0 / sp)  # read every cached key, write the new ones
    act = tok * (h + (m.q_lora_rank or h) + ih * idim + idim + ih) * a
    layer_op("indexer", ids, dt_w, flops, p_w * wb + p_o, p_w * wb + p_o, kv=kv, act=act)


#: bytes of a bf16 element (embeddings, norms, biases, router and LM head weights)
B16 = 2.0


class _Ops:
    """The operator list being built, and the two ways an operator is added: work repeated over layers, and a
    collective."""

    def __init__(self, tp: int, coll: dict[str, tuple[float, float, float]]) -> None:
        self.ops: list[OpSpec] = []
        self.tp = tp
        self.coll = coll

    def layer(self, name, layer_ids, dtype, flops, w_read, w_stored, kv=None, act=None) -> None:
        n = len(layer_ids)
        by: dict = {"W": (vec(one=w_read) if np.isscalar(w_read) else w_read) * n}  # type: ignore[arg-type]
        if kv is not None:
            by["KV"] = kv * n
        if act is not None:
            by["A"] = act * n
        self.ops.append(
            OpSpec(name, "work", n, dtype, self.tp, flops * n, by, stored=w_stored, layer_ids=tuple(layer_ids))
        )

    def net(self, name, n_layers, coll_name, msg: np.ndarray) -> None:
        lat, spb, sent = self.coll[coll_name]
        if spb == 0 and lat == 0:
            return
        self.ops.append(
            OpSpec(name, "network", n_layers, "", self.tp, net_bytes=msg * sent * n_layers,
                   net_time=(msg * spb + vec(one=lat)) * n_layers)
        )


def build_ops(
    m: ModelArch,
    *,
    tp: int,
    ep: int,
    dp_attention: bool,
    wbytes: dict[str, float],  # bytes per element per weight class
    wdtype: dict[str, str],  # compute dtype per weight class (+ "attn_math", "bf16")
    kvb: float,
    actb: float,
    coll: dict[str, tuple[float, float, float]],  # collective name -> (latency_s, s_per_byte, sent_per_byte)
    expert_slots: int | None = None,  # experts stored over the ep ranks (> num_experts: redundant copies)
    mtp_draft: bool = False,  # ``m`` is an MTP module's block: add its input projection (:func:`_mtp_input_ops`)
) -> list[OpSpec]:
    """All operators of one step for model ``m`` with the given sharding (see module doc for conventions)."""
    b = _Ops(tp, coll)
    h = m.hidden_size
    a = actb
    d = attention_dims(m, tp, dp_attention)
    # ---------------- embedding ----------------
    hb = wbytes.get("head", B16)  # embedding / LM head / final norm bytes: 16-bit, or 4 when all is float32
    emb_stored = m.vocab_size * h * hb / tp  # vocab-parallel in both modes (like the LM head)
    b.ops.append(OpSpec("embed", "work", 0, "", tp, vec(), {"W": vec(T=h * hb / tp), "A": vec(T=h * a)},
                        stored=emb_stored, stage="first"))
    if not dp_attention:
        b.net("embed_allreduce", 1, "tp_allreduce", vec(T=h * a))
    if mtp_draft:
        _mtp_input_ops(b, m, d, wdtype, a, hb, dp_attention)
    # ---------------- attention ----------------
    lin_ids = tuple(i for i in range(m.num_layers) if m.is_linear_layer(i))
    if lin_ids:
        _linear_attention_ops(m, d, b.layer, lin_ids, wbytes["attn"], wdtype["attn"], wdtype["attn_math"], a)
    if m.attention == "mla":
        _mla_attention(b, m, d, wdtype, wbytes["attn"], kvb, a)
    else:
        _gqa_attention(b, m, d, wdtype, wbytes["attn"], kvb, a)
    if not dp_attention:
        b.net("attn_allreduce", m.num_layers, "tp_allreduce", vec(T=h * a))
    # ---------------- MLP / MoE ----------------
    _mlp_and_moe(b, m, ep, dp_attention, wbytes, wdtype, a, vec(T=1.0 / d.att_split), expert_slots)
    # ---------------- norms, residuals, final norm, LM head, sampling ----------------
    _norms_and_head(b, m, wdtype, a, d.att_split, hb)
    return b.ops


def _mla_attention(b: _Ops, m: ModelArch, d, wdtype: dict[str, str], wb: float, kvb: float, a: float) -> None:
    """Multi-head latent attention (DeepSeek): fused q_a + kv_a, q_b, kv_b, attention over latents, o_proj."""
    h, sp = m.hidden_size, d.att_split
    all_layers = tuple(range(m.num_layers))
    tok_att = vec(T=1.0 / sp)  # tokens a chip feeds to attention
    dt_w, dt_att = wdtype["attn"], wdtype["attn_math"]
    nope, rope, vd, kvl = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
    qk = nope + rope
    # fused q_a + kv_a (replicated on every rank, as in vLLM's fused_qkv_a_proj), then q_b column-parallel
    if m.q_lora_rank:
        ql = m.q_lora_rank
        p_a = h * (ql + kvl + rope)
        p_qb = ql * d.q_heads * qk
        norms = (ql + kvl) * B16
        b.layer("qkv_a_proj", all_layers, dt_w, 2 * p_a * tok_att, p_a * wb + norms, p_a * wb + norms,
                act=tok_att * (h + ql + kvl + rope) * a)
        b.layer("q_b_proj", all_layers, dt_w, 2 * p_qb * tok_att, p_qb * wb, p_qb * wb,
                act=tok_att * (ql + d.q_heads * qk) * a)
    else:
        p_a = h * (kvl + rope)
        p_q = h * d.q_heads * qk
        b.layer("qkv_a_proj", all_layers, dt_w, 2 * (p_a + p_q) * tok_att, (p_a + p_q) * wb + kvl * B16,
                (p_a + p_q) * wb + kvl * B16, act=tok_att * (h + kvl + rope + d.q_heads * qk) * a)
    # kv_b: prefill expands every context latent (non-absorbed); decode absorbs W_UK / W_UV per query token
    p_kvb = kvl * d.q_heads * (nope + vd)
    # DSA: attention reads only the indexer's top-k keys per query -- the sliding-window sums with the window
    # at index_topk (StepShape is built with ModelArch.attention_window); the indexer itself scores every key
    K_att, P_att, C_att, Cr_att = ("Kw", "Pw", "Cw", "Cwr") if m.index_topk else ("K", "P", "C", "Cr")
    kvb_tokens = vec(**{K_att: 1.0 / sp, "Td": 1.0 / sp})
    b.layer("kv_b_proj", all_layers, dt_w, 2 * p_kvb * kvb_tokens, p_kvb * wb, p_kvb * wb,
            act=vec(**{K_att: 1.0 / sp}) * (kvl + d.q_heads * (nope + vd)) * a
            + vec(Td=1.0 / sp) * d.q_heads * (nope + vd + 2 * kvl) * a)
    lat_tok = (kvl + rope) * kvb
    flops = (2 * d.q_heads * (qk + vd)) * vec(**{P_att: 1.0 / sp}) \
        + (2 * d.q_heads * (2 * kvl + rope)) * vec(**{Cr_att: 1.0 / sp})
    # read prefix + chunk, read decode ctx, write new
    kv = lat_tok * vec(**{K_att: 1.0 / sp, C_att: 1.0 / sp, "T": 1.0 / sp})
    act = vec(T=1.0 / sp) * d.q_heads * (qk + vd) * a + vec(**{K_att: 1.0 / sp}) * d.q_heads * (nope + vd) * a
    b.layer("attention", all_layers, dt_att, flops, 0.0, 0.0, kv=kv, act=act)
    if m.index_topk:
        _indexer_op(m, b.layer, all_layers, sp, wb, dt_w, a)
    p_o = d.q_heads * vd * h
    b.layer("o_proj", all_layers, dt_w, 2 * p_o * tok_att, p_o * wb, p_o * wb,
            act=tok_att * (d.q_heads * vd + h) * a)


def _gqa_attention(b: _Ops, m: ModelArch, d, wdtype: dict[str, str], wb: float, kvb: float, a: float) -> None:
    """Grouped-query attention: qkv_proj, attention (full and sliding-window layers apart), o_proj."""
    h, sp, hd = m.hidden_size, d.att_split, m.head_dim
    all_layers = tuple(range(m.num_layers))
    lin_ids = tuple(i for i in all_layers if m.is_linear_layer(i))
    full_ids = tuple(i for i in all_layers if not m.is_sliding_layer(i) and not m.is_linear_layer(i))
    slide_ids = tuple(i for i in all_layers if m.is_sliding_layer(i))
    att_ids = full_ids + slide_ids if lin_ids else all_layers  # layers with softmax attention (KV cache)
    tok_att = vec(T=1.0 / sp)  # tokens a chip feeds to attention
    dt_w, dt_att = wdtype["attn"], wdtype["attn_math"]
    gate = d.q_heads if m.attn_output_gate else 0.0  # gated attention: q_proj also emits the output gate
    p_qkv = h * (d.q_heads + gate + 2 * d.kv_heads) * hd
    bias = (d.q_heads + 2 * d.kv_heads) * hd * B16 if m.attention_bias else 0.0
    qkn = 2 * hd * B16 if m.qk_norm else 0.0
    if m.qk_norm and m.qk_norm_per_layer:  # MiniMax: one norm over all (local) heads
        qkn = (d.q_heads + d.kv_heads) * hd * B16
    b.layer("qkv_proj", att_ids, dt_w, 2 * p_qkv * tok_att, p_qkv * wb + bias + qkn, p_qkv * wb + bias + qkn,
            act=tok_att * (h + (d.q_heads + gate + 2 * d.kv_heads) * hd) * a)
    per_tok = 2 * d.kv_heads * hd * kvb
    sink = 2 * d.q_heads * tok_att if m.attention_sinks else vec()
    sink_w = d.q_heads * B16 if m.attention_sinks else 0.0
    groups = ((full_ids, "", "P", "K", "C", "Cr"), (slide_ids, "_sliding", "Pw", "Kw", "Cw", "Cwr"))
    for ids, sfx, P, K, C, Cr in groups:
        if not ids:
            continue
        flops = 4 * hd * d.q_heads * vec(**{P: 1.0 / sp, Cr: 1.0 / sp}) + sink
        kv = per_tok * vec(**{K: 1.0 / sp, C: 1.0 / sp, "T": 1.0 / sp})
        act = 2 * d.q_heads * hd * a * tok_att
        b.layer("attention" + sfx, ids, dt_att, flops, sink_w, sink_w, kv=kv, act=act)
    p_o = d.q_heads * hd * h
    o_bias = getattr(m, "attn_o_bias", m.attention_bias and m.family == "gpt_oss")
    obias = h * B16 if o_bias else 0.0
    b.layer("o_proj", att_ids, dt_w, 2 * p_o * tok_att, p_o * wb + obias, p_o * wb + obias,
            act=tok_att * (d.q_heads * hd + h) * a)


def _mlp_and_moe(b: _Ops, m: ModelArch, ep: int, dp_attention: bool, wbytes: dict[str, float],
                 wdtype: dict[str, str], a: float, tok_att: np.ndarray, expert_slots: int | None = None) -> None:
    """Dense MLP layers, and MoE layers: router, routed experts (EP-balanced or busiest rank), shared experts,
    and their collectives."""
    tp, h = b.tp, m.hidden_size
    all_layers = tuple(range(m.num_layers))
    T = vec(T=1.0)
    dense_ids = tuple(i for i in all_layers if not m.is_moe_layer(i))
    moe_ids = tuple(i for i in all_layers if m.is_moe_layer(i))
    mlp_coll = "tp_allgather_rs" if dp_attention else "tp_allreduce"
    if dense_ids:
        inter = m.intermediate_size / tp
        p = 3 * h * inter
        bias = (2 * inter + h) * B16 if m.mlp_bias else 0.0
        b.layer("mlp", dense_ids, wdtype["mlp"], 2 * p * T, p * wbytes["mlp"] + bias, p * wbytes["mlp"] + bias,
                act=T * (2 * h + 6 * inter) * a)
        b.net("mlp_allreduce", len(dense_ids), mlp_coll, vec(T=h * a))
    if not moe_ids:
        return
    E, k = m.num_experts, m.experts_per_token
    S = expert_slots or E  # slots: E, or padded to a multiple of ep with redundant experts
    p_r = h * E
    rbias = E * B16 if m.router_bias else 0.0
    b.layer("moe_router", moe_ids, wdtype["bf16"], 2 * p_r * tok_att, p_r * B16 + rbias, p_r * B16 + rbias,
            act=tok_att * (h * a + E * 4))
    im = m.moe_intermediate_size
    p_e = 3 * h * im  # one expert
    ebias = (2 * im + h) * B16 if m.mlp_bias else 0.0
    e_bytes = p_e * wbytes["experts"] + ebias
    # experts split over ep ranks, each expert split tp/ep ways: a chip handles T*k/ep (token, expert)
    # pairs on im*ep/tp of the intermediate; it reads the touched experts among its S/ep slots (balanced
    # routing; a redundant copy is touched as often as the expert it copies, so the touched share is U)
    flops = 2 * p_e * k / tp * T
    w_read = vec(U=S * e_bytes / tp)
    act = vec(T=k / ep) * (2 * h + 6 * im * ep / tp) * a
    n = len(moe_ids)
    moe = OpSpec("moe_experts", "work", n, wdtype["experts"], tp, flops * n,
                 {"W": w_read * n, "A": act * n}, stored=S * e_bytes / tp, layer_ids=moe_ids)
    if ep > 1:  # the busiest EP rank sets the time (see Routing): U -> Ue, T -> Tm
        moe.time_flops = vec(Tm=2 * p_e * k / tp) * n
        moe.time_bytes = {"W": vec(Ue=S * e_bytes / tp) * n,
                          "A": vec(Tm=k / ep) * (2 * h + 6 * im * ep / tp) * a * n}
    b.ops.append(moe)
    if m.num_shared_experts:
        isz = (m.shared_expert_intermediate_size or im) * m.num_shared_experts / tp
        p_s = 3 * h * isz
        ws = p_s * wbytes["shared"] + (h * B16 if m.shared_expert_gate else 0.0)
        b.layer("moe_shared", moe_ids, wdtype["shared"], 2 * p_s * T, ws, ws, act=T * (2 * h + 6 * isz) * a)
    if dp_attention and ep > 1:
        # DeepEP-style: each rank sends its T/tp tokens x k copies to expert owners (a fraction 1-1/ep
        # leaves the rank; each expert is split tp/ep ways), and receives the results back (combine)
        msg = vec(T=k * h * a / tp * (1 - 1 / ep) * (tp / ep))
        b.net("moe_dispatch", n, "ep_alltoall", msg)
        b.net("moe_combine", n, "ep_alltoall", msg)
    else:
        b.net("moe_allreduce", n, mlp_coll, vec(T=h * a))


def _norms_and_head(b: _Ops, m: ModelArch, wdtype: dict[str, str], a: float, sp: float, hb: float = B16) -> None:
    """Per-layer norms and residuals, the final norm, the LM head, the logits gather and sampling (``hb``: bytes
    per element of the norm and LM-head weights)."""
    tp, h = b.tp, m.hidden_size
    b.layer("norms_residual", tuple(range(m.num_layers)), "", vec(T=(2 * 4 + 2) * h / sp), 2 * h * hb, 2 * h * hb,
            act=vec(T=10 * h * a / sp))
    p_lm = m.vocab_size * h / tp
    b.ops.append(OpSpec("final_norm", "work", 0, "", tp, vec(T=4 * h), {"W": vec(one=h * hb), "A": vec(T=2 * h * a)},
                        stored=h * hb, stage="last"))
    b.ops.append(OpSpec("lm_head", "work", 0, wdtype["bf16"], tp, vec(S=2 * p_lm),
                        {"W": vec(one=p_lm * hb), "A": vec(S=h * a + m.vocab_size / tp * 4)},
                        stored=0.0 if m.tie_word_embeddings else p_lm * hb, stage="last"))
    b.net("logits_gather", 1, "tp_allgather", vec(S=m.vocab_size * 4))
    b.ops.append(OpSpec("sampling", "work", 0, "", 1, vec(S=5 * m.vocab_size), {"A": vec(S=2 * m.vocab_size * 4)},
                        stage="last"))


def _mtp_input_ops(b: _Ops, m: ModelArch, d: Dims, wdtype: dict[str, str], a: float, hb: float,
                   dp_attention: bool) -> None:
    """The input of a multi-token-prediction module (DeepSeek-V3 ``num_nextn_predict_layers``): RMSNorm of the
    next token's embedding (``enorm``) and of the target's last hidden state (``hnorm``), concatenated and
    projected 2h -> h by ``eh_proj`` (16-bit weights, like the LM head: the checkpoint does not quantize it).
    TensorRT-LLM's ``DeepseekV3MTP`` splits ``eh_proj`` row-parallel over the tensor-parallel ranks with an
    all-reduce of its output, and replicates it under attention data parallelism; priced that way."""
    h, sp, sh = m.hidden_size, d.att_split, d.att_shard
    tok = vec(T=1.0 / sp)
    b.ops.append(OpSpec("mtp_norms", "work", 0, "", b.tp, vec(T=2 * 4 * h / sp), {"W": vec(one=2 * h * hb),
                        "A": tok * 4 * h * a}, stored=2 * h * hb, stage="last"))
    p_eh = 2 * h * h / sh
    b.ops.append(OpSpec("mtp_eh_proj", "work", 0, wdtype["bf16"], b.tp, 2 * p_eh * tok,
                        {"W": vec(one=p_eh * hb), "A": tok * (2 * h / sh + h) * a}, stored=p_eh * hb, stage="last"))
    if not dp_attention:
        b.net("mtp_eh_allreduce", 1, "tp_allreduce", vec(T=h * a))
