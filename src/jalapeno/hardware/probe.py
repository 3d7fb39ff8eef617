"""``jalapeno hardware probe``: measure the machine at hand and write it as a chip YAML (the local chip twin).

Microbenchmarks (torch on ``cpu`` or ``cuda``): memory read/copy bandwidth by thread count, matmul and
matrix-vector throughput per dtype at decode and prefill shapes, per-step and per-layer engine overheads of the
torch backend (short engine runs on tiny random models), cache sizes (``/sys`` on Linux), power when exposed
(RAPL ``/sys/class/powercap``, NVML), and the fused-vs-PyTorch decode crossover (CPU). Every number goes into
the YAML as a :class:`~jalapeno.hardware.schema.Fact` with status ``measured`` and the command and date as its
source. A measurement that cannot run here (too little memory for a size, no C compiler, no counters) is
shrunk or skipped with one line in ``notes``, never a crash.

Pure choice functions (:func:`choose_fused_max_batch`, :func:`choose_threads`) turn measurements into the
torch backend's execution choices; :func:`measured_execution` reads them back from a probed chip.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from jalapeno.errors import ConfigError
from jalapeno.hardware.catalog import LOCAL_KEY, default_probe_dir  # noqa: F401 (re-exported)
from jalapeno.hardware.schema import ChipSpec


# ---- execution choices from measurements (pure) ----------------------------------------------------------------


def choose_fused_max_batch(fused_s: Mapping[int, float], torch_s: Mapping[int, float]) -> int:
    """The fused kernel's crossover: the largest measured batch at which the fused step beat the PyTorch step
    (0: it never did, switch it off). The kernel's advantage shrinks as the batch grows (a batch amortises the
    weight reads PyTorch's GEMMs also amortise), so a win above a loss is taken as the truer reading. Inputs:
    seconds per decode step by batch size on this machine; batches measured on one path only are ignored."""
    common = set(fused_s) & set(torch_s)
    if not common:
        raise ConfigError("no batch size was measured on both decode paths; cannot choose the fused crossover")
    return max((b for b in common if fused_s[b] < torch_s[b]), default=0)


def choose_panel_min_rows(panels_s: Mapping[int, float], dot_s: Mapping[int, float]) -> int | None:
    """The fused kernel's switch from its dot-product tiles to its outer-product panel GEMMs: the smallest
    measured batch from which the panel step beat the dot-tile step at every larger measured batch (one past the
    largest when it never did; None when no batch was measured both ways). Inputs: seconds per decode step by
    batch with each GEMM kind on this machine."""
    common = sorted(set(panels_s) & set(dot_s))
    if not common:
        return None
    best = common[-1] + 1
    for b in reversed(common):
        if panels_s[b] >= dot_s[b]:
            break
        best = b
    return best


def choose_threads(bandwidth_by_threads: Mapping[int, float], tolerance: float = 0.03) -> int:
    """The fewest threads whose measured bandwidth is within ``tolerance`` of the best (decode is bandwidth
    bound; extra threads past saturation only add wake-ups on a shared machine)."""
    if not bandwidth_by_threads:
        raise ConfigError("no bandwidth measurement to choose a thread count from")
    best = max(bandwidth_by_threads.values())
    return min(t for t, bw in bandwidth_by_threads.items() if bw >= (1 - tolerance) * best)


@dataclass(frozen=True)
class ExecutionChoices:
    """The torch backend's execution choices for one machine, with where they came from."""

    fused_max_batch: int
    threads: int
    source: str
    panel_min_rows: int | None = None  # None: not measured (a probe from before the panel kernels)


def measured_execution(spec: ChipSpec) -> ExecutionChoices | None:
    """The execution choices a probed chip carries (None when it was not probed with the crossover)."""
    ex = spec.execution
    if ex is None or ex.fused_max_batch.value is None or ex.threads.value is None:
        return None
    panel = ex.panel_min_rows.value if ex.panel_min_rows is not None else None
    return ExecutionChoices(int(ex.fused_max_batch.value), int(ex.threads.value), ex.fused_max_batch.source,
                            None if panel is None else int(panel))


def local_execution(probe_dir: Path | None = None) -> ExecutionChoices | None:
    """The choices in the probed ``local.yaml`` (default probe dir), None when this machine was never probed."""
    from jalapeno.hardware.catalog import load_spec_file

    path = (probe_dir or default_probe_dir()) / f"{LOCAL_KEY}.yaml"
    return measured_execution(load_spec_file(path)) if path.is_file() else None


class PolicyTarget(Protocol):
    def set_decode_policy(self, policy: Any) -> None: ...


def apply_measured_choices(target: PolicyTarget, device: Any, probe_dir: Path | None = None) -> str:
    """On CPU, give ``target`` (a torch backend) the crossover and thread count ``jalapeno hardware probe``
    measured on this machine (its ``local.yaml``) instead of the built-in defaults; returns one line saying
    which were used."""
    import torch

    from jalapeno.backends.torch.runner import DecodePolicy

    if device.type != "cpu":
        return "execution choices: CUDA device, the fused CPU kernel does not apply"
    choices = local_execution(probe_dir)
    if choices is None:
        return (f"execution choices: defaults (fused crossover {DecodePolicy().fused_max_batch}, "
                f"{torch.get_num_threads()} threads); run `jalapeno hardware probe` to measure this machine's")
    panel = choices.panel_min_rows if choices.panel_min_rows is not None else DecodePolicy().panel_min_rows
    target.set_decode_policy(DecodePolicy(fused_max_batch=choices.fused_max_batch, panel_min_rows=panel))
    torch.set_num_threads(choices.threads)
    return (f"execution choices measured on this machine: fused crossover {choices.fused_max_batch}, "
            f"panel GEMMs from {panel} rows, {choices.threads} threads ({choices.source})")


# ---- measurements --------------------------------------------------------------------------------------------


#: one engine step of :func:`measure_engine_loop`: (prefill chunks as (tokens, cached prefix), decode rows, their
#: context keys in all (the new token's included), seconds)
EngineLoopStep = tuple[tuple[tuple[int, int], ...], int, int, float]


