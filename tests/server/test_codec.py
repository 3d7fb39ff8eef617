"""Incremental detokenisation and stop strings, checked against whole-string references."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jalapeno.server.codec import PlaceholderCodec, StopStrings, TokenizerCodec

CORPUS = ["héllo wörld, naïve café", "日本語のテキスト", "emoji 🙂🚀 mixed text", "plain ascii words here"] * 5


@pytest.fixture(scope="module")
def byte_bpe():
    """A tiny byte-level BPE trained in memory: multi-byte characters span several tokens."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<eos>"], initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")


@pytest.mark.parametrize("text", ["héllo wörld 🙂 and 日本語", "café 🚀🚀 naïve", "ascii only"])
@pytest.mark.parametrize("step", [1, 2, 3])
def test_incremental_detok_matches_full_decode(byte_bpe, text, step):
    codec = TokenizerCodec(byte_bpe)
    prompt = codec.encode("prompt: ")
    ids = codec.encode(text)
    assert len(ids) > len(text.split())  # really split inside words/characters
    detok = codec.detokenizer(prompt)
    pieces = [detok.push(ids[i : i + step], len(ids[i : i + step])) for i in range(0, len(ids), step)]
    assert "".join(pieces) == byte_bpe.decode(ids)
    assert all("\ufffd" not in p for p in pieces)


def test_eos_is_not_text(byte_bpe):
    codec = TokenizerCodec(byte_bpe)
    eos = byte_bpe.eos_token_id
    assert codec.eos_token_ids == (eos,)
    detok = codec.detokenizer([])
    assert detok.push(codec.encode("ok") + [eos], 2) == "ok"


def test_placeholder_codec_counts_and_numbers_tokens():
    c = PlaceholderCodec()
    assert c.prompt_len("one  two\tthree\nfour") == 4
    assert c.prompt_len("") == 1  # never an empty prompt
    d = c.detokenizer(None)
    assert d.push([], 2) + d.push([], 1) == " tok0 tok1 tok2"


@settings(max_examples=200, deadline=None, database=None)
@given(
    text=st.text(alphabet="abc ", max_size=40),
    stops=st.lists(st.text(alphabet="abc ", min_size=1, max_size=4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 40), max_size=8),
)
def test_stop_strings_stream_equals_whole_text_cut(text, stops, cuts):
    # reference, character by character: stop at the first end position where some stop string ends
    # (the longest such string when several end there) and keep the text before it
    expected, idx = text, []
    for end in range(1, len(text) + 1):
        idx = [end - len(s) for s in stops if text.endswith(s, 0, end)]
        if idx:
            expected = text[: min(idx)]
            break
    bounds = sorted({0, len(text), *[c for c in cuts if c <= len(text)]})
    s = StopStrings(stops)
    out = ""
    for a, b in zip(bounds, bounds[1:]):
        out += s.feed(text[a:b])
        if s.stopped:
            break
    if not s.stopped:
        out += s.flush()
    assert out == expected
    assert s.stopped == bool(idx)


@given(st.text(min_size=1, max_size=200))
@settings(max_examples=60, deadline=None)
def test_min_prompt_len_is_a_lower_bound(byte_bpe, text):
    """The early too-long check never rejects what tokenisation would accept."""
    codec = TokenizerCodec(byte_bpe)
    assert codec.min_prompt_len(text, 10) <= len(codec.encode(text))
