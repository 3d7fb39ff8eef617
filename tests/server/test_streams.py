"""Many concurrent streams: no lost or duplicated tokens; aborted streams free their KV blocks."""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest

MODEL = "llama-3.1-8b"


async def _stream(client: httpx.AsyncClient, url: str, n: int, i: int) -> tuple[int, list[str], dict | None]:
    body = {
        "model": MODEL,
        "prompt": f"request {i} " + "w " * (i % 17),
        "max_tokens": n,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    texts: list[str] = []
    usage = None
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            obj = json.loads(data)
            if obj["choices"]:
                texts.append(obj["choices"][0]["text"])
            if obj.get("usage"):
                usage = obj["usage"]
    return i, texts, usage


def test_64_concurrent_streams_lose_and_duplicate_nothing(sim_server):
    served, srv = sim_server
    lengths = [5 + (i * 7) % 40 for i in range(64)]

    async def main():
        limits = httpx.Limits(max_connections=80)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:
            return await asyncio.gather(*(_stream(client, srv.url, n, i) for i, n in enumerate(lengths)))

    results = asyncio.run(main())
    assert len(results) == 64
    for i, texts, usage in results:
        n = lengths[i]
        toks = re.findall(r" tok(\d+)", "".join(texts))
        assert [int(t) for t in toks] == list(range(n)), f"stream {i} got {toks}"
        assert usage["completion_tokens"] == n
    st = served.engine.stats
    assert st.running == 0 and st.waiting == 0 and st.kv_blocks_used == 0


def _metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics").text
    m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    assert m, f"{name} missing from /metrics"
    return float(m.group(1))


@pytest.fixture(scope="module")
def slow_server(make_sim_server):
    # real-time pacing: a 2000-token stream lasts seconds, so every abort happens mid-stream
    return make_sim_server(1.0)


def test_200_aborted_streams_free_every_kv_block(slow_server):
    served, srv = slow_server
    body = {"model": MODEL, "prompt": "x " * 300, "max_tokens": 2000, "stream": True, "ignore_eos": True}
    seen_in_use = []

    async def one(client: httpx.AsyncClient) -> int:
        got = 0
        async with client.stream("POST", srv.url + "/v1/completions", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data: ") and '"text"' in line:
                    got += 1
                    if got == 1:  # this stream is running: its KV blocks are in use
                        seen_in_use.append(served.engine.stats.kv_blocks_used)
                    if got == 3:
                        break  # leaving the block closes the connection mid-stream
        return got

    async def main():
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=220), timeout=60) as client:
            return await asyncio.gather(*(one(client) for _ in range(200)))

    got = asyncio.run(main())
    assert got == [3] * 200
    assert len(seen_in_use) == 200 and min(seen_in_use) > 0  # the streams really held KV while running
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _metric(srv.url, "jalapeno_kv_blocks_used") == 0 and _metric(srv.url, "jalapeno_num_requests_running") == 0:
            break
        time.sleep(0.05)
    assert _metric(srv.url, "jalapeno_kv_blocks_used") == 0
    assert _metric(srv.url, "jalapeno_num_requests_running") == 0
    assert _metric(srv.url, "jalapeno_num_requests_waiting") == 0
    st = served.engine.stats
    assert st.kv_blocks_used == 0 and st.running == 0 and st.waiting == 0
    # and far fewer tokens were generated than the 200 × 2000 asked for
    assert st.tokens_generated < 200 * 2000 / 4


def test_metrics_endpoint_counts_tokens(sim_server):
    _, srv = sim_server
    before = _metric(srv.url, "jalapeno_generation_tokens_total")
    r = httpx.post(srv.url + "/v1/completions", json={"model": MODEL, "prompt": "a", "max_tokens": 9})
    assert r.json()["usage"]["completion_tokens"] == 9
    assert _metric(srv.url, "jalapeno_generation_tokens_total") == before + 9
    text = httpx.get(srv.url + "/metrics").text
    assert (
        "jalapeno_time_to_first_token_seconds_count" in text and "jalapeno_time_per_output_token_seconds_count" in text
    )
    assert _metric(srv.url, "jalapeno_kv_blocks_total") == served_total(srv)


def served_total(srv) -> float:
    return float(httpx.get(srv.url + "/health").json()["kv_blocks_total"])


def test_two_apps_have_separate_registries(make_sim_server):
    _, sa = make_sim_server(0.0)
    _, sb = make_sim_server(0.0)
    httpx.post(sa.url + "/v1/completions", json={"model": MODEL, "prompt": "a", "max_tokens": 4})
    assert _metric(sa.url, "jalapeno_generation_tokens_total") == 4
    assert _metric(sb.url, "jalapeno_generation_tokens_total") == 0


def test_non_streamed_request_whose_client_leaves_is_aborted(slow_server):
    served, srv = slow_server
    body = {"model": MODEL, "prompt": "x " * 50, "max_tokens": 3000, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(srv.url + "/v1/completions", json=body, timeout=httpx.Timeout(10, read=0.5))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and served.engine.stats.running + served.engine.stats.waiting:
        time.sleep(0.05)
    st = served.engine.stats
    assert st.running == 0 and st.waiting == 0 and st.kv_blocks_used == 0
    assert st.tokens_generated < 200 * 2000 / 4 + 3000  # stopped long before 3000 tokens


def test_timing_samples_are_streamed_not_kept(make_sim_server):
    """Per-token timing samples go into /metrics' histogram each step; the engine keeps none of them (memory
    must not grow with every token served). Gaps counted: every token after a request's first."""
    served, srv = make_sim_server(0.0)
    lengths = [3 + (i * 5) % 20 for i in range(12)]

    async def main():
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*(_stream(client, srv.url, n, i) for i, n in enumerate(lengths)))

    asyncio.run(main())
    vals, _ = served.engine.itl_samples()
    assert vals.size == 0
    text = httpx.get(srv.url + "/metrics").text
    count = float(re.search(r"^jalapeno_inter_token_latency_seconds_count (\S+)$", text, re.M).group(1))
    assert count == sum(n - 1 for n in lengths)


def test_a_client_that_never_reads_is_aborted_not_buffered(sim_server):
    """Back-pressure: an output queue nobody reads stops growing at the backlog bound; the request is aborted
    and its KV blocks freed. Checked on the engine's own queue (a socket would first fill kernel buffers)."""
    from jalapeno.engine.sequence import SamplingParams
    from jalapeno.server.async_engine import AsyncEngine, EngineError
    from jalapeno.server.build import build_sim

    served = build_sim("h100", MODEL, time_scale=0.0)
    aeng = AsyncEngine(served.engine, time_scale=0.0, max_backlog=50)

    async def main():
        aeng.start()
        try:
            _, q = aeng.submit(None, 8, SamplingParams(max_tokens=100_000, ignore_eos=True))
            deadline = time.monotonic() + 30
            while served.engine.has_unfinished() or served.engine.stats.num_steps == 0:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.1)
            items = [q.get_nowait() for _ in range(q.qsize())]
        finally:
            aeng.stop()
        return items

    items = asyncio.run(main())
    assert 50 <= len(items) <= 52 and isinstance(items[-1], EngineError) and "unread" in items[-1].message
    assert served.engine.block_manager.num_used == 0
