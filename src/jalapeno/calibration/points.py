"""Published measurements as *points*: rows of ``calibration.csv`` grouped and mapped to simulator inputs.

``calibration.csv`` has one metric per row; the rows of one measured point share every column but ``id``,
``metric``, ``value`` and ``unit``. :func:`group_points` rebuilds the points, :func:`to_sim_spec` turns one
into what the simulator needs (catalogue model and chip, layout, precision, workload) or says, in one short
reason, why it cannot be predicted (``Excluded``). Measured values are normalised to a few metric names in SI
units (seconds, tokens/s per chip), listed in :data:`METRICS`.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from jalapeno.calibration.mtp import mtp_acceptance
from jalapeno.errors import SpecError, UnknownNameError

#: compared metric -> (what it means, unit)
METRICS: dict[str, tuple[str, str]] = {
    "output_tput_per_gpu": ("output tokens/s per chip", "tok/s/chip"),
    "total_tput_per_gpu": ("input + output tokens/s per chip", "tok/s/chip"),
    "median_tpot": ("median time per output token", "s"),
    "median_ttft": ("median time to first token", "s"),
    "median_e2e_latency": ("median end-to-end latency", "s"),
    "median_interactivity": ("1 / median TPOT, tokens/s per user", "tok/s/user"),
    "mean_ttft": ("mean time to first token", "s"),
    "mean_itl": ("mean inter-token latency", "s"),
}

_KEY_COLUMNS = (
    "source_url", "source_title", "date", "model", "precision", "hardware", "num_chips", "parallelism",
    "framework", "isl", "osl", "concurrency_or_batch", "notes",
)
REQUIRED_COLUMNS = ("id", *_KEY_COLUMNS, "metric", "value", "unit")

#: chip names as the sources spell them -> catalogue key (anything else: not in the catalogue)
_CHIPS = {
    "h100": "h100", "h100 80gb": "h100", "nvidia h100-sxm-80gb": "h100",
    "h200": "h200", "nvidia h200-sxm-141gb": "h200",
    "b200": "b200", "nvidia b200": "b200",
    "mi355x": "mi355x", "amd mi355x": "mi355x",
}


@dataclass(frozen=True)
class Point:
    """One measured point: the shared columns, its row ids, and its metrics normalised to :data:`METRICS`."""

    source: str  # id prefix: IXAPI, IXRUN, TRTLLM, NIM, MLPERFv41, ...
    key: tuple[str, ...]  # the shared column values, in ``_KEY_COLUMNS`` order
    ids: tuple[str, ...]
    metrics: dict[str, float]  # normalised (see METRICS)
    raw_metrics: dict[str, tuple[float, str]] = field(default_factory=dict)  # as published: value, unit

    def col(self, name: str) -> str:
        return self.key[_KEY_COLUMNS.index(name)]

    @property
    def label(self) -> str:
        return (f"{self.source} {self.col('model')} {self.col('hardware')} {self.col('parallelism').split(' (')[0]} "
                f"{framework_family(self.col('framework'))} {self.col('isl')}/{self.col('osl')} "
                f"c={self.col('concurrency_or_batch')[:12]} {self.col('date')[:10]}")


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    ep: int = 1
    dp_attention: bool = False


@dataclass(frozen=True)
class Pool:
    """One pool of a disaggregated deployment, as an InferenceX layout string names it.

    ``recorded_tp`` / ``ep`` are the per-worker degrees the harness recorded; ``gpus`` is the pool's total GPU
    count (the reliable part). A worker spans ``gpus / workers`` chips: with ``dp_attention`` the harness often
    records TP1 while attention runs data-parallel over all of them."""

    role: str  # "prefill" | "decode"
    workers: int
    recorded_tp: int
    ep: int
    dp_attention: bool
    gpus: int

    @property
    def gpus_per_worker(self) -> int:
        return self.gpus // self.workers

    @property
    def layout(self) -> "Layout":
        """One worker's layout in the simulator's terms: ``tp`` = chips per worker (attention tensor- or
        data-parallel over them, as ``dp_attention`` says), ``ep`` as recorded."""
        return Layout(self.gpus_per_worker, self.ep, self.dp_attention)


@dataclass(frozen=True)
class DisaggLayout:
    """A disaggregated deployment: a prefill pool and a decode pool (see :func:`parse_disagg_layout`)."""

    prefill: Pool
    decode: Pool

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus


@dataclass(frozen=True)
class SimSpec:
    """What the simulator needs to predict one point. Lengths in tokens; ``concurrency`` None means
    "offline max throughput" (the predictor fills the KV cache)."""

    model: str  # catalogue name
    chip: str  # catalogue key
    layout: Layout
    weights: str  # jalapeno.perf.Precision.weights
    kv: str
    isl: int
    osl: int
    concurrency: int | None
    range_ratio: float  # 0.8: InferenceX random lengths in [0.8 L, L]; 1.0: fixed lengths
    num_prompts_per_concurrency: int = 10
    spec_tokens: int = 0  # MTP draft tokens (0 = off)
    spec_acceptance: tuple[float, ...] = ()
    kind: str = "ix"  # ix | offline | nim
    framework: str = ""  # vllm | sglang | trt | nim | atom | dynamo-sglang | ...
    #: disaggregated deployments: both pools (``layout`` is then one decode worker's); None when aggregated
    disagg: DisaggLayout | None = None

    @property
    def not_simulated(self) -> str | None:
        """Why the simulator does not predict this point yet (None: it does)."""
        if self.disagg is not None:  # predict.simulate runs them (calibration.disagg); kept out of the fit tables
            return "InferenceX disaggregated: predicted by benchmarks/disagg_fidelity.py, not in these tables"
        return None


@dataclass(frozen=True)
class Excluded:
    reason: str


# ------------------------------------------------------------------------------------------------ loading
def read_rows(path: str | Path) -> list[dict[str, str]]:
    """Rows of a calibration CSV. Raises :class:`SpecError` when the file or a column is missing."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"calibration file {p} does not exist")
    with p.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise SpecError(f"calibration file {p} lacks column(s) {', '.join(missing)}")
        return list(reader)


