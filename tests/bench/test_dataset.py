"""Bench workloads: InferenceX / vLLM length ranges, fixed lengths, JSONL and ShareGPT files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from jalapeno.bench.dataset import WorkloadSpec, build_requests, workload_lengths
from jalapeno.errors import ConfigError


def test_inferencex_range_is_rL_to_L():
    reqs = build_requests(WorkloadSpec(num_prompts=400, input_len=1000, output_len=200, range_ratio=0.8), "completions")
    isl = np.array([r.prompt_len for r in reqs])
    osl = np.array([r.output_len for r in reqs])
    assert isl.min() >= 800 and isl.max() <= 1000 and osl.min() >= 160 and osl.max() <= 200
    assert abs(isl.mean() - 900) < 15  # uniform on [0.8 L, L]: mean 0.9 L
    # completions without a tokenizer: token-id prompts of exactly the intended length
    assert all(isinstance(r.prompt, list) and len(r.prompt) == r.prompt_len for r in reqs)
    assert all(100 <= t < 32000 for r in reqs for t in r.prompt)


def test_vllm_range_is_L_times_one_plus_minus_r():
    reqs = build_requests(
        WorkloadSpec(num_prompts=400, input_len=1000, output_len=100, range_ratio=0.5, range_mode="vllm"), "completions"
    )
    isl = np.array([r.prompt_len for r in reqs])
    assert isl.min() >= 500 and isl.max() <= 1500 and isl.max() > 1100 and isl.min() < 900


def test_fixed_lengths_and_determinism():
    spec = WorkloadSpec(dataset="fixed", num_prompts=5, input_len=12, output_len=7, seed=3)
    a, b = build_requests(spec, "completions"), build_requests(spec, "completions")
    assert [(r.prompt_len, r.output_len) for r in a] == [(12, 7)] * 5
    assert [r.prompt for r in a] == [r.prompt for r in b]


def test_chat_without_tokenizer_sends_one_word_per_token():
    reqs = build_requests(WorkloadSpec(dataset="fixed", num_prompts=3, input_len=20, output_len=4), "chat")
    assert all(isinstance(r.prompt, str) and len(r.prompt.split()) == 20 for r in reqs)


def test_jsonl_file(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"prompt": "a b c", "output_len": 5}\n\n{"prompt": [1, 2, 3, 4], "max_tokens": 2}\n')
    reqs = build_requests(WorkloadSpec(dataset="file", dataset_path=p, num_prompts=4), "completions")
    got = sorted((r.prompt_len, r.output_len) for r in reqs)
    assert got == [(3, 5), (3, 5), (4, 2), (4, 2)]  # cycled to --num-prompts


def test_sharegpt_file_and_output_override(tmp_path):
    p = tmp_path / "sg.json"
    data = [
        {
            "conversations": [
                {"from": "human", "value": "tell me a story"},
                {"from": "gpt", "value": "once upon a time there was"},
            ]
        }
    ]
    p.write_text(json.dumps(data))
    r = build_requests(WorkloadSpec(dataset="file", dataset_path=p, num_prompts=1), "chat")[0]
    assert (r.prompt, r.prompt_len, r.output_len) == ("tell me a story", 4, 6)
    fixed = WorkloadSpec(dataset="file", dataset_path=p, num_prompts=1, output_len=9, fixed_output_len=True)
    assert build_requests(fixed, "chat")[0].output_len == 9


@pytest.mark.parametrize(
    "content",
    ['{"prompt": "x"', '[{"nothing": 1}]', '{"prompt": "x", "output_len": -1}', "", '{"prompt": [1, "a"]}'],
)
def test_bad_files_are_config_errors(tmp_path, content):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(ConfigError):
        build_requests(WorkloadSpec(dataset="file", dataset_path=p, num_prompts=2), "completions")


def test_missing_file_and_token_ids_on_chat(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        build_requests(WorkloadSpec(dataset="file", dataset_path=tmp_path / "no.jsonl"), "completions")
    p = tmp_path / "ids.jsonl"
    p.write_text('{"prompt": [1, 2]}\n')
    with pytest.raises(ConfigError, match="tokenizer"):
        build_requests(WorkloadSpec(dataset="file", dataset_path=p, num_prompts=1), "chat")


def test_invalid_specs():
    with pytest.raises(ConfigError):
        build_requests(WorkloadSpec(num_prompts=0), "completions")
    with pytest.raises(ConfigError):
        build_requests(WorkloadSpec(range_ratio=0.0), "completions")  # [0, L] is no InferenceX range
    assert math.isfinite(WorkloadSpec().range_ratio)


def test_tokenizer_prompts_encode_to_the_intended_length():
    """Decoded random ids re-tokenise longer or shorter; like vLLM, the prompts are re-encoded and trimmed so
    the server sees the asked length (checked with the tokenizer itself)."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    corpus = ["the quick brown fox jumps over the lazy dog", "naïve café 日本語 🙂", "lorem ipsum dolor sit amet"] * 20
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=400, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    spec = WorkloadSpec(dataset="random", num_prompts=20, input_len=200, output_len=8, range_ratio=0.5)
    reqs = build_requests(spec, "completions", hf)
    isl, _ = workload_lengths(spec)
    naive = [len(hf.encode(hf.decode(np.random.default_rng(i).choice(400, n).tolist()), add_special_tokens=False))
             for i, n in enumerate(isl.tolist())]
    target = isl.sum()
    assert abs(sum(naive) - target) / target > 0.02  # the problem is real for this tokenizer
    got = [len(hf.encode(r.prompt, add_special_tokens=False)) for r in reqs]
    assert got == [r.prompt_len for r in reqs]  # the reported length is the real one
    # random bytes of a byte-level vocabulary decode to replacement characters: most settle exactly, the
    # rest within a token or two
    assert sum(g == n for g, n in zip(got, isl.tolist())) >= 0.6 * len(reqs)
    assert max(abs(g - n) for g, n in zip(got, isl.tolist())) <= 2
