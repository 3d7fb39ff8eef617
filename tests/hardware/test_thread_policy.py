"""The OpenMP thread policy: chosen from measurements, recorded by the probe, read back and applied by the entry
points only where the user set nothing, and kept out of vLLM's processes by the compare benchmark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jalapeno.errors import ConfigError
from jalapeno.hardware import probe as pr
from jalapeno.hardware import threads as th
from jalapeno.hardware.catalog import load_spec_file

PASSIVE, PASSIVE_PIN, ACTIVE, ACTIVE_PIN = th.CANDIDATES


def test_candidates_and_their_environment() -> None:
    assert [p.label for p in th.CANDIDATES] == ["passive-unpinned", "passive-pinned", "active-unpinned",
                                               "active-pinned"]
    assert PASSIVE == th.DEFAULT_POLICY
    assert PASSIVE.env([0, 1]) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert ACTIVE_PIN.env([2, 3, 5]) == {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000",
                                        "GOMP_CPU_AFFINITY": "2 3 5"}  # a bounded spin, then sleep
    assert th.ThreadPolicy.from_label("active-pinned") == ACTIVE_PIN
    with pytest.raises(ConfigError, match="unknown thread policy"):
        th.ThreadPolicy.from_label("spin")


def test_choice_is_the_lowest_geometric_mean_of_decode_and_prefill() -> None:
    # hand numbers, geometric means sqrt(d*p): passive 10 (5*20), passive-pinned ~9.80 (4*24),
    # active ~9.49 (3*30), active-pinned 10 (10*10)
    times = {PASSIVE: (5.0, 20.0), PASSIVE_PIN: (4.0, 24.0), ACTIVE: (3.0, 30.0), ACTIVE_PIN: (10.0, 10.0)}
    assert th.choose_thread_policy(times) is ACTIVE
    # a busy machine where spinning loses both phases keeps the default
    assert th.choose_thread_policy({PASSIVE: (1.0, 1.0), ACTIVE: (1.5, 1.2), ACTIVE_PIN: (1.4, 1.1)}) == PASSIVE
    # an exact tie goes to the earlier candidate (the default first)
    assert th.choose_thread_policy({ACTIVE: (2.0, 8.0), PASSIVE: (4.0, 4.0)}) == PASSIVE
    with pytest.raises(ConfigError, match="no thread policy was measured"):
        th.choose_thread_policy({ACTIVE: (0.0, 1.0)})


def test_candidates_alternate_and_the_best_of_each_is_kept() -> None:
    calls: list[str] = []
    fake = {PASSIVE: [(3.0, 9.0), (2.0, 10.0)], PASSIVE_PIN: [(4.0, 4.0), (5.0, 3.0)],
            ACTIVE: [(1.0, 50.0), (9.0, 9.0)], ACTIVE_PIN: [(7.0, 7.0), (6.0, 8.0)]}

    def run(policy: th.ThreadPolicy, quick: bool, timeout: float) -> tuple[float, float]:
        calls.append(policy.label)
        return fake[policy][sum(1 for c in calls if c == policy.label) - 1]

    best = th.measure_thread_policies(False, rounds=2, run=run)
    assert calls == [p.label for p in th.CANDIDATES] * 2  # rounds alternate the candidates
    assert best == {PASSIVE: (2.0, 9.0), PASSIVE_PIN: (4.0, 3.0), ACTIVE: (1.0, 9.0), ACTIVE_PIN: (6.0, 7.0)}


def _probe_with_policies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy_s: dict) -> Path:
    monkeypatch.setattr(pr, "matmul_shapes", lambda quick: {"decode-1": (1, 64, 256), "prefill-512": (32, 64, 64)})
    res = pr.ProbeResult("cpu", "test cpu", 1.0)
    pr.measure_bandwidth(res, 4, 0.01)
    pr.measure_matmul(res, True, 0.01)
    res.fused_step_s, res.torch_step_s = {1: 0.01, 8: 0.02}, {1: 0.03, 8: 0.01}
    res.thread_policy_s = policy_s
    return pr.write_chip(res, tmp_path, "local", "jalapeno hardware probe --quick")


def test_policy_is_read_back_from_the_probe_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _probe_with_policies(tmp_path, monkeypatch, {"passive-unpinned": (0.004, 0.20),
                                                         "active-pinned": (0.003, 0.18),
                                                         "active-unpinned": (0.0035, 0.19)})
    tp = load_spec_file(path).execution.thread_policy
    assert (tp.wait, tp.pinned, tp.status) == ("ACTIVE", True, "measured")
    assert "active-pinned 3.00/180.0" in tp.note  # the measurements behind the choice, in ms
    policy, source = th.recorded_policy(tmp_path)
    assert policy == ACTIVE_PIN and "jalapeno hardware probe --quick" in source


def test_no_probe_or_an_old_probe_means_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert th.recorded_policy(tmp_path)[0] == th.DEFAULT_POLICY  # never probed
    _probe_with_policies(tmp_path, monkeypatch, {})  # probed before thread policies were measured
    policy, source = th.recorded_policy(tmp_path)
    assert policy == th.DEFAULT_POLICY and "no measured thread policy" in source


def test_policy_is_applied_only_when_the_user_set_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _probe_with_policies(tmp_path, monkeypatch, {"passive-unpinned": (2.0, 2.0), "active-pinned": (1.0, 1.0)})
    cores = " ".join(map(str, th.usable_cores()))
    env: dict[str, str] = {"PATH": "/bin"}
    line = th.apply_thread_policy(env, tmp_path, loaded=lambda: False)
    assert env == {"PATH": "/bin", "OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000", "GOMP_CPU_AFFINITY": cores}
    assert line.startswith("thread policy: active-pinned (measured")
    # any one policy variable of the user's: nothing is touched
    for user in ({"OMP_WAIT_POLICY": "PASSIVE"}, {"OMP_PROC_BIND": "close"}, {"GOMP_CPU_AFFINITY": "1"}):
        env = dict(user)
        line = th.apply_thread_policy(env, tmp_path, loaded=lambda: False)
        assert env == user and "set in the environment" in line
    # torch already loaded: OpenMP has read its settings; nothing is set, and the line says so
    env = {}
    assert "already loaded" in th.apply_thread_policy(env, tmp_path, loaded=lambda: True) and env == {}


def test_a_fresh_process_gets_the_recorded_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end in a real interpreter, through the CLI's hook for `jalapeno generate`: the policy is set before
    torch loads (torch is never imported here); a CUDA run is left alone."""
    _probe_with_policies(tmp_path, monkeypatch, {"passive-unpinned": (2.0, 2.0), "active-unpinned": (1.0, 1.0)})
    code = ("import json, os, sys; from jalapeno.cli import _apply_thread_policy; "
            "_apply_thread_policy(sys.argv[1:]); print(json.dumps([os.environ.get('OMP_WAIT_POLICY'), "
            "'torch' in sys.modules]))")
    env = {k: v for k, v in os.environ.items() if k not in th.POLICY_VARS}
    env["JALAPENO_CACHE"] = str(tmp_path)
    (tmp_path / "hardware").mkdir()
    (tmp_path / "local.yaml").rename(tmp_path / "hardware" / "local.yaml")
    def run(*argv: str) -> tuple[list, str]:
        out = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout), out.stderr

    (wait, torch_loaded), _ = run("generate", "--max-tokens", "4")
    assert wait == "ACTIVE" and not torch_loaded
    assert run("generate", "--device", "cuda")[0] == [None, False]
    assert run("simulate", "--model", "x")[0] == [None, False]