def source_of(row_id: str) -> str:
    m = re.match(r"([A-Za-z0-9]+)-", row_id)
    return m.group(1) if m else row_id


def normalise_metric(metric: str, value: float, unit: str, num_chips: int) -> tuple[str, float] | None:
    """Map one published metric to (:data:`METRICS` name, value in its unit), or None if not compared."""
    u = unit.strip().lower()
    scale = {"s": 1.0, "ms": 1e-3}
    if metric in ("output_tput_per_gpu", "total_tput_per_gpu", "median_interactivity"):
        return metric, value
    if metric in ("median_tpot", "median_ttft", "median_e2e_latency") and u in scale:
        return metric, value * scale[u]
    if metric == "total_output_tput":  # TRT-LLM v1.0-era table: output tok/s of the whole TP group
        return "output_tput_per_gpu", value / num_chips
    if metric == "throughput" and u == "tok/s":  # NIM: output tok/s of the whole deployment
        return "output_tput_per_gpu", value / num_chips
    if metric == "ttft" and u in scale:  # NIM averages
        return "mean_ttft", value * scale[u]
    if metric == "itl" and u in scale:
        return "mean_itl", value * scale[u]
    return None


def group_points(rows: Iterable[dict[str, str]]) -> list[Point]:
    """Group rows into points (same values in every column but id/metric/value/unit), in file order."""
    groups: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[c] for c in _KEY_COLUMNS), []).append(r)
    out = []
    for key, rs in groups.items():
        chips = _int(key[_KEY_COLUMNS.index("num_chips")]) or 1
        metrics: dict[str, float] = {}
        raw: dict[str, tuple[float, str]] = {}
        for r in rs:
            try:
                v = float(r["value"])
            except ValueError:
                continue
            raw[r["metric"]] = (v, r["unit"])
            n = normalise_metric(r["metric"], v, r["unit"], chips)
            if n is not None:
                metrics[n[0]] = n[1]
        out.append(Point(source_of(rs[0]["id"]), key, tuple(r["id"] for r in rs), metrics, raw))
    return out


def load_points(path: str | Path) -> list[Point]:
    return group_points(read_rows(path))


# ------------------------------------------------------------------------------------------------ mapping
def _int(s: str) -> int | None:
    try:
        return int(str(s).strip())
    except ValueError:
        return None


def framework_family(framework: str) -> str:
    f = framework.lower()
    for name in ("dynamo-sglang", "dynamo-trt", "mori-sglang", "sglang-disagg", "vllm", "sglang", "atom", "nim", "trt"):
        if f.startswith(name) or (name == "trt" and "tensorrt" in f) or (name == "nim" and "nim" in f):
            return name
    return f.split()[0] if f else ""


def map_chip(hardware: str) -> str | None:
    """Catalogue key for a published hardware string, or None (e.g. H100 PCIe is not the SXM part)."""
    return _CHIPS.get(hardware.strip().lower())


def _catalogue_chip(name: str) -> str | None:
    """Catalogue key of any chip the catalogue (with ``JALAPENO_HARDWARE_PATH``) resolves, or None."""
    from jalapeno.hardware.catalog import get_chip

    try:
        return get_chip(name).key
    except UnknownNameError:
        return None


def map_model(name: str) -> str | None:
    """Catalogue name for a published model name, or None when the catalogue lacks it."""
    from jalapeno.models.catalog import resolve_name

    try:
        return resolve_name(name)
    except UnknownNameError:
        return None


