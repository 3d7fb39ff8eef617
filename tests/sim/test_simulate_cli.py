"""`jalapeno simulate`: JSON keys, per-chip accounting, scenarios CSV with a bad row, one-line user errors."""

import csv
import json

import pytest

from jalapeno.cli import main

SMALL = ["--model", "llama-3.1-8b", "--hardware", "h100", "--isl", "256", "--osl", "64", "--num-prompts", "24"]

#: the vLLM `bench serve` result keys (vLLM docs / benchmark_serving.py), plus the InferenceX per-chip and power keys
VLLM_KEYS = (
    ["completed", "total_input_tokens", "total_output_tokens", "duration", "request_throughput",
     "output_throughput", "total_token_throughput"]
    + [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p90", "p99")]
)
IX_KEYS = ["num_chips", "output_throughput_per_chip", "total_token_throughput_per_chip", "median_interactivity",
           "avg_power_w", "output_tokens_per_joule"]


def run_json(capsys, *args):
    with pytest.raises(SystemExit) as e:  # main() exits only on errors; the raise below marks success
        main(["simulate", *args, "--json"])
        raise SystemExit(0)
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    return json.loads(out.out)


def test_json_has_vllm_and_inferencex_keys(capsys):
    m = run_json(capsys, *SMALL, "--tp", "2", "--dp", "2", "--concurrency", "8")
    for k in VLLM_KEYS + IX_KEYS:
        assert k in m, k
    assert m["completed"] == 24 and m["num_chips"] == 4
    assert m["output_throughput_per_chip"] == pytest.approx(m["output_throughput"] / 4)
    assert m["total_token_throughput_per_chip"] == pytest.approx(m["total_token_throughput"] / 4)
    assert m["avg_power_w"] > 0 and m["output_tokens_per_joule"] > 0
    assert 0.8 * 256 * 24 <= m["total_input_tokens"] <= 256 * 24


def test_disaggregated_counts_prefill_plus_decode_chips(capsys):
    m = run_json(capsys, *SMALL, "--concurrency", "8", "--prefill-workers", "1", "--prefill-tp", "1",
                 "--decode-workers", "2", "--decode-tp", "2")
    assert m["num_chips"] == 1 + 4
    assert m["output_throughput_per_chip"] == pytest.approx(m["output_throughput"] / 4)  # ÷ decode chips
    assert m["total_token_throughput_per_chip"] == pytest.approx(m["total_token_throughput"] / 5)


def test_spec_decode_and_chains_from_the_cli(capsys):
    base = run_json(capsys, *SMALL, "--concurrency", "4")
    spec = run_json(capsys, *SMALL, "--concurrency", "4", "--spec-decode", "ngram", "--spec-tokens", "3",
                    "--acceptance", "0.9")
    assert spec["median_tpot_ms"] < base["median_tpot_ms"]
    chain = run_json(capsys, *SMALL, "--concurrency", "4", "--chain-calls", "2")
    assert chain["completed"] == 48 and chain["mean_chain_e2el_ms"] > chain["mean_e2el_ms"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--hardware", "h2000"], "h2000"),
        (["--model", "no-such-model"], "no-such-model"),
        (["--tp", "3"], "tp=3"),
        (["--precision", "fp3"], "fp3"),
        (["--spec-decode", "mtp"], "MTP"),
    ],
)
def test_bad_input_is_one_line_error(capsys, args, needle):
    argv = ["simulate", *SMALL, "--concurrency", "2"]
    for i in range(0, len(args), 2):
        if args[i] in argv:
            argv[argv.index(args[i]) + 1] = args[i + 1]
        else:
            argv += args[i : i + 2]
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2
    assert needle in err and "Traceback" not in err and len(err.splitlines()) <= 2


def test_scenarios_csv_keeps_going_past_a_bad_row(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text(
        "model,hardware,tp,isl,osl,concurrency,num_prompts\n"
        "llama-3.1-8b,h100,1,256,64,4,8\n"
        "llama-3.1-8b,h2000,1,256,64,4,8\n"
        "llama-3.1-8b,h200,3,256,64,4,8\n"
        "llama-3.1-8b,h200,2,256,64,4,8\n"
    )
    out = tmp_path / "out.csv"
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--scenarios", str(src), "--output", str(out)])
        raise SystemExit(0)
    assert e.value.code == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4
    assert [r["error"] == "" for r in rows] == [True, False, False, True]
    assert "h2000" in rows[1]["error"] and "tp=3" in rows[2]["error"]
    assert rows[0]["model"] == "llama-3.1-8b" and float(rows[0]["output_throughput"]) > 0
    assert rows[3]["num_chips"] == "2" and rows[1]["output_throughput"] == ""


def test_scenario_column_typo_fails_the_file(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("model,hardwre,concurrency\nllama-3.1-8b,h100,4\n")
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--scenarios", str(src), "--output", str(tmp_path / "o.csv")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "hardwre" in err and "hardware" in err


def test_json_and_table_carry_the_confidence_label(capsys):
    m = run_json(capsys, *SMALL, "--concurrency", "2")
    c = m["confidence"]  # h100: the H200 calibration transferred, with its held-out error
    assert c["status"] == "transferred" and c["label"] == "transferred from h200"
    assert [(x["role"], x["chip"], x["transferred_from"]) for x in c["chips"]] == [("serving", "h100", "h200")]
    # disaggregated over two chips: one entry per pool, the answer as weak as its weakest chip
    d = run_json(capsys, *SMALL, "--concurrency", "2", "--prefill-hardware", "h200", "--decode-hardware", "jalapeno")
    assert [(x["role"], x["chip"], x["status"]) for x in d["confidence"]["chips"]] == [
        ("prefill", "h200", "calibrated"), ("decode", "jalapeno", "uncalibrated")]
    assert d["confidence"]["status"] == "uncalibrated"
    assert d["confidence"]["label"].startswith("prefill h200: calibrated (") and "decode jalapeno: uncalibrated" in d["confidence"]["label"]
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--model", "llama-3.1-8b", "--hardware", "tpu-v6e", "--isl", "64", "--osl", "8",
              "--num-prompts", "2", "--concurrency", "1"])
        raise SystemExit(0)
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "confidence" in out and "uncalibrated" in out and "warning: tpu-v6e is uncalibrated" in " ".join(out.split())