@dataclass
class ProbeResult:
    """Everything one probe measured (SI-ish units in the names)."""

    device: str
    device_name: str
    memory_gb: float
    read_gbps: dict[int, float] = field(default_factory=dict)  # by thread count
    copy_gbps: dict[int, float] = field(default_factory=dict)
    cache_read_gbps: float | None = None
    caches_kb: dict[str, int] = field(default_factory=dict)
    matmul_tflops: dict[str, dict[str, float]] = field(default_factory=dict)  # dtype -> shape label -> TFLOPS
    step_overhead_us: float | None = None
    layer_overhead_us: float | None = None
    seq_overhead_us: float | None = None
    fused_step_s: dict[int, float] = field(default_factory=dict)
    torch_step_s: dict[int, float] = field(default_factory=dict)
    dot_step_s: dict[int, float] = field(default_factory=dict)  # fused kernel with its dot-product tiles only
    #: bytes one batch-1 decode step of the crossover model reads (its weights, float32; tied embeddings once)
    #: and that model's layer count: with ``fused_step_s[1]`` they give the achieved fraction of the read bandwidth
    decode_bytes: float | None = None
    decode_layers: int = 0
    #: one prefill step of the crossover model: its FLOPs and median time (the compute-bound step the engine runs)
    prefill_flops: float | None = None
    prefill_step_s: float | None = None
    power_w: dict[str, float] = field(default_factory=dict)
    #: the engine's decode step of the crossover model by batch, then by keys per sequence (LONG_CONTEXTS), seconds:
    #: what attention over a long context costs (``efficiency.decode_attention_ns``)
    ctx_step_s: dict[int, dict[int, float]] = field(default_factory=dict)
    #: the same steps of a random-weight model of the served model's shape (SERVED_MODEL: its name and layers)
    served_ctx_step_s: dict[int, dict[int, float]] = field(default_factory=dict)
    #: the served-shape model's decode step at SERVED_SMALL_BATCHES batches, LONG_CONTEXTS[0] keys (seconds), timed in
    #: the same rounds and processes as ``served_ctx_step_s``
    served_small_step_s: dict[int, float] = field(default_factory=dict)
    served_model: str = ""
    served_layers: int = 0
    #: prefill steps of the served-shape model from an empty cache, by prompt tokens (seconds)
    served_prefill_s: dict[int, float] = field(default_factory=dict)
    #: the OpenMP thread policy the probe's own engine steps ran under (the one a server runs: the line says)
    thread_policy_line: str = ""
    #: prefill steps of the crossover model by prompt tokens: (FLOPs, seconds) (PREFILL_LENGTHS)
    prefill_s: dict[int, tuple[float, float]] = field(default_factory=dict)
    #: the crossover model's prefill chunks on the PyTorch attention path (MASKED_STEPS), timed in the same rounds as
    #: ``prefill_s``: (chunk tokens, cached prefix, decode rows beside it) -> seconds
    masked_prefill_s: dict[tuple[int, int, int], float] = field(default_factory=dict)
    #: the served-shape model's engine loop (:func:`measure_engine_loop`): every step as (prefill chunks as
    #: (tokens, cached prefix), decode rows, their context keys in all, seconds)
    engine_loop_steps: list[EngineLoopStep] = field(default_factory=list)
    #: every sample of the repeated timings (label -> seconds in round order), written beside the chip YAML
    samples: dict[str, list[float]] = field(default_factory=dict)
    #: TFLOPS of a GEMM with M rows at ROWS_KN (the dtype the torch backend runs here), by M
    rows_tflops: dict[int, float] = field(default_factory=dict)
    #: best (batch-1 decode step, prefill step) seconds per OpenMP thread policy label, each run in its own process
    thread_policy_s: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: the serving layer's latency per request, ms (send -> handed to the engine thread), timed by `calibrate --probe`
    #: (:func:`jalapeno.calibration.front_end.measure_front_end`: the probe itself imports no server)
    front_end_ms: float | None = None
    notes: list[str] = field(default_factory=list)


def _best_time(fn: Callable[[], Any], budget_s: float, sync: Callable[[], None], min_reps: int = 2) -> float:
    """Best wall time of ``fn``: a warm-up, then at least ``min_reps`` timed runs or as many as fit
    ``budget_s``. A warm-up alone longer than the budget is the answer (slow paths stay affordable)."""
    t0 = time.perf_counter()
    fn()
    sync()
    best = time.perf_counter() - t0
    if best > budget_s:
        return best
    spent, reps = 0.0, 0
    while (reps < min_reps or spent < budget_s) and reps < 200:
        t0 = time.perf_counter()
        fn()
        sync()
        dt = time.perf_counter() - t0
        best, spent, reps = min(best, dt), spent + dt, reps + 1
    return best


