"""The root CLI: --version, and text in square brackets surviving help and error lines (no rich markup)."""

from __future__ import annotations

import pytest

from jalapeno import __version__
from jalapeno.cli import main

def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code in (0, None)
    assert capsys.readouterr().out.strip() == f"jalapeno {__version__}"

@pytest.mark.parametrize("argv, text", [(["simulate", "--help"], "random in [r·L, L]"), (["bench", "--help"], "drawn from [100,")])
def test_square_brackets_survive_help(capsys, argv, text):
    with pytest.raises(SystemExit):
        main(argv)
    assert text in " ".join(capsys.readouterr().out.split())

def test_square_brackets_survive_error_lines(capsys, tmp_path, monkeypatch):
    """The missing-Ray hint names the extra: pip install 'jalapeno[ray]'."""

    from jalapeno.errors import ConfigError

    def boom(*a, **k):
        raise ConfigError("needs Ray: pip install 'jalapeno[ray]' [bold]not a style[/bold]")

    monkeypatch.setattr("jalapeno.cli.app", boom)
    with pytest.raises(SystemExit) as exc:
        main(["hardware", "list"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'jalapeno[ray]'" in err and "[bold]not a style[/bold]" in err


@pytest.mark.parametrize(
    "hide, argv",
    [
        ("torch", ["generate", "--prompt", "hi"]),
        ("fastapi", ["serve", "--backend", "sim", "--hardware", "h100", "--model", "llama-3.1-8b"]),
    ],
)
def test_missing_extra_is_one_line_naming_it(hide, argv):
    """A fresh interpreter where the extra's module cannot be imported (as after `pip install -e .` alone)."""
    import subprocess
    import sys

    code = f"import sys; sys.modules[{hide!r}] = None; from jalapeno.cli import main; main({argv!r})"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert "pip install 'jalapeno[torch,server]'" in p.stderr and f"'{hide}'" in p.stderr
