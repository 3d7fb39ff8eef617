"""Benchmark workloads: ``random`` (InferenceX / vLLM random lengths), ``fixed`` and a JSONL / ShareGPT file.

Prompts of the synthetic datasets are random tokens, as in InferenceX:
  * ``/v1/completions`` without a tokenizer: a list of token ids drawn uniformly from ``[100, vocab_size)``
    (low ids, where tokenizers keep special tokens, are avoided); the prompt length is exact.
  * with a tokenizer (``--tokenizer``, a local Hugging Face tokenizer folder): random non-special ids decoded to
    text, for either endpoint, then re-encoded and trimmed (or topped up) until the text encodes to the
    intended length, as vLLM's random dataset does (decoded ids alone come out 5-8% longer).
  * ``chat`` without a tokenizer: common English words, one per intended token (each is one token in the usual
    BPE vocabularies, so the length is close; a whitespace-counting server sees it exactly).
The server's ``usage.prompt_tokens`` is what the report counts whenever the server sends it.
Lengths and arrivals come from :mod:`jalapeno.workload`, the same functions the simulator uses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from jalapeno.bench.client import BenchRequest, Endpoint
from jalapeno.errors import ConfigError

DatasetName = Literal["random", "fixed", "file"]
RangeMode = Literal["ix", "vllm"]

#: short, frequent English words; with a leading space each is a single token in GPT-2/Llama/SmolLM BPEs
_WORDS = (
    "the of and to in is was for on that with as by at from his her it an are were which be this had not or "
    "but have one all their they has been its new more who can would also time there first two after other "
    "may into over many some years most only when will made any these then could out about than them where "
    "such both each well three used work very much under part city state world made year since later while"
).split()


@dataclass(frozen=True)
class WorkloadSpec:
    """What to generate. Lengths are tokens."""

    dataset: DatasetName = "random"
    num_prompts: int = 10
    input_len: int = 1024
    output_len: int = 1024
    #: InferenceX ``ix``: lengths uniform in [r·L, L]; vLLM ``vllm``: in [L·(1−r), L·(1+r)]
    range_ratio: float = 0.8
    range_mode: RangeMode = "ix"
    dataset_path: Path | None = None
    #: for ``file``: when True every request asks for ``output_len`` tokens, else the file decides
    fixed_output_len: bool = False
    vocab_size: int = 32000
    seed: int = 0

    def validate(self) -> None:
        if self.num_prompts <= 0:
            raise ConfigError(f"--num-prompts must be > 0 (got {self.num_prompts})")
        if self.input_len <= 0 or self.output_len <= 0:
            raise ConfigError("--input-len and --output-len must be > 0")
        if self.dataset == "file" and self.dataset_path is None:
            raise ConfigError("the 'file' dataset needs --dataset-path (a .jsonl or ShareGPT .json file)")
        if self.vocab_size <= 200:
            raise ConfigError(f"--vocab-size must be > 200 (got {self.vocab_size})")


def workload_lengths(spec: WorkloadSpec) -> tuple[np.ndarray, np.ndarray]:
    """Per-request (input, output) lengths for the synthetic datasets, from the shared workload module."""
    from jalapeno.workload import sample_lengths

    fixed = spec.dataset == "fixed"  # InferenceX range [r·L, L] with r = 1 is exactly L
    isl, osl = sample_lengths(
        spec.num_prompts,
        spec.input_len,
        spec.output_len,
        1.0 if fixed else spec.range_ratio,
        mode="ix" if fixed else spec.range_mode,
        seed=spec.seed,
    )
    return np.asarray(isl, dtype=np.int64), np.asarray(osl, dtype=np.int64)


def build_requests(spec: WorkloadSpec, endpoint: Endpoint, tokenizer: Any = None) -> list[BenchRequest]:
    """The benchmark's requests, deterministic in ``spec.seed``."""
    spec.validate()
    if spec.dataset == "file":
        assert spec.dataset_path is not None
        return _file_requests(spec, endpoint, tokenizer)
    isl, osl = workload_lengths(spec)
    rng = np.random.default_rng(spec.seed + 1)
    pool = _token_pool(tokenizer, spec.vocab_size)
    reqs = []
    for n_in, n_out in zip(isl.tolist(), osl.tolist()):
        if tokenizer is not None:
            text, n_text = _text_of_length(tokenizer, rng, pool, int(n_in))
            reqs.append(BenchRequest(text, n_text, int(n_out)))
        else:
            reqs.append(BenchRequest(_random_prompt(rng, n_in, endpoint, pool), int(n_in), int(n_out)))
    return reqs


def _token_pool(tokenizer: Any, vocab_size: int) -> np.ndarray:
    if tokenizer is None:
        return np.arange(100, vocab_size, dtype=np.int64)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    ids = np.arange(len(tokenizer), dtype=np.int64)
    return ids[~np.isin(ids, list(special))] if special else ids


