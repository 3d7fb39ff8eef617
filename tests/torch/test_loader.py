"""Weight loading: sharded safetensors, GGUF name mapping and llama.cpp's Q/K row permutation."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from jalapeno.backends.torch.loader import gguf_to_hf_name, load_model, unpermute_rope_rows
from jalapeno.errors import JalapenoError


def test_sharded_safetensors_load_like_a_single_file(tiny_model, tmp_path):
    hf, path = tiny_model("llama")
    sharded = tmp_path / "sharded"
    hf.save_pretrained(sharded, max_shard_size="50KB")
    assert (sharded / "model.safetensors.index.json").exists()
    assert len(set(json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"].values())) > 1
    one, many = load_model(path).model.state_dict(), load_model(sharded).model.state_dict()
    assert one.keys() == many.keys()
    for k in one:
        torch.testing.assert_close(one[k], many[k], rtol=0, atol=0)


def test_llama_cpp_permutation_is_undone():
    # llama.cpp's convert_hf_to_gguf permutes Q/K rows per head: reshape(heads, 2, d/2, in).swapaxes(1, 2)
    heads, d, cols = 3, 8, 5
    w = np.arange(heads * d * cols, dtype=np.float32).reshape(heads * d, cols)
    permuted = w.reshape(heads, 2, d // 2, cols).swapaxes(1, 2).reshape(w.shape)
    assert not np.array_equal(permuted, w)
    np.testing.assert_array_equal(unpermute_rope_rows(torch.from_numpy(permuted), heads).numpy(), w)


def test_gguf_names():
    assert gguf_to_hf_name("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight"
    assert gguf_to_hf_name("blk.0.ffn_down.weight") == "model.layers.0.mlp.down_proj.weight"
    assert gguf_to_hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert gguf_to_hf_name("blk.0.something_new") is None


def test_unsupported_and_missing_models(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 8}))
    with pytest.raises(JalapenoError, match="unsupported model_type 'bert'"):
        load_model(tmp_path)
    with pytest.raises(JalapenoError, match="does not exist"):
        load_model(tmp_path / "nope")
