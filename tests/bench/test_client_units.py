"""SSE chunk classification, payloads and power integration."""

from __future__ import annotations

import pytest

from jalapeno.bench.client import BenchRequest, EndpointConfig, build_payload, chunk_has_content
from jalapeno.bench.power import PowerSampler, integrate_energy
from jalapeno.bench.loadgen import LoadSpec, is_loopback
from jalapeno.errors import ConfigError


@pytest.mark.parametrize(
    "chunk, endpoint, expected",
    [
        ({"choices": [{"text": " hi"}]}, "completions", True),
        ({"choices": [{"text": ""}]}, "completions", False),
        ({"choices": [{"text": "", "token_ids": [5]}]}, "completions", True),
        ({"choices": [], "usage": {"completion_tokens": 3}}, "completions", False),
        ({"choices": [{"delta": {"role": "assistant", "content": ""}}]}, "chat", False),  # role-only chunk
        ({"choices": [{"delta": {"role": "assistant", "content": "x"}}]}, "chat", True),
        ({"choices": [{"delta": {"reasoning_content": "think"}}]}, "chat", True),
        ({"choices": [{"delta": {}, "finish_reason": "stop"}]}, "chat", False),
    ],
)
def test_content_chunks(chunk, endpoint, expected):
    assert chunk_has_content(chunk, endpoint) is expected


def test_payload_mirrors_vllm_client():
    cfg = EndpointConfig("http://127.0.0.1:8000", "m", "completions")
    body = build_payload(cfg, BenchRequest([1, 2, 3], 3, 7))
    assert body["prompt"] == [1, 2, 3] and body["max_tokens"] == 7 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    chat = build_payload(EndpointConfig("http://h/v1", "m", "chat", ignore_eos=False), BenchRequest("hi", 1, 2))
    assert chat["messages"] == [{"role": "user", "content": "hi"}] and "ignore_eos" not in chat
    assert EndpointConfig("http://h/v1/", "m", "chat").url == "http://h/v1/chat/completions"
    assert EndpointConfig("http://h:1", "m").url == "http://h:1/v1/completions"


def test_trapezoid_energy_by_hand():
    # 100 W for 1 s, then a ramp 100 -> 300 W over 2 s: 100 + 400 = 500 J
    assert integrate_energy([(0.0, 100.0), (1.0, 100.0), (3.0, 300.0)]) == pytest.approx(500.0)
    assert integrate_energy([(0.0, 50.0)]) == 0.0


def test_power_sampler_never_invents_power():
    s = PowerSampler(interval_s=0.01)
    with s:
        pass
    if not s.available:
        assert s.reason and s.reading is not None and s.reading.energy_j is None
        assert s.reading.avg_power_w is None
    else:  # pragma: no cover - only on machines with NVIDIA GPUs
        assert s.reading.energy_j is not None and s.reading.energy_j >= 0


def test_load_spec_validation_and_loopback():
    with pytest.raises(ConfigError):
        LoadSpec(concurrency=2, request_rate=5.0).validate()
    with pytest.raises(ConfigError):
        LoadSpec(request_rate=0.0).validate()
    assert LoadSpec(concurrency=3).in_flight_cap == 3 and LoadSpec(max_concurrency=2).in_flight_cap == 2
    assert is_loopback("http://localhost:8000") and is_loopback("http://127.0.0.1")
    assert not is_loopback("https://api.example.com/v1")


def test_power_sampler_integrates_nvml_readings(monkeypatch):
    """No GPU here: a stand-in ``pynvml`` with two boards drawing a constant 150 W and 50 W. The sampler must
    report their sum as the average power."""
    import sys
    import time
    import types

    fake = types.ModuleType("pynvml")
    watts = {0: 150_000, 1: 50_000}  # NVML reports milliwatts
    fake.nvmlInit = lambda: None
    fake.nvmlShutdown = lambda: None
    fake.nvmlDeviceGetCount = lambda: 2
    fake.nvmlDeviceGetHandleByIndex = lambda i: i
    fake.nvmlDeviceGetName = lambda h: b"Fake GPU"
    fake.nvmlDeviceGetPowerUsage = lambda h: watts[h]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    s = PowerSampler(interval_s=0.01)
    assert s.available and s.gpus == ["Fake GPU", "Fake GPU"]
    with s:
        time.sleep(0.1)
    r = s.reading
    assert r.num_samples >= 2
    # samples run from the thread's start to the exit of the block: close to the whole duration
    assert r.avg_power_w == pytest.approx(200.0, rel=0.1)
    assert r.energy_j <= 200.0 * r.duration_s + 1e-9
