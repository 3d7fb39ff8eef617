"""Serving-framework profiles: a named framework's request overhead replaces the chip's generic one, and only
that: TTFT and E2E move by the difference, step times do not."""

import json
import math
import subprocess
import sys

import pytest

from jalapeno.sim.scenario import Scenario, run_scenario
from jalapeno.errors import ConfigError
from jalapeno.hardware import get_chip
from jalapeno.perf.frameworks import FRAMEWORKS, apply_framework, get_framework


def test_names_and_aliases_resolve_case_insensitively():
    assert get_framework("vLLM").key == "vllm"
    assert get_framework("TRT").key == "trt-llm"
    assert get_framework("tensorrt-llm").key == "trt-llm"
    for fw in FRAMEWORKS:
        assert fw.request_overhead_ms > 0 and ("CALIBRATED" in fw.source or "FITTED" in fw.source)
    # a disaggregated stack takes its engine's front end (a chip family's value for that engine included)
    eff = get_chip("b200").efficiency
    for stack in ("dynamo-sglang", "dynamo-trt", "mori-sglang", "sglang-disagg"):
        fw = get_framework(stack)
        assert fw.engine and apply_framework(eff, fw).request_overhead_ms == apply_framework(eff, fw.engine).request_overhead_ms


def test_unknown_framework_is_a_one_line_error_listing_the_choices():
    with pytest.raises(ConfigError) as e:
        get_framework("tgi")
    msg = str(e.value)
    assert "tgi" in msg and all(fw.key in msg for fw in FRAMEWORKS) and "\n" not in msg


def test_apply_framework_replaces_only_the_request_overhead():
    eff = get_chip("h200").efficiency
    assert apply_framework(eff, None) is eff
    new = apply_framework(eff, "sglang")
    # the chip's own fitted front end for the stack (H200: issue #13 step 7), else the global profile
    assert new.request_overhead_ms == eff.framework_overhead_ms.get("sglang", get_framework("sglang").request_overhead_ms)
    bare = eff.model_copy(update={"framework_overhead_ms": {}})
    assert apply_framework(bare, "sglang").request_overhead_ms == get_framework("sglang").request_overhead_ms
    assert new.model_dump(exclude={"request_overhead_ms"}) == eff.model_dump(exclude={"request_overhead_ms"})


def _lone_request(framework):
    # one request at a time: TTFT = front-end latency + its own prefill, nothing queues
    sc = Scenario(model="llama-3.1-8b", hardware="h100", isl=512, osl=64, concurrency=1, num_prompts=3,
                  random_range_ratio=1.0, framework=framework)
    return run_scenario(sc)


def test_a_framework_shifts_ttft_and_e2e_by_its_latency_difference_and_nothing_else():
    generic = _lone_request(None)
    eff = get_chip("h100").efficiency
    chip_ms = eff.request_overhead_ms
    for fw in FRAMEWORKS:
        m = _lone_request(fw.key)
        engine = get_framework(fw.engine) if fw.engine else fw
        d = eff.framework_overhead_ms.get(engine.key, engine.request_overhead_ms) - chip_ms
        assert math.isclose(m["median_ttft_ms"] - generic["median_ttft_ms"], d, abs_tol=1e-6), fw.key
        assert math.isclose(m["median_e2el_ms"] - generic["median_e2el_ms"], d, abs_tol=1e-6), fw.key
        assert math.isclose(m["median_tpot_ms"], generic["median_tpot_ms"], rel_tol=1e-12), fw.key


def test_cli_flag_and_bad_name():
    cmd = [sys.executable, "-m", "jalapeno.cli", "simulate", "--model", "llama-3.1-8b", "--hardware", "h100",
           "--isl", "256", "--osl", "16", "--concurrency", "1", "--num-prompts", "2", "--json"]
    ok = subprocess.run([*cmd, "--framework", "vllm"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["completed"] == 2
    bad = subprocess.run([*cmd, "--framework", "tgi"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "unknown serving framework 'tgi'" in bad.stderr and "Traceback" not in bad.stderr