def _text_of_length(
    tokenizer: Any, rng: np.random.Generator, pool: np.ndarray, n: int, tries: int = 10
) -> tuple[str, int]:
    """Random text that encodes to ``n`` tokens (vLLM's decode → re-encode → trim / top up loop); returns the
    text and its token count (``n`` unless ``tries`` rounds did not settle)."""
    ids = rng.choice(pool, size=n).tolist()
    for _ in range(tries):
        text = tokenizer.decode(ids)
        ids = list(tokenizer.encode(text, add_special_tokens=False))
        if len(ids) == n:
            break
        ids = ids[:n] if len(ids) > n else ids + rng.choice(pool, size=n - len(ids)).tolist()
    else:
        text = tokenizer.decode(ids)
        ids = list(tokenizer.encode(text, add_special_tokens=False))
    return text, len(ids)


def _random_prompt(rng: np.random.Generator, n: int, endpoint: Endpoint, pool: np.ndarray):
    if endpoint == "completions":
        return rng.choice(pool, size=n).tolist()
    words = rng.choice(len(_WORDS), size=n)
    return " ".join(_WORDS[i] for i in words)


# ---------------------------------------------------------------------------------------------------------
# File datasets
# ---------------------------------------------------------------------------------------------------------
def _count(text: str, tokenizer: Any) -> int:
    if tokenizer is not None:
        return len(tokenizer.encode(text, add_special_tokens=False))
    return len(text.split())


def _record(rec: Any, where: str) -> tuple[str | list[int], str | None, int | None]:
    """(prompt, reference reply or None, explicit output length or None) of one file record."""
    if not isinstance(rec, dict):
        raise ConfigError(f"{where}: each record must be a JSON object with 'prompt' or 'conversations'")
    explicit = rec.get("output_len", rec.get("max_tokens"))
    if explicit is not None and (not isinstance(explicit, int) or explicit <= 0):
        raise ConfigError(f"{where}: 'output_len' must be a positive integer")
    if "prompt" in rec:
        p = rec["prompt"]
        if not (isinstance(p, str) or (isinstance(p, list) and all(isinstance(t, int) for t in p))):
            raise ConfigError(f"{where}: 'prompt' must be text or a list of token ids")
        return p, rec.get("completion") or rec.get("response"), explicit
    conv = rec.get("conversations") or rec.get("messages")
    if isinstance(conv, list) and conv:
        turns = [
            (t.get("from") or t.get("role"), t.get("value") or t.get("content")) for t in conv if isinstance(t, dict)
        ]
        user = next((v for r, v in turns if r in ("human", "user") and isinstance(v, str)), None)
        reply = next((v for r, v in turns if r in ("gpt", "assistant") and isinstance(v, str)), None)
        if user:
            return user, reply, explicit
    raise ConfigError(f"{where}: no 'prompt' and no user turn in 'conversations'/'messages'")


def _file_requests(spec: WorkloadSpec, endpoint: Endpoint, tokenizer: Any) -> list[BenchRequest]:
    path = Path(spec.dataset_path)  # type: ignore[arg-type]
    if not path.is_file():
        raise ConfigError(f"dataset file '{path}' not found")
    text = path.read_text(encoding="utf-8")
    try:
        if text.lstrip().startswith("["):
            records = json.loads(text)
        else:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise ConfigError(f"dataset file '{path}': not JSON / JSON Lines ({exc.msg} at line {exc.lineno})") from None
    if not records:
        raise ConfigError(f"dataset file '{path}' holds no records")
    parsed = [_record(r, f"{path.name} record {i + 1}") for i, r in enumerate(records)]
    order = np.random.default_rng(spec.seed).permutation(len(parsed))
    reqs: list[BenchRequest] = []
    for k in range(spec.num_prompts):  # shuffled, cycling when the file is shorter than --num-prompts
        prompt, reply, explicit = parsed[int(order[k % len(parsed)])]
        if isinstance(prompt, list) and endpoint == "chat":
            if tokenizer is None:
                raise ConfigError("token-id prompts on the chat endpoint need --tokenizer to decode them")
            prompt = tokenizer.decode(prompt)
        n_in = len(prompt) if isinstance(prompt, list) else _count(prompt, tokenizer)
        if spec.fixed_output_len or (explicit is None and not reply):
            n_out = spec.output_len
        else:
            n_out = explicit if explicit is not None else max(1, _count(reply, tokenizer))  # type: ignore[arg-type]
        reqs.append(BenchRequest(prompt, max(1, n_in), int(n_out)))
    return reqs


def load_tokenizer(path: str | None) -> Any:
    """A local Hugging Face tokenizer (folder or cached name; never downloads), or None."""
    if not path:
        return None
    try:
        from transformers import AutoTokenizer
    except ImportError:  # pragma: no cover - transformers is in the [torch] extra
        raise ConfigError("--tokenizer needs the 'transformers' package (pip install jalapeno[torch])") from None
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - many loader errors; one clear line
        raise ConfigError(f"cannot load tokenizer '{path}' locally: {str(exc).splitlines()[0][:200]}") from None
