"""``jalapeno generate`` on a tiny checkpoint: JSON output equals transformers greedy; user errors exit 2
with one line."""

from __future__ import annotations

import json

import pytest


from jalapeno.testing.torch_models import hf_greedy, run_generate


_run = run_generate


@pytest.mark.parametrize("layout", ["auto", "batched", "single"])
def test_generate_json_matches_transformers(tiny_model, capsys, layout):
    hf, path = tiny_model("qwen2")
    code, out, _ = _run(["--model", str(path), "--prompt-token-ids", "5,17,99,3", "--max-tokens", "12", "--json",
                         "--weight-layout", layout], capsys)
    assert code == 0
    result = json.loads(out)
    assert result["token_ids"] == hf_greedy(hf, [5, 17, 99, 3], 12)
    assert result["text"] is None  # the tiny checkpoint has no tokenizer


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--device", "cuda"], "cuda"),
        (["--model", "/nonexistent/model"], "does not exist"),
        (["--prompt-token-ids", "1,x"], "comma-separated"),
        (["--prompt-token-ids", "1,999"], "vocabulary"),
        (["--dtype", "int3"], "dtype"),
        (["--weight-layout", "diagonal"], "--weight-layout"),
    ],
)
def test_generate_user_errors(tiny_model, capsys, args, needle):
    _, path = tiny_model("qwen2")
    base = ["--model", str(path), "--prompt-token-ids", "1,2"]
    code, _, err = _run(base + args if "--model" not in args else args + ["--prompt-token-ids", "1,2"], capsys)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1


def test_prompt_longer_than_context(tiny_model, capsys):
    _, path = tiny_model("qwen2")  # max_position_embeddings = 256
    ids = ",".join(["1"] * 300)
    code, _, err = _run(["--model", str(path), "--prompt-token-ids", ids], capsys)
    assert code == 2 and "max_model_len" in err


def test_corrupt_or_mismatched_weights(tiny_model, tmp_path, capsys):
    _, path = tiny_model("qwen2")
    bad = tmp_path / "corrupt"
    bad.mkdir()
    (bad / "config.json").write_text((path / "config.json").read_text())
    (bad / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    code, _, err = _run(["--model", str(bad), "--prompt-token-ids", "1"], capsys)
    assert code == 2 and "corrupt" in err
    mismatch = tmp_path / "mismatch"
    mismatch.mkdir()
    cfg = json.loads((path / "config.json").read_text())
    cfg["intermediate_size"] = 128
    (mismatch / "config.json").write_text(json.dumps(cfg))
    (mismatch / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes())
    code, _, err = _run(["--model", str(mismatch), "--prompt-token-ids", "1"], capsys)
    assert code == 2 and "do not match" in err


@pytest.mark.parametrize("family, fused", [("qwen2", True), ("gpt_oss", False)])
def test_auto_layout_one_prompt(tiny_model, capsys, monkeypatch, family, fused):
    """One prompt on CPU: a model the fused decode kernel covers keeps row-major weights and decodes through
    the kernel; any other model is re-laid out "single" for the PyTorch one-row GEMVs."""
    import jalapeno.backends.torch.models.layers as layers
    import jalapeno.backends.torch.runner as runner

    hf, path = tiny_model(family)
    kernel_calls, layouts = [], []
    real_step, real_layout = runner.fused_decode_step, layers.set_weight_layout
    monkeypatch.setattr(runner, "fused_decode_step", lambda *a, **k: kernel_calls.append(1) or real_step(*a, **k))
    monkeypatch.setattr(layers, "set_weight_layout", lambda m, lay: layouts.append(lay) or real_layout(m, lay))
    code, out, _ = _run(["--model", str(path), "--prompt-token-ids", "5,17,99,3", "--max-tokens", "8", "--json"],
                        capsys)
    assert code == 0 and json.loads(out)["token_ids"] == hf_greedy(hf, [5, 17, 99, 3], 8)
    assert bool(kernel_calls) == fused
    assert ("single" in layouts) == (not fused)


def test_generate_says_what_it_loads_and_its_speed(tiny_model, capsys):
    """Progress and tokens/s go to stderr; stdout stays the JSON alone. The count is the tokens generated."""
    _, path = tiny_model("qwen2")
    code, out, err = _run(["--model", str(path), "--prompt-token-ids", "5,17,99,3", "--max-tokens", "7", "--json",
                           "--ignore-eos"], capsys, progress=True)
    assert code == 0 and len(json.loads(out)["token_ids"]) == 7
    assert f"loading {path}" in err and "loaded in" in err
    assert "7 tokens in" in err and "tok/s" in err
