"""``jalapeno models list|show`` through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

from jalapeno.cli import main


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = 0
    try:
        main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_json(capsys):
    code, out, _ = run(capsys, "models", "list", "--json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert len(rows) == 19
    assert rows["gpt-oss-120b"]["experts"] == "4/128"
    assert rows["deepseek-r1"]["experts"] == "8/256+1s"
    assert rows["llama-3.1-8b"]["max_context"] == 131072


def test_list_table(capsys):
    code, out, _ = run(capsys, "models", "list")
    assert code == 0
    for name in ("deepseek-r1", "kimi-k2.5", "smollm2-135m", "671.03B", "mxfp4"):
        assert name in out


def test_show_deepseek_r1_json(capsys):
    code, out, _ = run(capsys, "models", "show", "deepseek-r1", "--json")
    assert code == 0
    rec = json.loads(out)
    assert abs(rec["total_params"] / 671e9 - 1) < 0.01
    assert abs(rec["active_params"] / 37e9 - 1) < 0.015  # 36.6B; "37B" as published
    assert abs(rec["mtp_params"] / 11.5e9 - 1) < 0.01
    assert rec["kv_bytes_per_token"] == 61 * 576 * 2
    assert rec["native_weight_dtype"] == "fp8"
    assert rec["weight_bytes"]["bf16"] == 2 * rec["total_params"]
    assert rec["arch"]["kv_lora_rank"] == 512 and rec["arch"]["num_experts"] == 256
    assert rec["provenance"]["sources"]


def test_show_context_and_fp8_kv(capsys):
    code, out, _ = run(capsys, "models", "show", "openai/gpt-oss-120b", "--kv-dtype", "fp8", "--context", "8192",
                       "--json")
    assert code == 0
    rec = json.loads(out)
    per_layer = 2 * 8 * 64 * 1  # fp8
    assert rec["kv_bytes_per_sequence"] == 18 * per_layer * (8192 + 128)
    assert rec["kv_bytes_per_token"] == pytest.approx(18 * per_layer * (8192 + 128) / 8192)


def test_show_table_and_path(capsys, tmp_path):
    code, out, _ = run(capsys, "models", "show", "qwen3-30b-a3b")
    assert code == 0 and "total params" in out and "30.53B" in out
    _, named, _ = run(capsys, "models", "show", "mixtral-8x7b", "--json")
    (tmp_path / "config.json").write_text(json.dumps(_mixtral_config()))
    code, out, _ = run(capsys, "models", "show", str(tmp_path), "--json")
    assert code == 0 and json.loads(out)["total_params"] == json.loads(named)["total_params"]


def _mixtral_config() -> dict:
    from importlib import resources

    text = resources.files("jalapeno.models").joinpath("configs", "mixtral-8x7b.json").read_text()
    return json.loads(text)["config"]


@pytest.mark.parametrize("args,needle", [
    (("models", "show", "llama-9"), "unknown model"),
    (("models", "show", "deepseek-r1", "--kv-dtype", "fp4"), "kv-dtype"),
    (("models", "show", "deepseek-r1", "--context", "0"), "--context"),
    (("models", "show", "./missing/config.json"), "no such file"),
])
def test_errors_exit_2_one_line(capsys, args, needle):
    code, out, err = run(capsys, *args)
    assert code == 2
    assert needle in err and err.strip().count("\n") == 0 and "Traceback" not in err