def _available_bytes(device: str) -> int:
    import torch

    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info()[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def _total_memory_gb(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_properties(0).total_memory / 1e9
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def _sync(device: str) -> Callable[[], None]:
    import torch

    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


def thread_counts() -> list[int]:
    """1, 2, 4, ... up to the usable cores (and the core count itself)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    counts, t = [], 1
    while t < cores:
        counts.append(t)
        t *= 2
    return [*counts, cores]


def measure_bandwidth(res: ProbeResult, size_mb: int, budget_s: float) -> None:
    """Read (sum) and copy bandwidth in GB/s, per thread count on CPU (one figure on CUDA). A copy counts
    read + write bytes. The buffer shrinks to fit half the free memory."""
    import torch

    dev, sync = res.device, _sync(res.device)
    want = size_mb * 2**20
    fit = _available_bytes(dev) // 6  # two buffers, leave most of the memory free
    if fit < want:
        res.notes.append(f"bandwidth: {size_mb} MiB buffers do not fit the free memory; used {fit >> 20} MiB")
        want = max(fit, 1 << 20)
    n = want // 4
    a = torch.rand(n, device=dev)
    b = torch.empty_like(a)
    threads = thread_counts() if dev == "cpu" else [0]
    old = torch.get_num_threads()
    try:
        for t in threads:
            if t:
                torch.set_num_threads(t)
            res.read_gbps[t] = n * 4 / _best_time(lambda: a.sum(), budget_s, sync) / 1e9
            res.copy_gbps[t] = 2 * n * 4 / _best_time(lambda: b.copy_(a), budget_s, sync) / 1e9
    finally:
        torch.set_num_threads(old)
    l2 = res.caches_kb.get("L2")
    if dev == "cpu" and l2:  # a buffer half the L2: the cache level's own read bandwidth
        small = a[: max(1024, l2 * 1024 // 8)]
        res.cache_read_gbps = small.numel() * 4 / _best_time(lambda: small.sum(), budget_s / 4, sync) / 1e9


#: matmul shapes (label -> (M, K, N)): one decode token, a 32-sequence decode step, a prefill chunk
def matmul_shapes(quick: bool) -> dict[str, tuple[int, int, int]]:
    k = 512 if quick else 2048
    return {"decode-1": (1, k, 4 * k), "decode-32": (32, k, 4 * k), "prefill-512": (512, k, k)}


def measure_matmul(res: ProbeResult, quick: bool, budget_s: float) -> None:
    """Dense throughput in TFLOPS (2·M·K·N per product) per dtype and shape; a dtype the device cannot
    multiply is skipped with a note."""
    import torch

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    sync = _sync(res.device)
    for name, dt in dtypes.items():
        for label, (m, k, n) in matmul_shapes(quick).items():
            try:
                x = torch.randn(m, k, device=res.device).to(dt)
                w = torch.randn(k, n, device=res.device).to(dt)
                s = _best_time(lambda: x @ w, budget_s, sync)
            except (RuntimeError, TypeError) as exc:  # e.g. a dtype with no kernel on this device
                res.notes.append(f"matmul {name} {label}: skipped ({str(exc).splitlines()[0]})")
                break
            res.matmul_tflops.setdefault(name, {})[label] = 2 * m * k * n / s / 1e12


#: GEMM rows of the small-M table (decode batches, speculative verification, prefill chunks) and the K x N they
#: are measured at: SmolLM2-135M's hidden x intermediate, the crossover model's MLP (3.5 MB in fp32, so the weights
#: sit in the last-level cache between runs: the time is the GEMM's own, the weight stream from DRAM is priced apart)
ROWS_TABLE = (1, 4, 8, 16, 32, 64, 128, 512)
ROWS_KN = (576, 1536)


def measure_matmul_rows(res: ProbeResult, budget_s: float) -> None:
    """TFLOPS of an M x K x N GEMM for every M in ROWS_TABLE (K x N = ROWS_KN) in the dtype the torch backend
    computes in on this device (float32 on CPU, bfloat16 on CUDA): how GEMM efficiency falls with fewer rows."""
    import torch

    dt = torch.float32 if res.device == "cpu" else torch.bfloat16
    k, n = ROWS_KN
    sync = _sync(res.device)
    w = torch.randn(k, n, device=res.device).to(dt)
    for m in ROWS_TABLE:
        x = torch.randn(m, k, device=res.device).to(dt)
        res.rows_tflops[m] = 2 * m * k * n / _best_time(lambda: x @ w, budget_s, sync) / 1e12


def read_caches() -> dict[str, int]:
    """Per-core data/unified cache sizes in KiB by level (L1d, L2, L3) from /sys; empty where not exposed."""
    out: dict[str, int] = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in sorted(base.glob("index*")) if base.is_dir() else []:
        try:
            kind = (idx / "type").read_text().strip()
            level = (idx / "level").read_text().strip()
            size = (idx / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        kb = int(size.rstrip("KMG")) * {"K": 1, "M": 1024, "G": 1 << 20}.get(size[-1], 1)
        out["L1d" if level == "1" else f"L{level}"] = kb
    return out


#: the front-end measurement's closed loop: requests in flight, requests in all, prompt tokens (token ids), tokens out
FRONT_END_LOOP = (8, 32, 480, 2)


def front_end_note(ms: float, loop: tuple[int, int, int, int] = FRONT_END_LOOP) -> str:
    """The chip notes' line of a measured front end (what ``calibrate --probe`` reads back)."""
    conc, n, prompt, _ = loop
    return (f"serving front end ms per request (send -> engine thread, median; {n} requests, {conc} in flight, "
            f"{prompt} prompt token ids, idle engine): {ms:.2f}")


def measure_power(res: ProbeResult, load: Callable[[], None]) -> None:
    """Package power from RAPL (CPU) or NVML (NVIDIA) while ``load`` runs, and the limit where exposed."""
    if res.device.startswith("cuda"):
        try:
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            res.power_w["tdp"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3
            load()
            res.power_w["loaded"] = pynvml.nvmlDeviceGetPowerUsage(h) / 1e3
        except Exception as exc:  # noqa: BLE001 - any NVML failure means: no power figure
            res.notes.append(f"power: NVML not available ({type(exc).__name__}); no power figures")
        return
    zone = Path("/sys/class/powercap/intel-rapl:0")
    try:
        e0, t0 = int((zone / "energy_uj").read_text()), time.perf_counter()
        load()
        e1, t1 = int((zone / "energy_uj").read_text()), time.perf_counter()
        if e1 > e0:
            res.power_w["loaded"] = (e1 - e0) / 1e6 / (t1 - t0)
        limit = zone / "constraint_0_max_power_uw"
        if limit.is_file():
            res.power_w["tdp"] = int(limit.read_text()) / 1e6
    except (OSError, ValueError):
        res.notes.append("power: RAPL counters not readable here (/sys/class/powercap); no power figures")


# ---- engine overheads and the decode crossover (torch backend, random weights) ----------------------------------


def llama_config(layers: int, hidden: int, inter: int, vocab: int) -> dict[str, Any]:
    """A Llama ``config.json`` of the given shape (64-wide heads, 3 query heads per KV head)."""
    heads = max(1, hidden // 64)
    return dict(model_type="llama", vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 3),
                max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=True)


def random_llama(layers: int, hidden: int, inter: int, vocab: int, device: str):
    """A random-weight Llama-shaped :class:`LoadedModel` (no checkpoint, no transformers)."""
    from jalapeno.backends.torch.models import torch_arch

    return random_model(torch_arch(llama_config(layers, hidden, inter, vocab), "probe-llama"), device)


def random_model(cfg: Any, device: str):
    """A random-weight :class:`LoadedModel` of the architecture ``cfg`` (a :class:`ModelArch` the torch backend
    builds; an unsupported family is a ConfigError from ``build_model``)."""
    import torch

    from jalapeno.backends.torch.loader import LoadedModel, materialize
    from jalapeno.backends.torch.models import build_model

    with torch.device("meta"):
        shapes = {k: v.shape for k, v in build_model(cfg).state_dict().items()
                  if k != "lm_head.weight" or not cfg.tie_word_embeddings}
    gen = torch.Generator().manual_seed(0)
    tensors = {k: torch.randn(s, generator=gen) * 0.02 for k, s in shapes.items()}
    model, _ = materialize(cfg, tensors, device, torch.float32)
    return LoadedModel(model, cfg, ("", None))


def _decode_step_s(layers: int, device: str, tokens: int, seqs: int = 1) -> float:
    """Seconds per decode step of a whole engine run (scheduler + backend + sampling) on a tiny random model:
    the difference of two runs that differ only in output length, over the extra steps."""
    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.engine.config import EngineConfig
    from jalapeno.engine.engine import Engine
    from jalapeno.engine.sequence import SamplingParams

    backend = TorchBackend(loaded=random_llama(layers, 64, 96, 128, device), device=device, num_blocks=64)

    def run(n: int) -> float:
        engine = Engine(backend, EngineConfig(block_size=16, max_num_seqs=max(4, seqs)))
        for i in range(seqs):
            engine.add_request(list(range(i, i + 8)), SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
        t0 = time.perf_counter()
        while engine.has_unfinished():
            engine.step()
        return time.perf_counter() - t0

    run(2)  # warm-up (kernel build, allocator)
    reps = 2 if tokens < 16 else 3
    short = min(run(2) for _ in range(reps))
    long = min(run(2 + tokens) for _ in range(reps))
    return max(long - short, 0.0) / tokens


def measure_overheads(res: ProbeResult, quick: bool) -> None:
    """Per-step, per-layer and per-sequence engine overhead (µs) from decode steps of tiny models with 1 and L
    layers and 1 and 4 sequences: their compute is negligible, so step time = step overhead + layers × layer
    overhead + sequences × sequence overhead."""
    deep = 4 if quick else 8
    tokens = 8 if quick else 48
    one, many = _decode_step_s(1, res.device, tokens), _decode_step_s(deep, res.device, tokens)
    four = _decode_step_s(1, res.device, tokens, seqs=4)
    layer = max(many - one, 0.0) / (deep - 1)
    seq = max(four - one, 0.0) / 3
    res.layer_overhead_us, res.seq_overhead_us = layer * 1e6, seq * 1e6
    res.step_overhead_us = max(one - layer - seq, 0.0) * 1e6


#: every batch up to 8 (thirteenth session): the fused kernel's dot tiles and panels trade places between 4 and 8,
#: and measured at 4 and 8 only the switch was put at 8, where SmolLM2's served steps at batch 5-7 took the dot
#: tiles at 1.2-1.3x the panels' time (docs/fidelity.md, "Thirteenth session")
SMALL_BATCHES = [1, 2, 3, 4, 5, 6, 7, 8]


def crossover_batches(quick: bool) -> list[int]:
    return [1, 4, 16] if quick else [*SMALL_BATCHES, 16, 24, 32, 48, 64, 96, 128]


def panel_batches(quick: bool) -> list[int]:
    return [1, 4, 16] if quick else [*SMALL_BATCHES, 16, 32]


#: hidden, intermediate and vocabulary size of the crossover model (SmolLM2-135M's layers, a small vocabulary)
CROSSOVER_MODEL = (576, 1536, 2048)
#: context tokens of each sequence in the crossover steps, the decoded token included
CROSSOVER_CTX = 65


def measure_crossover(res: ProbeResult, quick: bool, budget_s: float) -> None:
    """Seconds per pure decode step, fused C kernel vs PyTorch ops, by batch, on a random model with
    SmolLM2-135M's layer shapes (1 layer quick, 6 otherwise): a batch's paths alternate round by round
    (CROSSOVER_ROUNDS), each its median (:func:`robust_time`). No C compiler → skipped with a note."""
    from jalapeno.backends.torch.attention import SeqSlice
    from jalapeno.backends.torch.runner import PYTORCH_ONLY, DecodePolicy, ModelRunner
    from jalapeno.kernels.cpu_build import KernelUnavailable, load_kernel

    if res.device != "cpu":
        return
    try:
        load_kernel("cpu_decode")
    except KernelUnavailable as exc:
        res.notes.append(f"crossover: fused decode kernel unavailable ({exc}); not measured")
        return
    import torch

    layers = 1 if quick else 6
    loaded = random_llama(layers, *CROSSOVER_MODEL, "cpu")
    res.decode_bytes = float(sum(t.numel() * t.element_size() for t in loaded.model.parameters()))
    res.decode_layers = layers
    batches = crossover_batches(quick)
    ctx = CROSSOVER_CTX - 1  # tokens already in each sequence's cache
    per_seq = ctx // 16 + 1
    runner = ModelRunner(loaded.model, per_seq * max(batches), 16, "cpu", torch.float32)
    for b in batches:
        slices = [SeqSlice(ctx, 1, list(range(i * per_seq, (i + 1) * per_seq))) for i in range(b)]
        ids, rows = [1] * b, list(range(b))
        paths = [(DecodePolicy(fused_max_batch=b, panel_min_rows=1), res.fused_step_s),
                 (PYTORCH_ONLY, res.torch_step_s)]
        if b in panel_batches(quick):  # where the GEMM kinds trade places: the kernel with dot tiles only
            paths.append((DecodePolicy(fused_max_batch=b, panel_min_rows=b + 1), res.dot_step_s))
        def step(policy: DecodePolicy) -> Callable[[], Any]:
            def run() -> Any:
                runner.policy = policy
                return runner.forward(slices, ids, rows)
            return run

        # the paths alternate round by round, so a change in the machine's state hits them alike
        got = interleaved_times({i: step(policy) for i, (policy, _) in enumerate(paths)},
                                budget_s * len(paths), CROSSOVER_ROUNDS)
        for i, (_, out) in enumerate(paths):
            out[b] = robust_time(got[i])
    measure_prefill(res, runner, loaded, layers, budget_s, (PREFILL_TOKENS,) if quick else PREFILL_LENGTHS)
    measure_long_context(res, loaded, quick, budget_s)


#: context tokens of each sequence in the long-context decode steps (the decoded token included): the closed loop's
#: span, from a 64-token prompt's first decode to a 2048-token prompt's 256th; and the batches they are timed at
LONG_CONTEXTS = (65, 129, 577, 1153, 2305)
LONG_BATCHES = (1, 8, 16)  # 16: the closed loop decodes at 16-32 (the per-key cost there, issue 16 eleventh session)
#: batches at which the served-shape model's decode step is also timed, at the shortest context only: the fused
#: kernel's dot-product tiles (2-8 rows) run at a rate of their own that batch 1's matrix-vector pass and batch 8 do
#: not bracket (the crossover model's batch-2 step took 1.67x its batch-1 step, its batch-8 step 2.3x; issue 16,
#: twenty-second session), and the closed loop's c = 4 points decode at 2-4 rows
SERVED_SMALL_BATCHES = (2, 4)
#: rounds of the interleaved timings: at least the first, at most the second, more while the budget lasts
LONG_ROUNDS = (5, 15)
PREFILL_ROUNDS = (3, 9)
CROSSOVER_ROUNDS = (3, 9)


def interleaved_times(fns: Mapping[Any, Callable[[], Any]], budget_s: float, rounds: tuple[int, int],
                      sync: Callable[[], None] = lambda: None) -> dict[Any, list[float]]:
    """Wall seconds of every callable in ``fns``, timed in rounds that call each once in turn (after one warm-up
    each), so a change in what else the machine runs hits every key alike: at least ``rounds[0]`` rounds, then more
    up to ``rounds[1]`` while the time spent is under ``budget_s``. Returns each key's samples in round order."""
    for fn in fns.values():
        fn()
        sync()
    out: dict[Any, list[float]] = {k: [] for k in fns}
    spent, done = 0.0, 0
    while done < rounds[0] or (spent < budget_s and done < rounds[1]):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            sync()
            dt = time.perf_counter() - t0
            out[k].append(dt)
            spent += dt
        done += 1
    return out


#: the statistic of a repeated engine-step timing that the chip YAML keeps (:func:`robust_time`)
STEP_STATISTIC = "median"


def robust_time(samples: list[float]) -> float:
    """The probe's figure for a repeated engine-step timing: the **median** of its samples — the step time the
    machine sustains, which a served run's thousands of steps average over. Until the sixteenth session it was the
    best sample ("the machine to itself"): on a shared VM that is the fastest instant of a probe, 3-25 % faster
    than its own median step, and every closed-loop point then ran slower than simulated (issue 16,
    docs/fidelity.md). Bandwidth and matmul peaks stay the best of their repetitions (a peak, with the fitted
    fractions carrying the rest). The samples' spread is kept in ``ProbeResult.samples``."""
    return float(statistics.median(samples))


def context_steps(loaded: Any, budget_s: float, rounds: tuple[int, int] = LONG_ROUNDS,
                  shapes: Sequence[tuple[int, int]] | None = None) -> dict[tuple[int, int], list[float]]:
    """The fused decode step of ``loaded`` at every LONG_CONTEXTS length by LONG_BATCHES batch (or only the
    (batch, context) ``shapes`` given: the closed loop's drift reference), interleaved round by round
    (:func:`interleaved_times`): (batch, context) -> wall seconds of every round."""
    import torch

    from jalapeno.backends.torch.attention import SeqSlice
    from jalapeno.backends.torch.runner import DecodePolicy, ModelRunner

    per = max(LONG_CONTEXTS) // 16 + 1
    runner = ModelRunner(loaded.model, per * max(LONG_BATCHES), 16, "cpu", torch.float32)

    def step(b: int, ctx: int) -> Callable[[], Any]:
        slices = [SeqSlice(ctx - 1, 1, list(range(i * per, (i + 1) * per))) for i in range(b)]

        def run() -> Any:
            runner.policy = DecodePolicy(fused_max_batch=b)
            return runner.forward(slices, [1] * b, list(range(b)))
        return run

    shapes = shapes or [(b, ctx) for b in LONG_BATCHES for ctx in LONG_CONTEXTS]
    fns = {(b, ctx): step(b, ctx) for b, ctx in shapes}
    return interleaved_times(fns, budget_s, rounds)


def served_shapes() -> list[tuple[int, int]]:
    """The (batch, context) shapes of the served-shape model's decode steps: every LONG_BATCHES x LONG_CONTEXTS,
    and SERVED_SMALL_BATCHES at the shortest context."""
    return ([(b, ctx) for b in LONG_BATCHES for ctx in LONG_CONTEXTS]
            + [(b, LONG_CONTEXTS[0]) for b in SERVED_SMALL_BATCHES if b not in LONG_BATCHES])


def measure_long_context(res: ProbeResult, loaded: Any, quick: bool, budget_s: float) -> None:
    """The crossover model's fused decode step at every LONG_CONTEXTS length, by LONG_BATCHES batch
    (``res.ctx_step_s``), interleaved round by round (:func:`interleaved_times`) and taken as the median of the
    rounds: what attending more keys costs, fitted by least squares over the contexts. Skipped in a quick probe."""
    if quick:
        return
    for (b, ctx), samples in context_steps(loaded, 10 * budget_s).items():
        res.ctx_step_s.setdefault(b, {})[ctx] = robust_time(samples)
        res.samples[f"decode b{b} ctx{ctx}"] = samples


#: the model the closed loop serves (``jalapeno serve``'s default): the probe also times decode steps of a model of
#: its shape (its catalogue config, random weights: no download) over LONG_CONTEXTS, so what the chip prices for the
#: served model is checked on that model's own steps, not only on the crossover model's
SERVED_MODEL = "smollm2-135m"


def served_context_bytes(arch: Any) -> float:
    """Bytes the served-shape context steps hold: float32 weights (tied embeddings once) and the KV cache of
    max(LONG_BATCHES) sequences of max(LONG_CONTEXTS) keys."""
    per = max(LONG_CONTEXTS) // 16 + 1
    kv = 4.0 * arch.kv_elems_per_token_layer() * arch.num_layers * per * 16 * max(LONG_BATCHES)
    return 4.0 * arch.total_params() + kv


def measure_served_context(res: ProbeResult, quick: bool, budget_s: float, model: str = SERVED_MODEL) -> None:
    """The fused decode step of a random-weight model of ``model``'s shape at every LONG_CONTEXTS length by
    LONG_BATCHES batch (``res.served_ctx_step_s``, median of interleaved rounds), as the crossover model's are timed.
    Skipped in a quick probe, off CPU, without the fused kernel, or (a note) when the machine lacks the memory."""
    from jalapeno.kernels.cpu_build import KernelUnavailable, load_kernel
    from jalapeno.models.catalog import load_model

    if quick or res.device != "cpu":
        return
    try:
        load_kernel("cpu_decode")
    except KernelUnavailable:
        return  # measure_crossover has said why
    arch = load_model(model)
    need = served_context_bytes(arch)
    if need > 0.5 * _available_bytes("cpu"):
        res.notes.append(f"served-model steps: {model} at {max(LONG_CONTEXTS)} keys x {max(LONG_BATCHES)} sequences "
                         f"needs {need / 1e9:.1f} GB, more than half the free memory; not measured")
        return
    try:
        loaded = random_model(arch, "cpu")
    except ConfigError as exc:  # a family the torch backend does not build: a note, the rest of the probe runs
        res.notes.append(f"served-model steps: {model} not measured ({exc})")
        return
    res.served_model, res.served_layers = model, int(arch.num_layers)
    runs = [context_steps(loaded, 10 * budget_s, shapes=served_shapes())]
    for _ in range(SERVED_CONTEXT_PROCESSES - 1):
        try:
            runs.append(context_steps_in_child(model, 10 * budget_s))
        except (ConfigError, subprocess.TimeoutExpired, ValueError, KeyError) as exc:
            res.notes.append(f"served-model steps: a further process failed ({type(exc).__name__}: {exc}); "
                             f"the steps of {len(runs)} process(es) kept")
            break
    for (b, ctx), samples in pool_processes(runs).items():
        if b in LONG_BATCHES:
            res.served_ctx_step_s.setdefault(b, {})[ctx] = robust_time(samples)
        else:
            res.served_small_step_s[b] = robust_time(samples)
        res.samples[f"{model} decode b{b} ctx{ctx}"] = samples
    if len(runs) > 1:
        res.notes.append(process_spread_note(runs))
    served_prefill(res, loaded, model, budget_s)
    measure_engine_loop(res, loaded, model)


#: processes the served model's context steps are timed in, this one and fresh ones (:func:`context_steps_in_child`),
#: their samples pooled: one long-context step shape took 50-66 ms from process to process on a 2-core VM while
#: a process's own rounds varied less (issue 16, nineteenth session), so one process's median is one draw of that
#: spread and a served run, in a process of its own, another; the chip carries the pooled median
SERVED_CONTEXT_PROCESSES = 3


def context_steps_in_child(model: str, budget_s: float, timeout_s: float = 600.0
                           ) -> dict[tuple[int, int], list[float]]:
    """:func:`context_steps` of a random-weight ``model`` in a fresh Python process (this process's environment:
    its OpenMP thread policy): (batch, context) -> wall seconds of every round. A failing or silent process is a
    :class:`ConfigError` saying why."""
    cmd = [sys.executable, "-m", "jalapeno.hardware.context_child", model, str(budget_s)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0 or not out.stdout.strip():
        raise ConfigError("the context-step process failed: "
                          + (out.stderr.strip().splitlines() or ["no output"])[-1])
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return {(int(b), int(c)): [float(x) for x in v] for b, c, v in got}


def pool_processes(runs: Sequence[Mapping[tuple[int, int], list[float]]]) -> dict[tuple[int, int], list[float]]:
    """Every shape of the first run with its samples from every run that timed it, in process order."""
    return {k: [x for run in runs for x in run.get(k, [])] for k in runs[0]}


def process_spread_note(runs: Sequence[Mapping[tuple[int, int], list[float]]]) -> str:
    """The chip notes' line of how the longest-context steps varied from process to process (each process's
    median, ms)."""
    shapes = sorted(k for k in runs[0] if k[1] == max(c for _, c in runs[0]))
    return (f"served-model steps timed in {len(runs)} processes, samples pooled; each process's median ms at "
            f"{shapes[0][1] if shapes else '?'} keys by batch: " + ", ".join(
                f"{b}: " + "/".join(f"{statistics.median(run[(b, c)]) * 1e3:.1f}" for run in runs if run.get((b, c)))
                for b, c in shapes))


def served_prefill(res: ProbeResult, loaded: Any, model: str, budget_s: float, tokens: int | None = None) -> None:
    """One ``tokens``-token (default PREFILL_TOKENS) prefill step of the served-shape model from an empty cache
    through the runner, median of PREFILL_ROUNDS (``res.served_prefill_s``: tokens -> seconds): the TTFT of one
    request at that prompt length, which the chip's compute fraction (fitted on the crossover model's prefills)
    must price."""
    import torch

    from jalapeno.backends.torch.attention import SeqSlice
    from jalapeno.backends.torch.runner import DecodePolicy, ModelRunner

    tokens = tokens or PREFILL_TOKENS
    blocks = -(-tokens // 16)
    runner = ModelRunner(loaded.model, blocks, 16, "cpu", torch.float32)
    sl = [SeqSlice(0, tokens, list(range(blocks)))]

    def run() -> Any:
        runner.policy = DecodePolicy()
        return runner.forward(sl, [1] * tokens, [tokens - 1])

    samples = interleaved_times({tokens: run}, 6 * budget_s, PREFILL_ROUNDS)[tokens]
    res.served_prefill_s[tokens] = robust_time(samples)
    res.samples[f"{model} prefill {tokens}"] = samples


#: the engine loop of :func:`measure_engine_loop`: requests in flight, requests, prompt tokens (lowest, highest),
#: output tokens (lowest, highest). 24 in flight with ~100-128-token prompts: a prompt joining the decode rows
#: makes a step of more than 128 tokens (the PyTorch path past a 128-token crossover) or, the shorter ones, of
#: fewer (the fused kernel); output lengths spread so that requests finish and arrive one or two at a time,
#: as in a served closed loop
ENGINE_LOOP = (24, 72, (102, 128), (16, 48))


def measure_engine_loop(res: ProbeResult, loaded: Any, model: str, loop: tuple = ENGINE_LOOP) -> None:
    """A closed loop of the served-shape model through ``jalapeno serve``'s engine without the server
    (``res.engine_loop_steps``: every step's batch and wall time): a request arrives when one finishes, so the
    steps are decode steps and steps where a prompt joins them — on the PyTorch path past the fused crossover,
    whose small operators' host cost (``efficiency.unfused_layer_overhead_us``) a tight loop of one step does not
    show (docs/fidelity.md, eighteenth session). The engine takes the probe's own crossover and the process's
    thread policy (the server's). A failure is a note."""
    import numpy as np

    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.backends.torch.runner import DecodePolicy
    from jalapeno.engine.config import EngineConfig
    from jalapeno.engine.engine import Engine
    from jalapeno.engine.sequence import SamplingParams, Sequence

    conc, n, (p_lo, p_hi), (o_lo, o_hi) = loop
    try:
        policy = DecodePolicy()
        if res.fused_step_s and res.torch_step_s:  # the choices the chip records, as a server applies them
            cap, panel = probed_decode_choices(res)
            policy = DecodePolicy(fused_max_batch=cap, panel_min_rows=policy.panel_min_rows if panel is None else panel)
        backend = TorchBackend(loaded=loaded, device="cpu", decode_policy=policy)
        engine = Engine(backend, EngineConfig(max_num_seqs=conc))
        rng = np.random.default_rng(0)
        prompts = rng.integers(p_lo, p_hi + 1, n)
        outputs = rng.integers(o_lo, o_hi + 1, n)
        shapes: list[tuple[tuple[tuple[int, int], ...], int, int]] = []
        run = backend.execute

        def execute(batch: Any) -> Any:
            pre, rows, ctx = [], 0, 0
            for c in batch.chunks:
                if c.start < c.seq.prompt_len:
                    pre.append((int(c.num_tokens), int(c.start)))
                else:
                    rows, ctx = rows + 1, ctx + int(c.start + c.num_tokens)
            shapes.append((tuple(pre), rows, ctx))
            return run(batch)

        backend.execute = execute  # type: ignore[method-assign]
        # warm-up: one short request (kernel build, allocator, the first touch of the KV cache)
        vocab = int(loaded.config.vocab_size)
        lo, hi = min(100, vocab // 2), min(10_000, vocab)  # ordinary token ids, inside any vocabulary
        engine.add_sequence(Sequence(np.random.default_rng(1).integers(lo, hi, p_hi).tolist(),
                                     SamplingParams(max_tokens=4, ignore_eos=True)))
        while engine.has_unfinished():
            engine.step()
        shapes.clear()
        times: list[float] = []
        sent = done = 0
        while done < n:
            while sent < n and sent - done < conc:
                ids = rng.integers(lo, hi, int(prompts[sent])).tolist()
                engine.add_sequence(Sequence(ids, SamplingParams(max_tokens=int(outputs[sent]), ignore_eos=True)))
                sent += 1
            t0 = time.perf_counter()
            outs = engine.step()
            times.append(time.perf_counter() - t0)
            done += sum(o.finished for o in outs)
    except Exception as exc:  # noqa: BLE001 - a probe step that cannot run here is a note
        res.notes.append(f"engine loop: not measured ({type(exc).__name__}: {exc})")
        return
    res.engine_loop_steps = [(pre, rows, ctx, t) for (pre, rows, ctx), t in zip(shapes, times, strict=True)]
    res.samples[f"{model} engine loop steps"] = times


def engine_loop_note(res: ProbeResult, loop: tuple = ENGINE_LOOP) -> str:
    """The chip notes' line of the engine loop's steps: ``prefill chunks/decode rows/context keys: ms`` per step, a
    chunk as ``tokens`` (fresh) or ``tokens@prefix``, chunks joined by ``+`` (what ``calibrate --probe`` reads)."""
    conc, n, (p_lo, p_hi), (o_lo, o_hi) = loop

    def chunks(pre: tuple[tuple[int, int], ...]) -> str:
        return "+".join(f"{t}@{p}" if p else str(t) for t, p in pre) or "0"
    steps = ", ".join(f"{chunks(pre)}/{rows}/{ctx}: {t * 1e3:.2f}" for pre, rows, ctx, t in res.engine_loop_steps)
    return (f"engine loop steps (prefill chunks/decode rows/context keys: ms; {res.served_model}, {res.served_layers} "
            f"layers, random weights; {conc} in flight, {n} requests, prompts {p_lo}-{p_hi}, outputs {o_lo}-{o_hi} "
            f"tokens): {steps}")


def parse_engine_loop_note(line: str) -> list[EngineLoopStep]:
    """:func:`engine_loop_note`'s steps back (the inverse, to the note's 0.01 ms)."""
    import re

    body = line.split("tokens): ", 1)[1] if "tokens): " in line else ""
    out: list[EngineLoopStep] = []
    for pre, rows, ctx, ms in re.findall(r"([0-9@+]+)/([0-9]+)/([0-9]+): ([0-9.]+)", body):
        chunks = tuple((int(t), int(p or 0)) for t, _, p in (c.partition("@") for c in pre.split("+")) if t != "0")
        out.append((chunks, int(rows), int(ctx), float(ms) / 1e3))
    return out


#: prompt tokens of the probe's prefill steps (the closed loop's input lengths); the first of PREFILL_TOKENS's size
#: is also the shape of the matmul peak, ``prefill-512``
PREFILL_TOKENS = 512
PREFILL_LENGTHS = (128, 512, 2048)


def prefill_flops(params: float, embed_params: float, layers: int, hidden: int, vocab: int, tokens: int) -> float:
    """FLOPs of one causal prefill of ``tokens`` from an empty cache: 2 per weight per token through every
    matrix but the embedding, QK^T and PV over the causal triangle (2 x 2 x hidden x T(T+1)/2 per layer), and the
    LM head for the last row only."""
    dense = 2.0 * tokens * (params - embed_params)
    attention = 4.0 * hidden * layers * tokens * (tokens + 1) / 2
    return dense + attention + 2.0 * hidden * vocab


def measure_prefill(res: ProbeResult, runner: Any, loaded: Any, layers: int, budget_s: float,
                    lengths: tuple[int, ...] = PREFILL_LENGTHS) -> None:
    """One prefill step from an empty cache at each of ``lengths`` prompt tokens through the runner (the engine's
    own choice of path), interleaved round by round and taken as the median (``res.prefill_s``: tokens -> (FLOPs,
    seconds)); lengths the runner's cache cannot hold are skipped with a note. ``prefill_flops`` /
    ``prefill_step_s`` keep the PREFILL_TOKENS step (the compute fraction's first estimate)."""
    from jalapeno.backends.torch.attention import SeqSlice
    from jalapeno.backends.torch.runner import DecodePolicy

    hidden, vocab = int(loaded.config.hidden_size), int(loaded.config.vocab_size)
    params = float(sum(p.numel() for p in loaded.model.parameters()))  # tied embedding counted once

    def step(t: int) -> Callable[[], Any]:
        sl = [SeqSlice(0, t, list(range(-(-t // 16))))]

        def run() -> Any:
            runner.policy = DecodePolicy()
            return runner.forward(sl, [1] * t, [t - 1])
        return run

    fit = [t for t in lengths if runner.num_blocks >= -(-t // 16)]
    if len(fit) < len(lengths):
        res.notes.append(f"prefill: {sorted(set(lengths) - set(fit))} tokens do not fit the probe's cache; skipped")
    fns: dict[Any, Callable[[], Any]] = {t: step(t) for t in fit}
    if max(lengths) == max(PREFILL_LENGTHS):  # a full probe: the chunks the PyTorch attention path takes, too
        fns.update({k: masked_step(runner, *k) for k in MASKED_STEPS if runner.num_blocks >= _masked_blocks(*k)})
    got = interleaved_times(fns, 6 * budget_s, PREFILL_ROUNDS)
    for t, samples in got.items():
        if isinstance(t, tuple):
            res.masked_prefill_s[t] = robust_time(samples)
            res.samples["masked prefill {} after {} beside {} decode".format(*t)] = samples
            continue
        res.prefill_s[t] = (prefill_flops(params, float(hidden * vocab), layers, hidden, vocab, t), robust_time(samples))
        res.samples[f"prefill {t}"] = samples
    if PREFILL_TOKENS in res.prefill_s:
        res.prefill_flops, res.prefill_step_s = res.prefill_s[PREFILL_TOKENS]


#: later prefill chunks (after cached tokens), whose cost beyond the flash price ``masked_prefill_attention_ns``
#: prices: the paged gather of their context, and where the C kernel cannot take them with a key offset the masked
#: SDPA path; as (chunk tokens, cached prefix, decode rows beside it): the second half of a 2048-token prompt and its
#: last quarter beside one decode row (alone and in a mixed step). A fresh prompt takes the flash kernel even beside
#: decode rows (fourteenth session: the 2048-token prompt beside one decode row, this list's first step until then,
#: is no longer one of them)
MASKED_STEPS = ((1024, 1024, 0), (512, 1536, 1))


def _masked_blocks(chunk: int, prefix: int, decode: int) -> int:
    return -(-(chunk + prefix) // 16) + decode * (-(-(chunk + 1) // 16))


def masked_step(runner: Any, chunk: int, prefix: int, decode: int) -> Callable[[], Any]:
    """One step of the crossover runner: a ``chunk``-token prompt chunk after ``prefix`` cached tokens, beside
    ``decode`` decode rows each at context ``chunk + 1`` (decode rows first, as the scheduler orders them), down
    the engine's own path (the default policy: such a step feeds more tokens than the fused kernel takes; with
    ``prefix`` 0 the chunk is a fresh prompt and takes the flash kernel)."""
    from jalapeno.backends.torch.attention import SeqSlice
    from jalapeno.backends.torch.runner import DecodePolicy

    per = -(-(chunk + 1) // 16)
    sl = [SeqSlice(chunk, 1, list(range(i * per, (i + 1) * per))) for i in range(decode)]
    first = decode * per
    sl.append(SeqSlice(prefix, chunk, list(range(first, first + -(-(chunk + prefix) // 16)))))
    ids, rows = [1] * (decode + chunk), [*range(decode), decode + chunk - 1]

    def run() -> Any:
        runner.policy = DecodePolicy()
        return runner.forward(sl, ids, rows)
    return run


def measure_thread_policy(res: ProbeResult, quick: bool) -> None:
    """Decode and prefill step times under each OpenMP thread policy (CPU only; each in a fresh process, since
    OpenMP reads its policy when torch loads). A failure is a note, never a crash."""
    from jalapeno.hardware.threads import measure_thread_policies

    if res.device != "cpu":
        return
    try:
        times = measure_thread_policies(quick)
    except Exception as exc:  # noqa: BLE001 - a failing or timed-out child process: a note, not a crash
        res.notes.append(f"thread policy: not measured ({type(exc).__name__}: {exc})")
        return
    res.thread_policy_s = {p.label: t for p, t in times.items()}


def thread_policy_fact(res: ProbeResult, source: str) -> dict[str, Any] | None:
    """The chip YAML's ``execution.thread_policy``: the measured winner (None when not measured)."""
    from jalapeno.hardware.threads import ThreadPolicy, choose_thread_policy

    if not res.thread_policy_s:
        return None
    best = choose_thread_policy({ThreadPolicy.from_label(k): v for k, v in res.thread_policy_s.items()})
    return {"wait": best.wait, "pinned": best.pinned, "status": "measured", "source": source,
            "note": "lowest geometric mean of a batch-1 decode step and a prefill step, each policy in its own "
                    "process (decode/prefill ms: " + ", ".join(
                        f"{k} {d * 1e3:.2f}/{p * 1e3:.1f}" for k, (d, p) in res.thread_policy_s.items()) + ")"}


# ---- the chip YAML -------------------------------------------------------------------------------------------


def probed_decode_choices(res: ProbeResult) -> tuple[int, int | None]:
    """The fused crossover and panel switch the probe's decode steps choose (what ``execution`` records and a
    server then runs); needs both paths' steps."""
    kernel = {b: min(t, res.dot_step_s.get(b, t)) for b, t in res.fused_step_s.items()}  # its better GEMMs
    return choose_fused_max_batch(kernel, res.torch_step_s), choose_panel_min_rows(res.fused_step_s, res.dot_step_s)


def _fact(value: float | None, source: str, note: str = "") -> dict[str, Any]:
    if value is None:
        return {"value": None, "status": "unknown", "source": source, "note": note or "not measurable here"}
    # six significant digits (not six decimals: a slow or loaded machine's TB/s can be below 0.001)
    out: dict[str, Any] = {"value": float(f"{float(value):.6g}"), "status": "measured", "source": source}
    return {**out, "note": note} if note else out


def chip_dict(res: ProbeResult, key: str, source: str) -> dict[str, Any]:
    """The chip YAML mapping of a probe (validated by :class:`ChipSpec` before it is written)."""
    prefill = {d: v.get("prefill-512") for d, v in res.matmul_tflops.items()}
    compute = {d: _fact(prefill[d], source, "torch matmul 512xKxK at this dtype")
               for d in ("bf16", "fp16", "fp32") if prefill.get(d)}
    if not compute:
        raise ConfigError("no matmul could be measured on this device (see the notes above); nothing to write")
    best_read = max(res.read_gbps.values(), default=None)
    best_t = max(res.read_gbps, key=lambda t: res.read_gbps[t]) if res.read_gbps else 0
    kind = "hbm" if res.device.startswith("cuda") else "dram"
    memory = [{"name": kind, "kind": kind, "capacity_gb": _fact(res.memory_gb, source),
               "bandwidth_tbps": _fact(best_read / 1e3 if best_read else None, source,
                                       f"read (sum) bandwidth, {best_t or 'all'} threads")}]
    l2 = res.caches_kb.get("L3") or res.caches_kb.get("L2")
    if l2 and res.cache_read_gbps:
        memory.append({"name": "cache", "kind": "sram", "resident": False,
                       "capacity_gb": _fact(l2 * 1024 / 1e9, "/sys/devices/system/cpu/cpu0/cache (largest level)"),
                       "bandwidth_tbps": _fact(res.cache_read_gbps / 1e3, source, "read of a buffer half the L2")})
    none = {"value": None, "status": "unknown", "source": "a single local device: no chip-to-chip network"}
    mem_eff = decode_memory_efficiency(res)
    comp_eff = prefill_compute_efficiency(res)
    eff: dict[str, Any] = {
        "compute_default": round(comp_eff, 3) if comp_eff else 1.0,
        "memory_default": round(mem_eff, 3) if mem_eff else 1.0,
        "source": f"{source}: " + (
            f"compute_default = the fraction of the fp32 matmul peak a {PREFILL_TOKENS}-token prefill step achieved "
            f"({res.prefill_flops / 1e9:.1f} GFLOP in {res.prefill_step_s * 1e3:.1f} ms, less its layers' overhead); "
            if comp_eff else "compute fraction 1 (no prefill step measured); ") + (
            f"memory_default = the fraction of the read bandwidth a batch-1 fused decode step achieved "
            f"({res.decode_bytes / 1e6:.0f} MB of weights in {res.fused_step_s[1] * 1e3:.2f} ms, less its layers' "
            f"overhead)" if mem_eff else "memory fraction 1 (no fused decode step measured)")}
    if res.front_end_ms is not None:
        eff["request_overhead_ms"] = round(res.front_end_ms, 2)
        eff["fitted"] = {"request_overhead_ms": _fact(
            round(res.front_end_ms, 2), source, "the serving layer's latency per request (send -> engine thread) "
            "with an idle engine: the floor of a served run's (`sim_vs_engine.py --write-chip` measures that one)")}
    if res.step_overhead_us is not None:
        eff["step_overhead_us"] = round(res.step_overhead_us, 1)
        eff["layer_overhead_us"] = round(res.layer_overhead_us or 0.0, 1)
        eff["seq_overhead_us"] = round(res.seq_overhead_us or 0.0, 1)
    out: dict[str, Any] = {
        "key": key, "name": f"local {res.device_name}", "vendor": platform.machine() or "local",
        "status": "measured", "description": f"this machine as probed by `{source}`",
        "compute_tflops": compute, "memory": memory,
        "scale_up": {"bandwidth_gbps": none, "latency_us": none, "topology": "none", "domain_size": 1},
        "power": {"tdp_w": _fact(res.power_w.get("tdp"), "RAPL/NVML power limit"),
                  "loaded_w": _fact(res.power_w.get("loaded"), source, "during the matmul microbenchmark")},
        "efficiency": eff,
        "notes": [*_measurement_notes(res), *res.notes],
    }
    if res.fused_step_s and res.torch_step_s:
        cap, panel = probed_decode_choices(res)
        threads = choose_threads(res.copy_gbps) if res.copy_gbps else 1
        out["execution"] = {
            "fused_max_batch": _fact(cap, source, "largest measured decode batch where the fused kernel beat PyTorch"),
            "threads": _fact(threads, source, "fewest threads within 3% of the best copy bandwidth")}
        if panel is not None:
            out["execution"]["panel_min_rows"] = _fact(
                panel, source, "smallest measured decode batch from which the kernel's panel GEMMs beat its dot tiles")
        policy = thread_policy_fact(res, source)
        if policy is not None:
            out["execution"]["thread_policy"] = policy
    return out


def _net_of_layer_overhead(res: ProbeResult, step: float) -> float:
    """``step`` less the crossover model's per-layer engine overhead (which the simulator prices separately); the
    whole step when that overhead would be most of it (a noisy overhead probe)."""
    fixed = res.decode_layers * (res.layer_overhead_us or 0.0) * 1e-6
    return step - fixed if step - fixed > 0.25 * step else step


def decode_memory_efficiency(res: ProbeResult) -> float | None:
    """Achieved fraction of the best read bandwidth in a batch-1 fused decode step: the step streams its weights
    once (``decode_bytes``), so bytes / (step time - layers x layer overhead) / read bandwidth, capped at 1. The
    microbenchmark reads one buffer flat out; the decode step interleaves matrix-vector work and a barrier per
    layer, which is what the serving simulator must price. None when no step or bandwidth was measured."""
    step = res.fused_step_s.get(1)
    bw = max(res.read_gbps.values(), default=0.0) * 1e9
    if not step or not res.decode_bytes or bw <= 0:
        return None
    t = _net_of_layer_overhead(res, step)
    return min(1.0, res.decode_bytes / t / bw)


def prefill_compute_efficiency(res: ProbeResult) -> float | None:
    """Achieved fraction of the fp32 matmul peak in a real prefill step: FLOPs / (step time - layers x layer
    overhead) / peak, capped at 1 (the peak is a bare 512xKxK matmul; a step adds attention, norms, activations
    and the memory traffic between them). None when not measured."""
    peak = res.matmul_tflops.get("fp32", {}).get("prefill-512")
    step = res.prefill_step_s
    if not step or not res.prefill_flops or not peak:
        return None
    t = _net_of_layer_overhead(res, step)
    return min(1.0, res.prefill_flops / t / (peak * 1e12))


def _measurement_notes(res: ProbeResult) -> list[str]:
    def fmt(d: Mapping[int, float]) -> str:
        return ", ".join(f"{t}: {v:.1f}" for t, v in sorted(d.items()))

    lines = [f"read GB/s by threads: {fmt(res.read_gbps)}", f"copy GB/s by threads: {fmt(res.copy_gbps)}"]
    for d, shapes in res.matmul_tflops.items():
        lines.append(f"matmul {d} TFLOPS: " + ", ".join(f"{s} {v:.3g}" for s, v in shapes.items()))
    if res.rows_tflops:
        lines.append(f"matmul TFLOPS by rows (M x {ROWS_KN[0]} x {ROWS_KN[1]}): " + ", ".join(
            f"{m}: {v:.3g}" for m, v in sorted(res.rows_tflops.items())))
    if res.caches_kb:
        lines.append("caches KiB: " + ", ".join(f"{k} {v}" for k, v in res.caches_kb.items()))
    if res.fused_step_s:
        lines.append("decode step ms fused/pytorch by batch: " + ", ".join(
            f"{b}: {res.fused_step_s[b] * 1e3:.2f}/{res.torch_step_s[b] * 1e3:.2f}" for b in sorted(res.fused_step_s)))
    if res.dot_step_s:
        lines.append("decode step ms fused panels/dot tiles by batch: " + ", ".join(
            f"{b}: {res.fused_step_s[b] * 1e3:.2f}/{res.dot_step_s[b] * 1e3:.2f}" for b in sorted(res.dot_step_s)))
    if res.ctx_step_s:
        ctxs = sorted({c for by in res.ctx_step_s.values() for c in by})
        lines.append(f"decode step ms at context {'/'.join(map(str, ctxs))} by batch: " + ", ".join(
            f"{b}: " + "/".join(f"{by[c] * 1e3:.3f}" for c in ctxs) for b, by in sorted(res.ctx_step_s.items())))
    if res.served_ctx_step_s:
        ctxs = sorted({c for by in res.served_ctx_step_s.values() for c in by})
        lines.append(f"served-model decode step ms at context {'/'.join(map(str, ctxs))} by batch "
                     f"({res.served_model}, {res.served_layers} layers, random weights): " + ", ".join(
                         f"{b}: " + "/".join(f"{by[c] * 1e3:.3f}" for c in ctxs)
                         for b, by in sorted(res.served_ctx_step_s.items())))
    if res.served_small_step_s:
        lines.append(f"served-model decode step ms at context {LONG_CONTEXTS[0]} by small batch ({res.served_model}, "
                     f"{res.served_layers} layers, random weights): " + ", ".join(
                         f"{b}: {v * 1e3:.3f}" for b, v in sorted(res.served_small_step_s.items())))
    if res.served_prefill_s:
        lines.append(f"served-model prefill step ms by tokens ({res.served_model}, {res.served_layers} layers, "
                     "random weights): " + ", ".join(
            f"{t}: {v * 1e3:.2f}" for t, v in sorted(res.served_prefill_s.items())))
    if res.thread_policy_line:
        lines.append(f"engine steps timed under {res.thread_policy_line}")
    if res.prefill_s:
        lines.append("prefill step ms (GFLOP) by tokens: " + ", ".join(
            f"{t}: {s * 1e3:.2f}/{f / 1e9:.4f}" for t, (f, s) in sorted(res.prefill_s.items())))
    if res.engine_loop_steps:
        lines.append(engine_loop_note(res))
    if res.masked_prefill_s:
        lines.append("masked prefill step ms by chunk/prefix/decode rows: " + ", ".join(
            f"{c}/{p}/{d}: {v * 1e3:.2f}" for (c, p, d), v in sorted(res.masked_prefill_s.items())))
    if res.front_end_ms is not None:
        lines.append(front_end_note(res.front_end_ms))
    lines.append(f"load average at probe time: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cpus)")
    return lines


def run_probe(device: str = "cpu", quick: bool = False, log: Callable[[str], None] = lambda _: None,
              policy_line: str = "", served_model: str = SERVED_MODEL) -> ProbeResult:
    """Run every measurement on ``device`` ("cpu" or "cuda"); ``quick`` keeps it under ~30 s. ``policy_line``: the
    OpenMP thread policy this process runs under (:func:`jalapeno.hardware.threads.apply_thread_policy`), noted;
    ``served_model``: the model whose decode steps are timed beside the crossover model's
    (:func:`measure_served_context`)."""
    import torch

    if device not in ("cpu", "cuda"):
        raise ConfigError(f"unknown device {device!r}; use --device cpu or --device cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was requested but no CUDA GPU is available; use --device cpu")
    name = torch.cuda.get_device_name(0) if device == "cuda" else (platform.processor() or platform.machine())
    res = ProbeResult(device, name, _total_memory_gb(device), caches_kb=read_caches() if device == "cpu" else {},
                      thread_policy_line=policy_line)
    budget = 0.15 if quick else 0.6
    steps: list[tuple[str, Callable[[], None]]] = [
        ("memory bandwidth", lambda: measure_bandwidth(res, 64 if quick else 512, budget)),
        ("matmul throughput", lambda: measure_matmul(res, quick, budget)),
        ("matmul throughput by rows", lambda: measure_matmul_rows(res, budget)),
        ("engine overheads", lambda: measure_overheads(res, quick)),
        ("fused decode crossover", lambda: measure_crossover(res, quick, budget)),
        (f"decode steps of the served model's shape ({served_model}, random weights)",
         lambda: measure_served_context(res, quick, budget, served_model)),
        ("OpenMP thread policy (a process per candidate)", lambda: measure_thread_policy(res, quick)),
        ("power", lambda: measure_power(res, lambda: measure_bandwidth(ProbeResult(device, name, 0), 64, 0.3))),
    ]
    for label, step in steps:
        log(f"probing {label} ...")
        step()
    return res


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def write_chip(res: ProbeResult, out_dir: Path, key: str = LOCAL_KEY, command: str = "jalapeno hardware probe") -> Path:
    """Validate the probe as a :class:`ChipSpec` and write ``out_dir/<key>.yaml``; returns the path."""
    from jalapeno.hardware.catalog import load_spec_file

    source = f"{command} ({_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC)"
    data = chip_dict(res, key, source)
    ChipSpec.model_validate(data)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{key}.yaml"
    head = f"# {key}: this machine, measured by `{command}`; every number is status measured (or unknown).\n"
    text = yaml.dump(data, Dumper=_NoAliases, sort_keys=False, allow_unicode=True, width=120)
    path.write_text(head + text, encoding="utf-8")
    load_spec_file(path)
    if res.samples:  # the repeated timings' every sample, for their spread (the YAML keeps their STEP_STATISTIC)
        samples = {"source": source, "load_average": os.getloadavg()[0], "statistic": STEP_STATISTIC,
                   "seconds": res.samples}
        (out_dir / f"{key}.samples.json").write_text(json.dumps(samples, indent=1) + "\n", encoding="utf-8")
    return path
