"""Prometheus metrics of one server app, in its own ``CollectorRegistry`` (never the global one, so several
apps — e.g. in tests — can live in one process)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,  # noqa: F401  (re-exported for the app)
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily

_LAT_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    40.0,
    80.0,
)


class ServerMetrics:
    """Gauges read live from the engine at scrape time; histograms and counters fed by the request handlers."""

    def __init__(self, stats: Callable[[], dict]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.running = Gauge("jalapeno_num_requests_running", "Requests in the running batch", registry=r)
        self.waiting = Gauge("jalapeno_num_requests_waiting", "Requests waiting to be scheduled", registry=r)
        self.kv_used = Gauge("jalapeno_kv_blocks_used", "KV-cache blocks in use", registry=r)
        self.kv_total = Gauge("jalapeno_kv_blocks_total", "KV-cache blocks available to the engine", registry=r)
        self.kv_block = Gauge("jalapeno_kv_block_size", "Tokens per KV-cache block", registry=r)
        for g, key in (
            (self.running, "running"),
            (self.waiting, "waiting"),
            (self.kv_used, "kv_blocks_used"),
            (self.kv_total, "kv_blocks_total"),
            (self.kv_block, "kv_block_size"),
        ):
            g.set_function(lambda key=key: float(stats().get(key, 0)))
        self.ttft = Histogram(
            "jalapeno_time_to_first_token_seconds", "Time to first token (s)", buckets=_LAT_BUCKETS, registry=r
        )
        self.tpot = Histogram(
            "jalapeno_time_per_output_token_seconds",
            "Time per output token after the first (s)",
            buckets=_LAT_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "jalapeno_inter_token_latency_seconds", "Gap between tokens of a request (s)", buckets=_LAT_BUCKETS, registry=r
        )
        self.generated = Counter("jalapeno_generation_tokens", "Generated tokens", registry=r)
        self.prompt = Counter("jalapeno_prompt_tokens", "Prompt tokens", registry=r)
        r.register(_SpecDecodeCollector(stats))
        self.requests = Counter(
            "jalapeno_requests_finished", "Finished requests by reason", ["finish_reason"], registry=r
        )

    def observe_request(
        self, prompt_tokens: int, output_tokens: int, ttft_s: float | None, e2e_s: float, finish_reason: str
    ) -> None:
        self.prompt.inc(prompt_tokens)
        self.generated.inc(output_tokens)
        self.requests.labels(finish_reason=finish_reason).inc()
        if ttft_s is not None:
            self.ttft.observe(ttft_s)
            if output_tokens > 1:
                self.tpot.observe((e2e_s - ttft_s) / (output_tokens - 1))

    def observe_itl(self, values, counts) -> None:
        """Inter-token gaps (s), each with how many tokens had it (one step's worth from the engine)."""
        observe = self.itl.observe
        for v, c in zip(values.tolist(), counts.tolist()):
            for _ in range(c):
                observe(v)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _SpecDecodeCollector:
    """Speculative-decoding counters under vLLM's names, read from the engine stats' ``spec_decode`` entry at
    scrape time (absent when the backend does not speculate)."""

    def __init__(self, stats: Callable[[], dict]) -> None:
        self._stats = stats

    def describe(self):
        return []

    def collect(self):
        spec = self._stats().get("spec_decode")
        if not spec:
            return
        for name, key, doc in (
            ("vllm:spec_decode_num_drafts", "num_drafts", "Verification steps with a draft"),
            ("vllm:spec_decode_num_draft_tokens", "num_draft_tokens", "Draft tokens proposed"),
            ("vllm:spec_decode_num_accepted_tokens", "num_accepted_tokens", "Draft tokens accepted"),
        ):
            yield CounterMetricFamily(name, doc, value=spec[key])
        if "num_draft_requests" in spec:  # no vLLM name: decode steps the adaptive policy let speculate
            yield CounterMetricFamily("jalapeno:spec_decode_num_draft_requests",
                                      "Decode steps that asked the proposer for a draft (k > 0)",
                                      value=spec["num_draft_requests"])
        per_pos = CounterMetricFamily(
            "vllm:spec_decode_num_accepted_tokens_per_pos", "Draft tokens accepted, by position", labels=["position"]
        )
        for j, n in enumerate(spec["num_accepted_tokens_per_pos"]):
            per_pos.add_metric([str(j)], n)
        yield per_pos
