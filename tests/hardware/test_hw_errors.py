"""Malformed chip specs give one-line SpecErrors naming the file and field; the CLI exits 2 without a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jalapeno.cli import main
from jalapeno.errors import SpecError
from jalapeno.hardware import load_catalog, load_spec_file


def _one_line(msg: str) -> None:
    assert "\n" not in msg.strip() and "Traceback" not in msg


def test_missing_field(h200_data, write_spec):
    del h200_data["power"]
    path = write_spec(h200_data, "nopower.yaml")
    with pytest.raises(SpecError) as ei:
        load_spec_file(path)
    msg = str(ei.value)
    assert "nopower.yaml" in msg and "power" in msg and "missing" in msg.lower()
    _one_line(msg)


def test_missing_nested_field(h200_data, write_spec):
    del h200_data["memory"][1]["bandwidth_tbps"]["source"]
    path = write_spec(h200_data, "nosource.yaml")
    with pytest.raises(SpecError, match=r"nosource\.yaml: memory\[1\]\.bandwidth_tbps\.source"):
        load_spec_file(path)


def test_negative_bandwidth(h200_data, write_spec):
    h200_data["memory"][1]["bandwidth_tbps"]["value"] = -4.8
    path = write_spec(h200_data, "neg.yaml")
    with pytest.raises(SpecError) as ei:
        load_spec_file(path)
    msg = str(ei.value)
    assert "neg.yaml" in msg and "memory[1].bandwidth_tbps" in msg and ">= 0" in msg
    _one_line(msg)


def test_unknown_dtype(h200_data, write_spec):
    h200_data["compute_tflops"]["fp9"] = {"value": 1.0, "source": "x", "status": "vendor-peak"}
    path = write_spec(h200_data, "fp9.yaml")
    with pytest.raises(SpecError) as ei:
        load_spec_file(path)
    msg = str(ei.value)
    assert "fp9.yaml: compute_tflops.fp9" in msg and "bf16" in msg  # names the allowed dtypes
    _one_line(msg)


def test_bad_status_and_null_value(h200_data, write_spec):
    h200_data["power"]["tdp_w"] = {"value": None, "source": "x", "status": "vendor-peak"}
    with pytest.raises(SpecError, match=r"power\.tdp_w.*unknown"):
        load_spec_file(write_spec(h200_data, "null.yaml"))


def test_yaml_syntax_error(write_spec):
    path = write_spec("key: broken\ncompute_tflops: {bf16: [1, 2\nname: x\n", "syntax.yaml")
    with pytest.raises(SpecError) as ei:
        load_spec_file(path)
    msg = str(ei.value)
    assert "syntax.yaml" in msg and "YAML syntax error" in msg and "line" in msg
    _one_line(msg)


def test_not_a_mapping(write_spec):
    with pytest.raises(SpecError, match="mapping"):
        load_spec_file(write_spec("- just\n- a list\n", "list.yaml"))


def test_duplicate_key_in_one_directory(h200_data, write_spec):
    h200_data["key"] = "dup"
    write_spec(h200_data, "a.yaml")
    path = write_spec(h200_data, "b.yaml")
    with pytest.raises(SpecError, match="b.yaml: key 'dup'"):
        load_catalog([path.parent])


def test_missing_directory(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        load_catalog([tmp_path / "nope"])


def test_bad_env_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("JALAPENO_HARDWARE_PATH", str(tmp_path / "nope"))
    with pytest.raises(SpecError, match="JALAPENO_HARDWARE_PATH"):
        load_catalog()


def test_cli_bad_spec_exits_2_with_one_line(h200_data, write_spec, capsys):
    h200_data["memory"][1]["bandwidth_tbps"]["value"] = -1
    path = write_spec(h200_data, "neg.yaml")
    with pytest.raises(SystemExit) as ei:
        main(["hardware", "list", "--hardware-dir", str(path.parent)])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert "neg.yaml" in err and "memory[1].bandwidth_tbps" in err
    _one_line(err)


def test_cli_unknown_chip_subprocess():
    r = subprocess.run([sys.executable, "-m", "jalapeno.cli", "hardware", "show", "h2000"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "unknown chip 'h2000'" in r.stderr and "h200" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    _one_line(r.stderr)


def test_bad_kernel_launch_fact(h200_data, write_spec):
    h200_data["kernel_launch_us"] = {"value": -0.5, "source": "x", "status": "measured"}
    with pytest.raises(SpecError) as ei:
        load_spec_file(write_spec(h200_data, "neglaunch.yaml"))
    msg = str(ei.value)
    assert "neglaunch.yaml: kernel_launch_us" in msg and ">= 0" in msg
    _one_line(msg)
    # a chip fact cannot be a fitted value: the fitted share of a kernel's cost is efficiency.kernel_overhead_us
    h200_data["kernel_launch_us"] = {"value": 0.6, "source": "fit_terms.py", "status": "fitted"}
    with pytest.raises(SpecError) as ei:
        load_spec_file(write_spec(h200_data, "fitlaunch.yaml"))
    msg = str(ei.value)
    assert "fitlaunch.yaml: kernel_launch_us" in msg and "efficiency.kernel_overhead_us" in msg
    _one_line(msg)
    del h200_data["kernel_launch_us"]["source"]
    h200_data["kernel_launch_us"]["status"] = "inferred"
    with pytest.raises(SpecError, match=r"kernel_launch_us\.source.*missing|kernel_launch_us\.source"):
        load_spec_file(write_spec(h200_data, "nosrc.yaml"))


def test_negative_stack_fp8_moe_term_is_refused_in_one_line(h200_data, write_spec):
    h200_data["efficiency"]["framework_fp8_moe_layer_us"] = {"trt-llm": -5}
    with pytest.raises(SpecError) as ei:
        load_spec_file(write_spec(h200_data, "negfp8.yaml"))
    msg = str(ei.value)
    assert "negfp8.yaml" in msg and "framework_fp8_moe_layer_us" in msg and ">= 0" in msg
    _one_line(msg)
