"""`jalapeno serve` refuses bad arguments with one clean line (exit 2) before binding anything."""

from __future__ import annotations

import pytest

from jalapeno.cli import main


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--backend", "tpu"], "--backend"),
        (["--backend", "sim"], "--hardware"),
        (["--backend", "sim", "--hardware", "no-such-chip", "--model", "llama-3.1-8b"], "no-such-chip"),
        (["--backend", "sim", "--hardware", "h100", "--model", "llama-3.1-8b", "--time-scale", "-1"], "time-scale"),
        (["--backend", "sim", "--hardware", "h100", "--model", "llama-3.1-8b", "--port", "0"], "--port"),
        (["--backend", "sim", "--hardware", "h100", "--threads", "2"], "--threads"),
        (["--backend", "cpu", "--threads", "0"], "--threads"),
        (["--backend", "sim", "--hardware", "h100", "--step-trace", "/no/such/folder/steps.jsonl"], "/no/such/folder"),
    ],
)
def test_bad_serve_arguments(args, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["serve", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and needle in err and "Traceback" not in err
