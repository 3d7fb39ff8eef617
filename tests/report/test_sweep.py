"""Sweep execution: resume, interruption, process pool, Ray, parquet + DuckDB, CLI errors."""

import sys

import duckdb
import pyarrow.parquet as pq
import pytest

from jalapeno.testing import report_fakes
from jalapeno.errors import ConfigError
from jalapeno.report.spec import parse_sweep
from jalapeno.report.sweep import run_spec

SPEC = """\
name: t
models: [llama-3.1-8b]
hardware: [h100, h200, b200]
max_chips: 2
parallelism: auto
workloads: [{isl: 1024, osl: 64}]
concurrencies: [1, 8]
slo: {ttft_ms: 1000, tpot_ms: 5.5}
"""
N_POINTS = 3 * 2 * 2  # chips x layouts (tp1, tp2) x concurrencies


def _spec(text=SPEC):
    return parse_sweep(text)[0]


def test_resume_skips_done_points(tmp_path, calls):
    s1 = run_spec(_spec(), tmp_path, point_fn=report_fakes.fake_point, workers=1, progress=False)
    assert (s1.total, s1.ran, s1.already_done) == (N_POINTS, N_POINTS, 0)
    assert len(calls) == N_POINTS
    calls.clear()
    s2 = run_spec(_spec(), tmp_path, point_fn=report_fakes.fake_point, workers=1, progress=False)
    assert (s2.ran, s2.already_done) == (0, N_POINTS) and calls == []
    # growing the grid runs only the new points
    s3 = run_spec(_spec(SPEC.replace("[1, 8]", "[1, 8, 32]")), tmp_path, point_fn=report_fakes.fake_point, workers=1, progress=False)
    assert s3.ran == N_POINTS // 2 and len(calls) == N_POINTS // 2
    assert pq.read_table(tmp_path / "results.parquet").num_rows == N_POINTS * 3 // 2


class _Interrupt:
    def __init__(self, after):
        self.after, self.n = after, 0

    def __call__(self, point):
        if self.n == self.after:
            raise KeyboardInterrupt
        self.n += 1
        return report_fakes.fake_point(point)


def test_ctrl_c_keeps_finished_points(tmp_path, calls):
    with pytest.raises(KeyboardInterrupt):
        run_spec(_spec(), tmp_path, point_fn=_Interrupt(5), workers=1, progress=False)
    assert pq.read_table(tmp_path / "results.parquet").num_rows == 5
    calls.clear()
    s = run_spec(_spec(), tmp_path, point_fn=report_fakes.fake_point, workers=1, progress=False)
    assert s.already_done == 5 and len(calls) == N_POINTS - 5


def _flaky(point):
    if point["concurrency"] == 8 and point["hardware"] == "b200":
        raise RuntimeError("boom")
    return report_fakes.fake_point(point)


def test_failed_points_are_recorded_and_retried(tmp_path, calls):
    s = run_spec(_spec(), tmp_path, point_fn=_flaky, workers=1, progress=False)
    assert (s.errors, s.skipped, s.ok) == (2, 2, N_POINTS - 4)  # h100 tp1 does not fit at either concurrency
    err = duckdb.sql(f"SELECT error, error_kind FROM '{tmp_path / 'results.parquet'}' WHERE status = 'error'").fetchall()
    assert err[0][0].startswith("RuntimeError: boom at test_sweep.py:") and err[0][1] == "bug"
    calls.clear()
    s2 = run_spec(_spec(), tmp_path, point_fn=report_fakes.fake_point, workers=1, progress=False)
    assert s2.ran == 2 and len(calls) == 2 and s2.errors == 0
    assert pq.read_table(tmp_path / "results.parquet").num_rows == N_POINTS


def test_parquet_rows_statuses_and_duckdb(tmp_path):
    run_spec(_spec(), tmp_path, point_fn=report_fakes.fake_point, workers=2, progress=False)  # process pool
    path = str(tmp_path / "results.parquet")
    con = duckdb.connect()
    n, = con.execute(f"SELECT count(*) FROM '{path}'").fetchone()
    assert n == N_POINTS
    skipped = con.execute(f"SELECT hardware, tp, error FROM '{path}' WHERE status = 'skipped'").fetchall()
    assert {(h, tp) for h, tp, _ in skipped} == {("h100", 1)} and "80 GB" in skipped[0][2]
    best = con.execute(
        f"SELECT hardware, max(output_throughput_per_chip) AS t FROM '{path}' WHERE status = 'ok' GROUP BY hardware ORDER BY t DESC"
    ).fetchall()
    assert best[0][0] == "b200"  # the fake model makes b200 twice as fast
    # economics columns exist and agree with the definition
    row = con.execute(
        f"SELECT num_chips, output_throughput, slo_attainment, usd_per_mtok, hourly_cost_usd FROM '{path}' "
        "WHERE hardware = 'h200' AND tp = 2 AND concurrency = 1"
    ).fetchone()
    chips, tps, att, usd, hourly = row
    from jalapeno.hardware import get_chip

    assert hourly == pytest.approx(chips * get_chip("h200").price.usd_per_hour.value)
    assert usd == pytest.approx(hourly / (tps * 3600 / 1e6) / att)


def test_missing_ray_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"pip install 'jalapeno\[ray\]'"):
        run_spec(_spec(), tmp_path, point_fn=report_fakes.fake_point, ray="auto", progress=False)


def test_ray_local_instance(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray not installed (optional extra jalapeno[ray])")
    s = run_spec(_spec(), tmp_path, point_fn=report_fakes.fake_point, ray="auto", progress=False)
    assert s.ran == N_POINTS and s.errors == 0
    t = pq.read_table(tmp_path / "results.parquet").to_pylist()
    assert sum(r["status"] == "ok" for r in t) == N_POINTS - 2


def test_cli_bad_input_exits_2(tmp_path, capsys):
    from jalapeno.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.replace("hardware: [h100, h200, b200]", "hardware: [h100, h2OO]"))
    with pytest.raises(SystemExit) as ei:
        main(["sweep", str(bad), "--out", str(tmp_path / "o")])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert "bad.yaml:3:" in err and "h2OO" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as ei:
        main(["sweep", str(bad), "--out", str(tmp_path / "o"), "--price", "h200"])
    assert ei.value.code == 2
    with pytest.raises(SystemExit) as ei:
        main(["report", str(tmp_path / "nothing")])
    assert ei.value.code == 2


def test_changed_slo_in_a_used_folder_is_refused_unless_overwrite(tmp_path, calls, capsys):
    """Old-SLO rows must not be reported under a new SLO: refuse, or delete them with --overwrite."""
    run_spec(_spec(), tmp_path, point_fn=report_fakes.fake_point, workers=1, progress=False)
    stricter = _spec(SPEC.replace("tpot_ms: 5.5", "tpot_ms: 2.0"))
    with pytest.raises(ConfigError, match="slo.*--overwrite"):
        run_spec(stricter, tmp_path, point_fn=report_fakes.fake_point, workers=1, progress=False)
    calls.clear()
    s = run_spec(stricter, tmp_path, point_fn=report_fakes.fake_point, workers=1, progress=False, overwrite=True)
    assert (s.ran, s.already_done) == (N_POINTS, 0) and len(calls) == N_POINTS
    # the CLI says so in one line, exit 2
    from jalapeno.cli import main

    spec_file = tmp_path / "s.yaml"
    spec_file.write_text(SPEC)
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(spec_file), "--out", str(tmp_path), "-q", "-j", "1"])
    assert exc.value.code == 2 and "--overwrite" in capsys.readouterr().err