def test_the_compare_benchmark_keeps_our_policy_out_of_vllm() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    vc = pytest.importorskip("vllm_cpu_compare")
    ours = {"PATH": "/bin", "HOME": "/root", "PYTHONPATH": "/work/src", "OMP_WAIT_POLICY": "ACTIVE",
            "GOMP_CPU_AFFINITY": "0 1", "OMP_PROC_BIND": "true", "OMP_NUM_THREADS": "2"}
    env = vc.vllm_env(ours, {})
    assert env == {"PATH": "/bin", "HOME": "/root"}
    assert not set(env) & set(th.POLICY_VARS)
    # what the user asks for vLLM explicitly still reaches it
    assert vc.vllm_env(ours, {"OMP_WAIT_POLICY": "PASSIVE"})["OMP_WAIT_POLICY"] == "PASSIVE"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_the_compare_benchmark_reads_each_vllm_process_env() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    vc = pytest.importorskip("vllm_cpu_compare")
    env = {**vc.vllm_env(dict(os.environ), {}), "GOMP_CPU_AFFINITY": "0"}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env, start_new_session=True)
    try:
        seen = vc.group_omp_env(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert [p["pid"] for p in seen] == [proc.pid]
    assert seen[0]["omp_env"].get("GOMP_CPU_AFFINITY") == "0" and "OMP_WAIT_POLICY" not in seen[0]["omp_env"]


def test_a_server_keeps_the_default_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`jalapeno serve` shares its cores with its event loop and clients: a spinning / pinned policy measured on an
    engine alone is not applied there (measured: served TPOT 2.4x worse under it), unless the user sets one."""
    _probe_with_policies(tmp_path, monkeypatch, {"passive-unpinned": (2.0, 2.0), "active-pinned": (1.0, 1.0)})
    env: dict[str, str] = {}
    line = th.apply_thread_policy(env, tmp_path, loaded=lambda: False, serving=True)
    assert env == th.DEFAULT_POLICY.env(th.usable_cores()) and "default for a server" in line
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    th.apply_thread_policy(env, tmp_path, loaded=lambda: False, serving=True)
    assert env == {"OMP_WAIT_POLICY": "ACTIVE"}  # the user's choice stands


def _idle_cpu_after_parallel_work(env: dict[str, str]) -> float:
    """CPU seconds a fresh torch process burns in 1 s of sleep right after OpenMP-parallel work."""
    import subprocess
    import sys

    code = ("import time, torch; torch.set_num_threads(2); x = torch.ones(4_000_000)\n"
            "for _ in range(20): x.mul_(1.0)\n"
            "t = time.process_time(); time.sleep(1.0); print(time.process_time() - t)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return float(out.stdout.strip().splitlines()[-1])


def test_an_idle_engine_under_the_active_policy_stops_spinning() -> None:
    """The ACTIVE candidate spins a bounded count, then sleeps: an idle process under it uses (almost) no CPU,
    where OMP_WAIT_POLICY=ACTIVE alone keeps its workers spinning on the cores another program needs."""
    import os

    if len(th.usable_cores()) < 2:
        pytest.skip("needs two cores for a second OpenMP worker")
    base = {k: v for k, v in os.environ.items() if k not in th.POLICY_VARS}
    forever = _idle_cpu_after_parallel_work({**base, "OMP_WAIT_POLICY": "ACTIVE"})
    bounded = _idle_cpu_after_parallel_work({**base, **ACTIVE.env(th.usable_cores())})
    # A spinning worker gets what the other programs leave it (about 1 CPU s quiet, less on a loaded box), so the
    # check is relative: the bounded spin burns a small fraction of what the unbounded one does.
    assert forever > 0.1, (bounded, forever)
    assert bounded < max(0.05, forever / 4), (bounded, forever)
