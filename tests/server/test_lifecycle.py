"""Bounded shutdown, stalled-connection timeouts, Host-header check and exposure defaults of `jalapeno serve`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from jalapeno.cli import main
from jalapeno.server.app import build_app
from jalapeno.server.build import build_sim
from jalapeno.server.commands import hosts_for
from jalapeno.server.lifecycle import make_server

MODEL = "llama-3.1-8b"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(port: int, *extra: str) -> subprocess.Popen:
    code = "import sys; from jalapeno.cli import main; main(sys.argv[1:])"
    args = ["serve", "--backend", "sim", "--hardware", "h100", "--model", MODEL, "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args, "--log-level", "warning", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start: " + proc.stderr.read().decode())


def _long_stream(port: int):
    """An open stream of a request that would take minutes at the simulated chip's real speed."""
    body = {"model": MODEL, "prompt": "a b c", "max_tokens": 100_000, "stream": True, "ignore_eos": True}
    client = httpx.Client(timeout=30)
    resp = client.send(client.build_request("POST", f"http://127.0.0.1:{port}/v1/completions", json=body), stream=True)
    lines = resp.iter_lines()
    assert next(lines).startswith("data: ")  # it is streaming
    return client, resp, lines


def test_sigterm_ends_open_streams_with_an_error_event_and_exits_0():
    port = _free_port()
    proc = _serve(port, "--time-scale", "1", "--shutdown-timeout", "1")
    try:
        client, resp, lines = _long_stream(port)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        events = [ln[6:] for ln in lines if ln.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["error"]["code"] == "shutdown"
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - t0 < 10
        client.close()
    finally:
        proc.kill()


def test_second_sigterm_exits_at_once():
    port = _free_port()
    proc = _serve(port, "--time-scale", "1", "--shutdown-timeout", "60")
    try:
        client, resp, lines = _long_stream(port)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None  # still draining (60 s allowed)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        assert time.monotonic() - t0 < 10
        client.close()
    finally:
        proc.kill()


@pytest.fixture(scope="module")
def timed_server():
    """In-process server with short header/body/keep-alive timeouts and the loopback Host check."""
    import threading

    served = build_sim("h100", MODEL, time_scale=0.0)
    served.config.body_timeout_s = 0.5
    served.config.allowed_hosts = hosts_for("127.0.0.1", None)
    app = build_app(served.engine, served.codec, served.config)
    port = _free_port()
    srv = make_server(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        drain=app.state.jalapeno.drain,
        header_timeout_s=0.5,
        keep_alive_s=0.5,
    )
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    while not srv.started:
        time.sleep(0.01)
    yield port
    srv.should_exit = True
    th.join(10)


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True  # EOF: the server closed it
    except (TimeoutError, socket.timeout):
        return False
    except ConnectionResetError:
        return True


def test_stalled_headers_are_closed(timed_server):
    with socket.create_connection(("127.0.0.1", timed_server)) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the rest
        t0 = time.monotonic()
        assert _closed_within(s, 5)
        assert time.monotonic() - t0 < 3


def test_idle_keep_alive_is_closed(timed_server):
    with socket.create_connection(("127.0.0.1", timed_server)) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        assert _closed_within(s, 5)


def test_stalled_body_is_408(timed_server):
    with socket.create_connection(("127.0.0.1", timed_server)) as s:
        head = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        s.sendall(head + b"Content-Length: 100\r\n\r\n" + b'{"model": ')
        s.settimeout(5)
        reply = b""
        while b"}}" not in reply and (part := s.recv(4096)):
            reply += part
        assert reply.startswith(b"HTTP/1.1 408") and b"request_timeout" in reply


@pytest.mark.parametrize("host, ok", [("127.0.0.1", True), ("localhost:8000", True), ("evil.example", False)])
def test_host_header_check(timed_server, host, ok):
    r = httpx.get(f"http://127.0.0.1:{timed_server}/v1/models", headers={"host": host})
    assert (r.status_code == 200) is ok
    if not ok:
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_host"


def test_no_openapi_schema(timed_server):
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert httpx.get(f"http://127.0.0.1:{timed_server}{path}").status_code == 404


def test_hosts_for():
    assert hosts_for("127.0.0.1", None) == {"127.0.0.1", "localhost", "::1"}
    assert hosts_for("0.0.0.0", None) is None
    assert hosts_for("10.1.2.3", None) == {"10.1.2.3"}
    assert hosts_for("127.0.0.1", "a.example, B.example") == {"a.example", "b.example"}
    assert hosts_for("127.0.0.1", "*") is None


@pytest.mark.parametrize("key", ["", "  "])
def test_empty_api_key_is_refused(key, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--backend", "sim", "--hardware", "h100", "--model", MODEL, "--api-key", key])
    assert exc.value.code == 2 and "--api-key" in capsys.readouterr().err


def test_readme_sim_example_serves_without_model():
    """README: `jalapeno serve --backend sim --hardware jalapeno` (no --model) serves the default model."""
    port = _free_port()
    code = "import sys; from jalapeno.cli import main; main(sys.argv[1:])"
    args = ["serve", "--backend", "sim", "--hardware", "jalapeno", "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
                time.sleep(0.1)
        assert r.json()["data"][0]["id"] == "llama-3.1-8b"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
