"""`jalapeno hardware list|show` and user chip directories (--hardware-dir, JALAPENO_HARDWARE_PATH)."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from jalapeno.cli import main
from jalapeno.hardware import get_chip, iter_facts, list_chips, load_catalog

ALL_KEYS = {"h100", "h200", "b200", "b300", "gb200", "gb300", "vera-rubin", "groq-lpu", "groq-lp30", "tpu-v5e",
            "tpu-v6e", "tpu-v7", "tpu-8t", "tpu-8i", "mi300x", "mi325x", "mi355x", "trainium2", "inferentia2",
            "cerebras-wse3", "mtia-v2", "jalapeno"}


def run(capsys, *args: str) -> str:
    try:
        main(list(args))
    except SystemExit as exc:  # typer may exit 0 explicitly
        assert exc.code in (0, None), capsys.readouterr().err
    return capsys.readouterr().out


def test_list_json_contains_every_chip_with_summary(capsys):
    data = json.loads(run(capsys, "hardware", "list", "--json"))
    by_key = {d["key"]: d for d in data}
    assert ALL_KEYS <= set(by_key)
    for d in data:
        for field in ("name", "key", "vendor", "status", "peak_tflops", "memory", "tdp_w", "sources"):
            assert field in d, (d["key"], field)
        assert d["memory"] and {"name", "kind", "capacity_gb", "bandwidth_tbps"} <= set(d["memory"][0])
        assert all(s["source"] and s["status"] for s in d["sources"])
    h200 = by_key["h200"]
    assert h200["peak_tflops"]["bf16"] == 989 and h200["tdp_w"] == 700
    assert {"name": "hbm", "kind": "hbm", "capacity_gb": 150.75, "bandwidth_tbps": 4.8}.items() <= \
        next(m for m in h200["memory"] if m["name"] == "hbm").items()
    # one source entry per Fact in the spec
    assert len(h200["sources"]) == len(list(iter_facts(get_chip("h200"))))


def test_list_table_shows_every_chip(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "260")
    out = run(capsys, "hardware", "list")
    for key in ALL_KEYS:
        assert key in out


def test_show_table_has_sources(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "260")
    out = run(capsys, "hardware", "show", "Jalapeño")
    assert "jalapeno" in out and "inferred" in out and "seed" in out and "FIT PARAMETERS" in out
    assert "compute_tflops.fp8" in out and "power.loaded_w" in out


def test_show_json_is_full_model_plus_summary(capsys):
    d = json.loads(run(capsys, "hardware", "show", "gb300", "--json"))
    assert d["key"] == "gb300" and d["compute_tflops"]["fp4"]["value"] == 15000
    assert d["peak_tflops"]["fp4"] == 15000 and d["tdp_w"] == 1400 and d["sources"]
    assert d["efficiency"]["compute"] and d["energy"]["pj_per_flop"]
    assert d["memory"][1]["bandwidth_tbps"]["source"].startswith("http")  # full model keeps its Facts


def _user_chip(h200_data: dict, key: str = "my-chip") -> dict:
    h200_data.update(key=key, name="My Test Chip", aliases=["mine", "my_alias"])
    h200_data["compute_tflops"]["bf16"]["value"] = 1234.0
    return h200_data


def test_hardware_dir_adds_a_chip(h200_data, write_spec, capsys):
    path = write_spec(_user_chip(h200_data), "my-chip.yaml")
    assert get_chip("mine", extra_dirs=[path.parent]).peak_flops("bf16") == 1234e12
    assert "my-chip" not in load_catalog()  # not there without the directory
    d = json.loads(run(capsys, "hardware", "show", "my alias", "--hardware-dir", str(path.parent), "--json"))
    assert d["key"] == "my-chip" and d["file"].endswith("my-chip.yaml")
    keys = {c["key"] for c in json.loads(run(capsys, "hardware", "list", "--json", "--hardware-dir", str(path.parent)))}
    assert keys >= ALL_KEYS | {"my-chip"}


def test_env_path_adds_a_chip(h200_data, write_spec, monkeypatch, capsys, tmp_path):
    path = write_spec(_user_chip(h200_data), "my-chip.yaml")
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("JALAPENO_HARDWARE_PATH", os.pathsep.join([str(empty), str(path.parent)]))
    assert get_chip("MY-CHIP").name == "My Test Chip"
    assert "my-chip" in {c.key for c in list_chips()}
    d = json.loads(run(capsys, "hardware", "show", "mine", "--json"))
    assert d["peak_tflops"]["bf16"] == 1234


def test_user_chip_overrides_builtin_of_same_key(h200_data, write_spec, monkeypatch, tmp_path):
    path = write_spec(_user_chip(h200_data, key="h200"), "h200.yaml")
    cat = load_catalog([path.parent])
    assert cat.resolve("h200").peak_flops("bf16") == 1234e12
    assert cat.origin["h200"] == path
    assert len(cat) == len(load_catalog())  # replaced, not added
    # --hardware-dir is applied after JALAPENO_HARDWARE_PATH, so the flag wins
    other = tmp_path / "other"
    other.mkdir()
    data = dict(h200_data)
    data["compute_tflops"] = {**data["compute_tflops"], "bf16": {**data["compute_tflops"]["bf16"], "value": 999.0}}
    (other / "h200.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    monkeypatch.setenv("JALAPENO_HARDWARE_PATH", str(other))
    assert get_chip("h200").peak_flops("bf16") == 999e12
    assert get_chip("h200", extra_dirs=[path.parent]).peak_flops("bf16") == 1234e12


def test_builtin_catalogue_is_not_mutated_by_user_dirs(h200_data, write_spec):
    path = write_spec(_user_chip(h200_data, key="h200"), "h200.yaml")
    load_catalog([path.parent])
    assert get_chip("h200").peak_flops("bf16") == pytest.approx(989e12)


def test_docs_yaml_example_is_a_valid_chip(tmp_path):
    """The 'adding a chip' example in docs/hardware.md must load as written."""
    from pathlib import Path

    doc = Path(__file__).resolve().parents[2] / "docs" / "hardware.md"
    if not doc.exists():
        pytest.skip("docs/hardware.md not present")
    blocks = doc.read_text(encoding="utf-8").split("```yaml\n")[1:]
    assert blocks, "docs/hardware.md has no yaml example"
    (tmp_path / "my-chip.yaml").write_text(blocks[0].split("```")[0], encoding="utf-8")
    spec = get_chip("mine", extra_dirs=[tmp_path])
    assert spec.key == "my-chip" and spec.peak_flops("fp8") == 2000e12 and spec.efficiency.compute["bf16"] == 0.75