def map_weights(precision: str, model: str) -> str:
    """``Precision.weights`` for a published precision: the checkpoint's own format where it matches
    (DeepSeek FP8, GPT-OSS MXFP4 — InferenceX 'fp4' and TRT-LLM 'FP8' rows both run the MXFP4 checkpoint)."""
    from jalapeno.models.catalog import load_model

    p = precision.strip().lower()
    native = load_model(model).native_weight_dtype.lower()
    if native in ("mxfp4", "fp4"):
        return "native"
    if p in ("fp8", "fp8_e4m3") and native.startswith("fp8"):
        return "native"
    if p in ("fp8", "fp8_e4m3"):
        return "fp8"
    if p in ("fp4", "mxfp4", "nvfp4"):
        return "fp4"
    if p in ("fp16", "bf16"):
        return "bf16"
    return "native"


_IX_LAYOUT = re.compile(r"^TP(\d+)\s+EP(\d+)\s+DPattn=(True|False)", re.I)
_SIMPLE_LAYOUT = re.compile(r"^(D?EP|TP)(\d+)\b", re.I)


def parse_layout(text: str) -> Layout | None:
    """``"TP8 EP8 DPattn=True (...)"`` (InferenceX), ``"TP2"``, ``"DEP8"`` (TRT-LLM: attention DP + expert
    parallel over 8 chips) -> :class:`Layout`; None for anything else (e.g. disaggregated layouts)."""
    s = text.strip()
    m = _IX_LAYOUT.match(s)
    if m:
        return Layout(int(m.group(1)), int(m.group(2)), m.group(3).lower() == "true")
    m = _SIMPLE_LAYOUT.match(s)
    if m:
        n = int(m.group(2))
        if m.group(1).upper() == "TP":
            return Layout(n, 1, False)
        if m.group(1).upper() == "DEP":
            return Layout(n, n, True)
    return None


_POOL = r"(\d+) worker\(s\) x TP(\d+) EP(\d+) DPattn=(True|False) \((\d+) GPUs\)"
_DISAGG_LAYOUT = re.compile(rf"^disagg P: {_POOL}; D: {_POOL}$", re.I)


def parse_disagg_layout(text: str) -> DisaggLayout | None:
    """``"disagg P: 1 worker(s) x TP1 EP8 DPattn=True (8 GPUs); D: 2 worker(s) x TP8 EP8 DPattn=False (16 GPUs)"``
    -> :class:`DisaggLayout`; None when the string is not in that form (e.g. LEGACY rows without worker
    counts). A pool whose GPU count is not a multiple of its worker count is not parsed either."""
    m = _DISAGG_LAYOUT.match(text.strip())
    if not m:
        return None
    g = m.groups()
    pools = []
    for role, (n, tp, ep, dpa, gpus) in (("prefill", g[:5]), ("decode", g[5:])):
        n_, gpus_ = int(n), int(gpus)
        if n_ < 1 or gpus_ < n_ or gpus_ % n_:
            return None
        pools.append(Pool(role, n_, int(tp), int(ep), dpa.lower() == "true", gpus_))
    return DisaggLayout(*pools)


#: MTP settings used for InferenceX ``spec_decoding=mtp`` rows: DeepSeek-R1 ships one MTP module
#: (``num_nextn_predict_layers: 1``), which a stack may run several times per step (one draft token per pass).
#: Draft tokens per step as the InferenceX scripts launch them (github.com/SemiAnalysisAI/InferenceX benchmarks/):
#: TensorRT-LLM ``dsr1_fp{4,8}_b200_trt_mtp.sh`` / ``dsr1_fp8_h200_trt_mtp.sh``: ``speculative_config: {decoding_type:
#: MTP, num_nextn_predict_layers: $MTP}`` with ``MTP=1`` under attention DP, else 3; SGLang ``dsr1_fp8_b200_mtp.sh``:
#: ``--speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-num-draft-tokens 3
#: --speculative-eagle-topk 1`` (2 draft tokens; no H200 SGLang MTP script was found: the same assumed); ATOM
#: ``--method mtp`` and the disaggregated stacks: not stated, 1 (:data:`MTP_TOKENS`). The acceptance is not published
#: (fitted: :mod:`jalapeno.calibration.mtp`); 0.75 by default (DeepSeek-V3 reports 0.85-0.9 for its one MTP token)
MTP_TOKENS = 1
MTP_SCRIPT_TOKENS = {"sglang": 2, "trt": 3}
MTP_ACCEPTANCE = (0.75,)


