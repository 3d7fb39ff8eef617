"""Reliability figures of the server (docs/reliability.md). Loopback only; every loop is bounded; stops by itself.

    python benchmarks/reliability.py                 # all parts, prints a Markdown report
    python benchmarks/reliability.py --quick         # smaller counts (a smoke run, ~1 min)
    python benchmarks/reliability.py --out docs/reliability-figures.md

Parts (each against a fresh `jalapeno serve` subprocess on 127.0.0.1, so RSS is the server's alone):
  hostile   malformed / oversized / unsupported requests: statuses, 5xx, whether the server survived
  streams   256 concurrent streams at real-time pace: lost or duplicated tokens, client ITL minus engine ITL
  aborts    2,000 streams cut after their first chunk: KV blocks in use and RSS afterwards
  soak      5,000 requests (64 in flight): errors, p99 E2E, RSS growth
  stall     a 50 MB body and a 5 MB prompt sent while 8 streams run: the longest gap those streams saw
  sigterm   SIGTERM with 64 open streams: seconds to exit, exit code, how each stream ended
  torch     the real backend (tiny random Llama + an in-memory BPE tokenizer): a 5 MB prompt's stall, and a
            request with temperature 1e-38 beside others (in-process server; needs the torch extra)
The sim parts serve llama-3.1-8b on a simulated H100 (``--backend sim``), the same app and engine as any backend.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

MODEL = "llama-3.1-8b"
HOST = "127.0.0.1"


# ------------------------------------------------------------------------------------------------------------
# a server subprocess
# ------------------------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *extra: str, time_scale: float = 0.0) -> None:
        self.port = _free_port()
        self.url = f"http://{HOST}:{self.port}"
        code = "import sys; from jalapeno.cli import main; main(sys.argv[1:])"
        args = ["serve", "--backend", "sim", "--hardware", "h100", "--model", MODEL, "--host", HOST,
                "--port", str(self.port), "--time-scale", str(time_scale), "--log-level", "critical", *extra]
        self.proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + self.proc.stderr.read().decode()[-2000:])
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not start in 120 s")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=10).json()

    def alive(self) -> bool:
        try:
            return self.proc.poll() is None and httpx.get(self.url + "/health", timeout=10).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.returncode


async def stream(
    client: httpx.AsyncClient, url: str, max_tokens: int, prompt: str = "a b c", times: list[float] | None = None
) -> dict:
    """One streamed completion: its texts, the gaps between chunks, and how it ended (``times``: a list that
    receives each chunk's arrival time as it comes, kept if the stream is cancelled)."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    texts: list[str] = []
    times = [] if times is None else times
    end = "eof"
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        if r.status_code != 200:
            return {"status": r.status_code, "texts": [], "gaps": [], "end": "status"}
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                end = "error event + [DONE]" if end == "error" else "done"
                break
            obj = json.loads(data)
            if "error" in obj:
                end = "error"
                continue
            times.append(time.perf_counter())
            texts.extend(obj["choices"][0]["text"].split())
    per_token = (times[-1] - times[0]) / (len(texts) - 1) if len(texts) > 1 else None
    return {"status": 200, "texts": texts, "gaps": np.diff(times).tolist(), "end": end, "per_token_s": per_token,
            "times": times}


def _max_gap_ms(streams_times: list[list[float]], lo: float, hi: float) -> float:
    """Longest wait for a next chunk, over the streams, among the gaps that overlap [lo, hi]."""
    worst = 0.0
    for ts in streams_times:
        for a, b in zip(ts, ts[1:]):
            if b >= lo and a <= hi:
                worst = max(worst, b - a)
    return worst * 1000


# ------------------------------------------------------------------------------------------------------------
# parts
# ------------------------------------------------------------------------------------------------------------
def _hostile_cases() -> list[tuple[str, str, dict]]:
    """(name, path, httpx.request kwargs)."""
    j = "application/json"
    ok = {"model": MODEL, "prompt": "a b", "max_tokens": 2}

    def body(**kw):
        return {"json": {**ok, **kw}}

    def raw(b: bytes):
        return {"content": b, "headers": {"content-type": j}}

    cases = [
        ("truncated JSON", raw(b'{"model": "x", "prompt": ')),
        ("empty body", raw(b"")),
        ("JSON array", {"json": [1, 2]}),
        ("JSON string", {"json": "hello"}),
        ("nested 100,000 deep", raw(b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")),
        ("lone surrogate in model", raw(b'{"model": "\\ud800", "prompt": "a"}')),
        ("lone surrogate in prompt", raw(b'{"model": "' + MODEL.encode() + b'", "prompt": "a\\udfff"}')),
        ("invalid UTF-8", raw(b'{"model": "\xff\xfe", "prompt": "a"}')),
        ("NaN temperature", raw(b'{"model": "' + MODEL.encode() + b'", "prompt": "a", "temperature": NaN}')),
        ("Infinity top_p", raw(b'{"model": "' + MODEL.encode() + b'", "prompt": "a", "top_p": Infinity}')),
        ("max_tokens string", body(max_tokens="4")),
        ("max_tokens true", body(max_tokens=True)),
        ("max_tokens 0", body(max_tokens=0)),
        ("max_tokens -5", body(max_tokens=-5)),
        ("max_tokens 10^30", body(max_tokens=10**30)),
        ("max_tokens float", body(max_tokens=4.5)),
        ("temperature -1", body(temperature=-1)),
        ("temperature 3", body(temperature=3)),
        ("top_p 0", body(top_p=0)),
        ("top_p 2", body(top_p=2)),
        ("n 2", body(n=2)),
        ("best_of 3", body(best_of=3)),
        ("tools", body(tools=[{"type": "function", "function": {"name": "f"}}])),
        ("tool_choice auto", body(tool_choice="auto")),
        ("response_format json", body(response_format={"type": "json_object"})),
        ("logprobs 5", body(logprobs=5)),
        ("echo", body(echo=True)),
        ("17 stop strings", body(stop=[f"s{i}" for i in range(17)])),
        ("empty stop string", body(stop=[""])),
        ("stop_token_ids strings", body(stop_token_ids=["a"])),
        ("empty token prompt", body(prompt=[])),
        ("negative token id", body(prompt=[-1])),
        ("token id beyond vocab", body(prompt=[10**12])),
        ("two prompts", body(prompt=["a", "b"])),
        ("prompt null", body(prompt=None)),
        ("prompt object", body(prompt={"a": 1})),
        ("prompt over context", body(prompt=[5] * 200_000)),
        ("prompt + max_tokens over context", body(max_tokens=131_071)),
        ("unknown model", body(model="gpt-9")),
        ("model number", body(model=123)),
        ("seed string", body(seed="x")),
        ("stream string", body(stream="yes")),
        ("stream_options list", body(stream=True, stream_options=[1])),
        ("wrong content-type", {"content": b"prompt=a", "headers": {"content-type": "application/x-www-form-urlencoded"}}),
        ("body 50 MB", raw(b'{"model": "x", "prompt": "' + b"a " * (25 * 2**20) + b'"}')),
        ("Host header evil.example", {"json": ok, "headers": {"host": "evil.example"}}),
    ]
    out = [(n, "/v1/completions", kw) for n, kw in cases]
    chat = [
        ("chat: no messages", {"json": {"model": MODEL, "messages": []}}),
        ("chat: role wizard", {"json": {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}}),
        ("chat: image part", {"json": {"model": MODEL, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x"}}]}]}}),
        ("chat: content number", {"json": {"model": MODEL, "messages": [{"role": "user", "content": 5}]}}),
        ("chat: lone surrogate", raw(b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", '
                                     b'"content": "\\ud83d"}]}')),
    ]
    out += [(n, "/v1/chat/completions", kw) for n, kw in chat]
    out += [("GET on a POST route", "/v1/completions", {"method": "GET"}),
            ("unknown path", "/v2/everything", {"method": "GET"}),
            ("/openapi.json", "/openapi.json", {"method": "GET"})]
    return out


def _raw_socket_cases(port: int) -> list[tuple[str, str]]:
    """Protocol-level abuse over a raw socket: (name, what the server did)."""
    results = []

    def exchange(name: str, payload: bytes, wait: float = 15.0) -> None:
        with socket.create_connection((HOST, port)) as s:
            s.sendall(payload)
            s.settimeout(wait)
            t0 = time.monotonic()
            data = b""
            try:
                while chunk := s.recv(65536):
                    data += chunk
                    if b"\r\n\r\n" in data and not data.startswith(b"HTTP/1.1 1"):
                        break
            except (TimeoutError, socket.timeout):
                results.append((name, f"no answer in {wait:.0f} s"))
                return
            except ConnectionResetError:
                pass
            line = data.split(b"\r\n", 1)[0].decode(errors="replace") or f"closed after {time.monotonic() - t0:.1f} s"
            results.append((name, line))

    exchange("garbage request line", b"GARBAGE\r\n\r\n")
    exchange("headers never finished", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    exchange("body shorter than Content-Length",
             b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100\r\n\r\n{")
    exchange("URL of 64 kB", b"GET /v1/" + b"a" * 65536 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    exchange("header of 1 MB", b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 2**20 + b"\r\n\r\n")
    return results


def part_hostile() -> dict:
    srv = Server("--header-timeout", "2", "--body-timeout", "2")
    rows = []
    try:
        with httpx.Client(timeout=60) as c:
            for name, path, kw in _hostile_cases():
                method = kw.pop("method", "POST")
                try:
                    r = c.request(method, srv.url + path, **kw)
                    reason = ""
                    try:
                        reason = r.json()["error"]["message"]
                    except Exception:  # noqa: BLE001 - plain-text bodies (uvicorn's own 4xx)
                        reason = r.text[:80]
                    rows.append((name, r.status_code, reason))
                except httpx.HTTPError as exc:  # the server closed the connection instead of answering
                    rows.append((name, 0, f"connection closed ({type(exc).__name__})"))
        raw = _raw_socket_cases(srv.port)
        alive = srv.alive()
    finally:
        srv.stop()
    n4 = sum(1 for _, s, m in rows if 400 <= s < 500 and m)
    n5 = sum(1 for _, s, _ in rows if s >= 500)
    return {"rows": rows, "raw": raw, "tried": len(rows) + len(raw), "http_4xx_with_reason": n4, "http_5xx": n5,
            "server_alive_after": alive}


def part_streams(n: int = 256, max_tokens: int = 64) -> dict:
    srv = Server("--max-num-seqs", "512", time_scale=1.0)
    try:
        async def main():
            limits = httpx.Limits(max_connections=n + 8, max_keepalive_connections=n + 8)
            async with httpx.AsyncClient(limits=limits, timeout=300) as c:
                return await asyncio.gather(*(stream(c, srv.url, max_tokens, f"req {i} " + "w " * (i % 50))
                                              for i in range(n)))
        res = asyncio.run(main())
        text = httpx.get(srv.url + "/metrics").text
    finally:
        srv.stop()
    lost = dup = bad = 0
    for r in res:
        toks = r["texts"]
        want = [f"tok{k}" for k in range(max_tokens)]
        if r["status"] != 200 or r["end"] != "done":
            bad += 1
        dup += len(toks) - len(set(toks))
        lost += len(set(want) - set(toks))
    gaps = np.concatenate([np.asarray(r["gaps"]) for r in res if r["gaps"]]) * 1000
    per_token = np.array([r["per_token_s"] for r in res if r.get("per_token_s")]) * 1000
    itl_sum = itl_count = 0.0
    for line in text.splitlines():
        if line.startswith("jalapeno_inter_token_latency_seconds_sum"):
            itl_sum = float(line.split()[1])
        elif line.startswith("jalapeno_inter_token_latency_seconds_count"):
            itl_count = float(line.split()[1])
    engine_itl = itl_sum / itl_count * 1000 if itl_count else float("nan")
    return {"streams": n, "tokens_each": max_tokens, "failed": bad, "lost": lost, "duplicated": dup,
            "client_ms_per_token": float(per_token.mean()), "client_p99_chunk_gap_ms": float(np.percentile(gaps, 99)),
            "engine_mean_itl_ms": engine_itl, "added_ms_per_token": float(per_token.mean()) - engine_itl}


def part_aborts(n: int = 2000, batch: int = 100) -> dict:
    srv = Server(time_scale=1.0)
    try:
        rss0 = srv.rss_mb()

        async def cut(c: httpx.AsyncClient) -> None:
            body = {"model": MODEL, "prompt": "a b c d", "max_tokens": 5000, "stream": True, "ignore_eos": True}
            async with c.stream("POST", srv.url + "/v1/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        return  # leave after the first chunk: the connection closes mid-stream

        async def main():
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=batch)) as c:
                for _ in range(n // batch):
                    await asyncio.gather(*(cut(c) for _ in range(batch)))
        t0 = time.monotonic()
        asyncio.run(main())
        elapsed = time.monotonic() - t0
        deadline = time.monotonic() + 30
        while srv.health()["kv_blocks_used"] and time.monotonic() < deadline:
            time.sleep(0.2)
        h = srv.health()
        rss1 = srv.rss_mb()
    finally:
        srv.stop()
    return {"aborted": n, "seconds": elapsed, "kv_blocks_used_after": h["kv_blocks_used"],
            "running_after": h["running"], "waiting_after": h["waiting"], "rss_before_mb": rss0,
            "rss_after_mb": rss1}


def part_soak(n: int = 5000, in_flight: int = 64, max_tokens: int = 32) -> dict:
    srv = Server(time_scale=0.0)
    try:
        async def one(c, sem, i, e2e, errs):
            async with sem:
                t0 = time.perf_counter()
                why = ""
                try:
                    r = await c.post(srv.url + "/v1/completions", json={
                        "model": MODEL, "prompt": f"soak {i} " + "w " * (i % 64), "max_tokens": max_tokens,
                        "ignore_eos": True})
                    ok = r.status_code == 200 and r.json()["usage"]["completion_tokens"] == max_tokens
                    why = f"HTTP {r.status_code}"
                except httpx.HTTPError as exc:
                    ok, why = False, f"{type(exc).__name__}: {exc}"[:120]
                if ok:
                    e2e.append(time.perf_counter() - t0)
                else:
                    errs.append(why)

        async def run(k, offset):
            sem = asyncio.Semaphore(in_flight)
            e2e, errs = [], []
            async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=in_flight)) as c:
                await asyncio.gather(*(one(c, sem, offset + i, e2e, errs) for i in range(k)))
            return e2e, errs

        asyncio.run(run(200, 0))  # warm-up: imports, allocator, first connections
        rss0 = srv.rss_mb()
        t0 = time.monotonic()
        e2e, errs = asyncio.run(run(n, 1000))
        elapsed = time.monotonic() - t0
        rss1 = srv.rss_mb()
    finally:
        srv.stop()
    return {"requests": n, "in_flight": in_flight, "tokens": n * max_tokens, "errors": len(errs),
            "error_kinds": sorted(set(errs)),
            "seconds": elapsed, "p50_e2e_ms": float(np.percentile(e2e, 50) * 1000),
            "p99_e2e_ms": float(np.percentile(e2e, 99) * 1000), "rss_before_mb": rss0, "rss_after_mb": rss1}


async def _stall_while(url: str, send) -> dict:
    """Longest chunk gap of 8 background streams while ``send()`` (a blocking call, run in a thread) runs."""
    async with httpx.AsyncClient(timeout=120) as c:
        times: list[list[float]] = [[] for _ in range(8)]
        bg = [asyncio.ensure_future(stream(c, url, 100_000, times=ts)) for ts in times]
        await asyncio.sleep(3.0)
        t0 = time.perf_counter()
        status = await asyncio.to_thread(send)
        t1 = time.perf_counter()
        for t in bg:
            t.cancel()
        await asyncio.gather(*bg, return_exceptions=True)
    return {"status": status, "send_s": t1 - t0, "max_gap_ms_during": _max_gap_ms(times, t0, t1),
            "max_gap_ms_in_the_2_s_before": _max_gap_ms(times, t0 - 2.0, t0)}


def _post_from_another_process(url: str, body_expr: str) -> int:
    """POST a body built by ``body_expr`` (Python, bytes) from a separate process, so building and sending it
    cannot stall this process's stream readers (the GIL); returns the status."""
    code = (f"import httpx; b = {body_expr}; "
            f"print(httpx.post({url!r}, content=b, headers={{'content-type': 'application/json'}}, "
            f"timeout=120).status_code)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    return int(out.stdout.strip() or 0)


def part_stall() -> dict:
    srv = Server(time_scale=1.0)
    url = srv.url + "/v1/completions"
    try:
        rss0 = srv.rss_mb()
        big = f"b'{{\"model\": \"{MODEL}\", \"prompt\": \"' + b'a ' * (25 * 2**20) + b'\"}}'"
        five = f"b'{{\"model\": \"{MODEL}\", \"max_tokens\": 1, \"prompt\": \"' + b'word ' * 2**20 + b'\"}}'"
        out = {"body_50mb": asyncio.run(_stall_while(srv.url, lambda: _post_from_another_process(url, big))),
               "prompt_5mb": asyncio.run(_stall_while(srv.url, lambda: _post_from_another_process(url, five)))}
        out["rss_before_mb"], out["rss_after_mb"] = rss0, srv.rss_mb()
    finally:
        srv.stop()
    return out


def part_sigterm(n: int = 64) -> dict:
    srv = Server("--shutdown-timeout", "2", time_scale=1.0)

    async def main():
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=n + 4)) as c:
            tasks = [asyncio.ensure_future(stream(c, srv.url, 100_000)) for _ in range(n)]
            await asyncio.sleep(2.0)
            t0 = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            res = await asyncio.gather(*tasks, return_exceptions=True)
            rc = await asyncio.to_thread(srv.proc.wait, 60)
            return res, rc, time.monotonic() - t0

    try:
        res, rc, secs = asyncio.run(main())
    finally:
        srv.stop()
    ends: dict[str, int] = {}
    for r in res:
        key = r["end"] if isinstance(r, dict) else type(r).__name__
        ends[key] = ends.get(key, 0) + 1
    return {"streams": n, "seconds_to_exit": secs, "exit_code": rc, "stream_endings": ends}


def part_torch() -> dict:
    """The real backend in-process: a tiny random Llama and an in-memory byte-level BPE tokenizer."""
    import tempfile

    import tokenizers
    import torch
    import transformers

    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.engine import Engine, EngineConfig
    from jalapeno.server.app import ServerConfig, build_app
    from jalapeno.server.background import BackgroundServer
    from jalapeno.server.codec import TokenizerCodec

    torch.manual_seed(0)
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 50, tokenizers.trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()))
    hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    cfg = transformers.LlamaConfig(vocab_size=len(hf_tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    with tempfile.TemporaryDirectory() as d:
        transformers.LlamaForCausalLM(cfg).eval().save_pretrained(d)
        engine = Engine(TorchBackend(d, num_blocks=512), EngineConfig(block_size=16, max_model_len=2048))
        scfg = ServerConfig(model_name="tiny", max_model_len=2048, vocab_size=len(hf_tok), time_scale=0.0)
        with BackgroundServer(build_app(engine, TokenizerCodec(hf_tok), scfg)) as srv:
            async def main():
                async with httpx.AsyncClient(timeout=120) as c:
                    mk = lambda **kw: c.post(srv.url + "/v1/completions", json={  # noqa: E731
                        "model": "tiny", "prompt": "the quick brown fox", "max_tokens": 64, "ignore_eos": True, **kw})
                    rs = await asyncio.gather(mk(temperature=1e-38), mk(top_p=1e-46, temperature=1.0),
                                              mk(), mk(temperature=0.8, seed=1))
                    return [r.status_code for r in rs]
            statuses = asyncio.run(main())
            five = "b'{\"model\": \"tiny\", \"max_tokens\": 1, \"prompt\": \"' + b'fox ' * (5 * 2**18) + b'\"}'"

            async def bg_stall():
                async with httpx.AsyncClient(timeout=120) as c:
                    body = {"model": "tiny", "prompt": "the fox", "max_tokens": 1900, "stream": True,
                            "ignore_eos": True}
                    times: list[float] = []

                    async def run():
                        async with c.stream("POST", srv.url + "/v1/completions", json=body) as r:
                            async for line in r.aiter_lines():
                                if line.startswith("data: {"):
                                    times.append(time.perf_counter())
                    t = asyncio.ensure_future(run())
                    await asyncio.sleep(3.0)
                    s0 = time.perf_counter()
                    status = await asyncio.to_thread(_post_from_another_process, srv.url + "/v1/completions", five)
                    s1 = time.perf_counter()
                    t.cancel()
                    await asyncio.gather(t, return_exceptions=True)
                    return {"status": status, "send_s": s1 - s0, "max_gap_ms_during": _max_gap_ms([times], s0, s1),
                            "max_gap_ms_in_the_2_s_before": _max_gap_ms([times], s0 - 2.0, s0)}
            stall = asyncio.run(bg_stall())
    return {"tiny_temperature_and_top_p_statuses": statuses, "prompt_5mb": stall}


# ------------------------------------------------------------------------------------------------------------
def report(res: dict, args) -> str:
    load = os.getloadavg()
    head = [
        "# Reliability figures (generated by benchmarks/reliability.py)",
        "",
        f"Machine: {platform.node()} — {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; load average at the end {load[0]:.1f} / {load[1]:.1f} / "
        f"{load[2]:.1f} (1/5/15 min){' — quick run' if args.quick else ''}.",
        "",
    ]
    lines = head
    if "hostile" in res:
        h = res["hostile"]
        lines += [f"## Hostile requests: {h['tried']} tried, {h['http_4xx_with_reason']} answered 4xx with a "
                  f"reason, {h['http_5xx']} 5xx, server alive after: {h['server_alive_after']}", "",
                  "| request | status | reason |", "|---|---|---|"]
        lines += [f"| {n} | {s} | {m[:90].replace('|', '/')} |" for n, s, m in h["rows"]]
        lines += [f"| {n} (raw socket) | — | {what} |" for n, what in h["raw"]]
        lines.append("")
    for key, title in (("streams", "Concurrent streams (time-scale 1)"), ("aborts", "Aborted streams"),
                       ("soak", "Soak (time-scale 0)"), ("stall", "Large requests while 8 streams run"),
                       ("sigterm", "SIGTERM with open streams"), ("torch", "Real backend (tiny random Llama)")):
        if key in res:
            lines += [f"## {title}", "", "```", json.dumps(res[key], indent=2, default=float), "```", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parts", default="hostile,streams,aborts,soak,stall,sigterm,torch")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    q = args.quick
    runs = {
        "hostile": part_hostile,
        "streams": lambda: part_streams(32 if q else 256),
        "aborts": lambda: part_aborts(200 if q else 2000),
        "soak": lambda: part_soak(500 if q else 5000),
        "stall": part_stall,
        "sigterm": lambda: part_sigterm(16 if q else 64),
        "torch": part_torch,
    }
    res = {}
    for name in args.parts.split(","):
        t0 = time.monotonic()
        res[name] = runs[name]()
        print(f"{name}: {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    text = report(res, args)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
