"""A designed chip's YAML is accepted by `sweep` and `recommend` through --hardware-dir (simulate: test_physical)."""

import json

import pytest

from jalapeno.cli import main
from jalapeno.design.physical import DesignKnobs, to_chipspec
from jalapeno.design.search import write_chip_yaml
from jalapeno.hardware.catalog import ENV_VAR


@pytest.fixture
def chip_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "")  # recorded, so the value the CLI adds in-process is undone after the test
    d = tmp_path / "chips"
    d.mkdir()
    write_chip_yaml(to_chipspec(DesignKnobs(key="d-test", fp8_tflops=1500, sram_mb=500, stacks=6)), d / "d-test.yaml")
    return d


def _main(capsys, *args):
    with pytest.raises(SystemExit) as e:
        main(list(args))
        raise SystemExit(0)
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    return out.out


def test_sweep_and_report_accept_a_designed_chip(tmp_path, chip_dir, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("models: [llama-3.1-8b]\nhardware: [d-test, h100]\nmax_chips: 1\nworkloads: [{isl: 128, osl: 32}]\n"
                    "concurrencies: [2]\nnum_prompts: 4\n")
    out = _main(capsys, "sweep", str(spec), "--out", str(tmp_path / "o"), "-j", "1", "-q", "--hardware-dir", str(chip_dir))
    assert "2 run (2 ok" in out
    _main(capsys, "report", str(tmp_path / "o"), "--hardware-dir", str(chip_dir))
    assert "d-test" in (tmp_path / "o" / "report.html").read_text()


def test_recommend_accepts_a_designed_chip(chip_dir, capsys):
    out = _main(capsys, "recommend", "-m", "llama-3.1-8b", "--isl", "128", "--osl", "32", "--ttft-slo-ms", "5000",
                "--tpot-slo-ms", "200", "--hardware", "d-test,h100", "--max-chips", "1", "-j", "1", "--json",
                "--hardware-dir", str(chip_dir))
    rec = json.loads(out)
    assert {c["hardware"] for c in rec["ranked"]} == {"d-test", "h100"}


def test_missing_hardware_dir_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(ENV_VAR, "")
    with pytest.raises(SystemExit) as e:
        main(["recommend", "-m", "llama-3.1-8b", "--preset", "batch-throughput", "--hardware-dir", str(tmp_path / "nope")])
    assert e.value.code == 2
    assert "--hardware-dir" in capsys.readouterr().err
