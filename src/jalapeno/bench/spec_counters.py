"""Speculative-decoding counters of the server under test: ``/metrics`` scraped before and after a ``jalapeno
bench`` run (vLLM's names: ``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``, ``..._num_accepted_tokens``,
``..._num_accepted_tokens_per_pos{position}``; Jalapeño's ``jalapeno:spec_decode_num_draft_requests`` when
present), turned into the run's acceptance: the ``spec_decode`` entry of the result JSON, which ``jalapeno
simulate --acceptance FILE`` reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from jalapeno.speculative.proposer import acceptance_chain

_PREFIX = "vllm:spec_decode_"
_SCALARS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
    "jalapeno:spec_decode_num_draft_requests": "num_draft_requests",
}


@dataclass
class SpecCounters:
    """One scrape of the counters (absent ones stay None / empty)."""

    values: dict[str, float] = field(default_factory=dict)
    per_pos: dict[int, float] = field(default_factory=dict)


def parse_spec_counters(text: str) -> SpecCounters | None:
    """The speculative counters in a Prometheus exposition ``text``; None when the server exposes none."""
    from prometheus_client.parser import text_string_to_metric_families

    out = SpecCounters()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            base = s.name[: -len("_total")] if s.name.endswith("_total") else s.name
            if base in _SCALARS:
                out.values[_SCALARS[base]] = s.value
            elif base == _PREFIX + "num_accepted_tokens_per_pos" and "position" in s.labels:
                out.per_pos[int(s.labels["position"])] = s.value
    return out if "num_drafts" in out.values else None


def fetch_metrics_text(base_url: str, api_key: str | None = None) -> str | None:
    """The text of the server's ``/metrics`` (next to ``/v1``); None without httpx / prometheus_client, or when the
    server has no such endpoint."""
    try:
        import httpx
        import prometheus_client.parser  # noqa: F401 - the text parser
    except ImportError:
        return None
    root = base_url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(root + "/metrics", headers=headers, timeout=10)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    return r.text


def scrape_spec_counters(base_url: str, api_key: str | None = None) -> SpecCounters | None:
    """GET the server's ``/metrics`` (next to ``/v1``); None when it has no such endpoint or no counters."""
    text = fetch_metrics_text(base_url, api_key)
    return None if text is None else parse_spec_counters(text)


def spec_decode_delta(before: SpecCounters | None, after: SpecCounters | None) -> dict | None:
    """The run's acceptance from two scrapes (the counters' increase): counts, the acceptance rate, vLLM's
    per-position acceptance (accepted at position j / drafts), the simulator's chain a_1..a_K and the draft
    rate (drafts / asks, when the server counts asks). None when a scrape is missing or nothing was drafted."""
    if before is None or after is None:
        return None
    d = {k: after.values.get(k, 0.0) - before.values.get(k, 0.0) for k in after.values}
    drafts = int(round(d.get("num_drafts", 0)))
    if drafts <= 0:
        return None
    k = max(after.per_pos) + 1 if after.per_pos else 0
    per_pos = [int(round(after.per_pos.get(j, 0.0) - before.per_pos.get(j, 0.0))) for j in range(k)]
    tokens, accepted = int(round(d.get("num_draft_tokens", 0))), int(round(d.get("num_accepted_tokens", 0)))
    out = {
        "num_speculative_tokens": k,
        "num_drafts": drafts,
        "num_draft_tokens": tokens,
        "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": per_pos,
        "acceptance_rate": accepted / tokens if tokens else 0.0,
        "acceptance_per_pos": [n / drafts for n in per_pos],
        "acceptance_chain": acceptance_chain(drafts, per_pos),
        "mean_acceptance_length": 1 + accepted / drafts,
    }
    if "num_draft_requests" in d and d["num_draft_requests"] > 0:
        out["num_draft_requests"] = int(round(d["num_draft_requests"]))
        out["draft_rate"] = drafts / d["num_draft_requests"]
    return out
