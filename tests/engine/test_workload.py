"""Workload generators: InferenceX / vLLM length ranges, arrivals, traces."""

import json

import numpy as np
import pytest

from jalapeno.errors import ConfigError, SpecError
from jalapeno.workload import Workload, arrival_times, inferencex_workload, load_trace, sample_lengths


def test_inferencex_lengths_in_range_with_mean_near_0_9_L():
    i, o = sample_lengths(20000, 1024, 8192, 0.8, seed=0)
    assert i.min() >= int(0.8 * 1024) and i.max() <= 1024
    assert o.min() >= int(0.8 * 8192) and o.max() <= 8192
    assert abs(i.mean() / 1024 - 0.9) < 0.005 and abs(o.mean() / 8192 - 0.9) < 0.005
    assert i.min() == 819 and i.max() == 1024  # both ends reachable (integers of [floor(0.8 L), L])


def test_vllm_range_and_fixed_lengths():
    i, _ = sample_lengths(20000, 1000, 10, 0.5, mode="vllm", seed=1)
    assert i.min() == 500 and i.max() == 1500 and abs(i.mean() - 1000) < 10
    i, o = sample_lengths(50, 123, 45, 1.0)
    assert set(i) == {123} and set(o) == {45}


def test_lengths_are_seeded_and_deterministic():
    a = sample_lengths(100, 500, 500, seed=7)
    b = sample_lengths(100, 500, 500, seed=7)
    c = sample_lengths(100, 500, 500, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])


def test_arrivals_poisson_and_constant():
    t = arrival_times(20001, 10.0, seed=3)
    assert t[0] == 0.0 and np.all(np.diff(t) >= 0)
    gaps = np.diff(t)
    assert abs(gaps.mean() - 0.1) < 0.003 and abs(gaps.std() - 0.1) < 0.005  # exponential: std == mean
    c = arrival_times(5, 4.0, distribution="constant")
    assert np.allclose(c, [0, 0.25, 0.5, 0.75, 1.0])
    assert np.all(arrival_times(4, float("inf")) == 0)


def test_default_num_prompts_is_ten_times_concurrency():
    w = inferencex_workload(1024, 1024, concurrency=64)
    assert w.num_chains == 640 and w.closed_loop


def test_trace_csv_and_jsonl(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("input_len,output_len,arrival_s\n10,5,0.5\n20,6,0.1\n")
    i, o, t = load_trace(p)
    assert list(i) == [20, 10] and list(o) == [6, 5] and list(t) == [0.1, 0.5]  # sorted by arrival
    q = tmp_path / "t.jsonl"
    q.write_text(json.dumps({"input_len": 3, "output_len": 4}) + "\n")
    i, o, t = load_trace(q)
    assert list(i) == [3] and t is None
    bad = tmp_path / "b.csv"
    bad.write_text("prompt,output_len\n1,2\n")
    with pytest.raises(SpecError, match="input_len"):
        load_trace(bad)


@pytest.mark.parametrize(
    "kw",
    [dict(concurrency=0), dict(arrival_s=[0.0, 0.0], concurrency=2), dict(concurrency=2, chain_calls=3)],
)
def test_bad_workloads_are_config_errors(kw):
    with pytest.raises(ConfigError):
        Workload([1, 2], [1, 2], **kw)