def mtp_draft_tokens(framework: str, layout: "Layout", disaggregated: bool = False) -> int:
    """Draft tokens per step an InferenceX MTP run launched with (:data:`MTP_SCRIPT_TOKENS`): TensorRT-LLM 3, or 1
    with attention data parallelism; SGLang 2; everything else (ATOM, disaggregated stacks) :data:`MTP_TOKENS`."""
    if disaggregated or framework not in MTP_SCRIPT_TOKENS:
        return MTP_TOKENS
    if framework == "trt" and layout.dp_attention:
        return 1
    return MTP_SCRIPT_TOKENS[framework]


def to_sim_spec(p: Point) -> SimSpec | Excluded:
    """Simulator inputs for ``p``, or why it is not predicted."""
    src = p.source
    if src.startswith("MLPERF"):
        return Excluded("MLPerf dataset: input-length distribution not given in the row")
    model = map_model(p.col("model"))
    if model is None:
        return Excluded(f"model not in catalogue ({p.col('model')})")
    chip = map_chip(p.col("hardware")) if src != "BENCH" else _catalogue_chip(p.col("hardware"))
    if chip is None:
        return Excluded(f"chip not in catalogue ({p.col('hardware')})")
    notes = p.col("notes")
    isl, osl = _int(p.col("isl")), _int(p.col("osl"))
    if isl is None or osl is None:
        return Excluded("lengths not given")
    weights = map_weights(p.col("precision"), model)
    fam = framework_family(p.col("framework"))
    if src in ("IXAPI", "IXRUN"):
        conc = _int(p.col("concurrency_or_batch"))
        disagg = None
        if "disagg=True" in notes:
            disagg = parse_disagg_layout(p.col("parallelism"))
            if disagg is None:
                legacy = "legacy" in p.col("parallelism").lower() or "worker" not in p.col("parallelism")
                return Excluded("InferenceX disaggregated LEGACY layout (no worker counts)" if legacy
                                else "disaggregated layout not parsable")
            layout: Layout | None = disagg.decode.layout
        else:
            layout = parse_layout(p.col("parallelism"))
        if layout is None or conc is None:
            return Excluded("layout or concurrency not parsable")
        k = mtp_draft_tokens(fam, layout, disagg is not None) if "spec_decoding=mtp" in notes else 0
        return SimSpec(model, chip, layout, weights, "bf16", isl, osl, conc, 0.8,
                       spec_tokens=k, spec_acceptance=mtp_acceptance(model, fam) * k,
                       kind="ix", framework=fam, disagg=disagg)
    # TRT-LLM and NIM serve NVIDIA's ModelOpt FP8 checkpoints (nvidia/<model>-FP8), whose quantization config
    # also stores the KV cache in FP8 (kv_cache_quant_algo FP8); native FP8/MXFP4 checkpoints keep a 16-bit KV
    kv = "fp8" if weights == "fp8" else "bf16"
    if src == "TRTLLM":
        layout = parse_layout(p.col("parallelism"))
        if layout is None:
            return Excluded("layout not parsable")
        return SimSpec(model, chip, layout, weights, kv, isl, osl, None, 1.0, kind="offline", framework="trt")
    if src == "BENCH":  # jalapeno bench result (jalapeno.calibration.inputs.read_bench_json)
        layout, conc = parse_layout(p.col("parallelism")), _int(p.col("concurrency_or_batch"))
        if layout is None or conc is None:
            return Excluded("layout or concurrency not parsable")
        opts = dict(kv.split("=", 1) for kv in notes.replace(" ", "").split(";") if "=" in kv)
        return SimSpec(model, chip, layout, weights, "bf16", isl, osl, conc, float(opts.get("range_ratio", 0.8)),
                       num_prompts_per_concurrency=int(opts.get("prompts_per_concurrency", 10)), kind="ix",
                       framework=fam)
    if src == "NIM":
        layout = parse_layout(p.col("parallelism"))
        conc = _int(p.col("concurrency_or_batch"))
        if layout is None or conc is None:
            return Excluded("layout or concurrency not parsable")
        return SimSpec(model, chip, layout, weights, kv, isl, osl, conc, 1.0, kind="nim", framework="nim")
    return Excluded(f"unknown source {src}")


def config_key(spec: SimSpec) -> tuple:
    """Points with the same key are the same configuration measured on different dates / framework versions
    (InferenceX reruns): same model, chip, layout, precision, workload, framework family and spec decoding (MTP on
    or off: its draft length follows from the framework and layout, :func:`mtp_draft_tokens`; 1 keeps the keys, and so
    the seeded random splits, what they were when every MTP row ran one draft token)."""
    return (spec.model, spec.chip, spec.layout, spec.weights, spec.kv, spec.isl, spec.osl, spec.concurrency,
            spec.range_ratio, spec.kind, spec.framework, min(spec.spec_tokens, 1), spec.disagg)
