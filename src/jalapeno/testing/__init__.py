"""Helpers the test suite (and a few benchmarks) share across folders — one place, importable as
``jalapeno.testing.<module>``; nothing in the package itself imports them.

* ``engine_fakes`` — an analytic cost model (:class:`FakeCostModel`) and a token-echo backend for scheduler and
  simulator tests (no ``jalapeno.perf`` numbers involved);
* ``report_fakes`` — a fake sweep point function for the report/sweep tests;
* ``torch_models`` — tiny random-weight Hugging Face models of every supported family (imports torch and
  transformers: only torch tests import it).
"""


def simulate_json(capsys, *args: str) -> dict:
    """``jalapeno simulate ARGS --json`` in-process (pytest's ``capsys``): the parsed JSON; fails the test with
    the command's error line when it exits non-zero."""
    import json

    import pytest

    from jalapeno.cli import main

    with pytest.raises(SystemExit) as e:  # main() exits only on errors; the raise below marks success
        main(["simulate", *args, "--json"])
        raise SystemExit(0)
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    return json.loads(out.out)
