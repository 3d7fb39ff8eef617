"""`jalapeno simulate`: JSON keys, per-chip accounting, scenarios CSV with a bad row, one-line user errors."""

import csv
import json

import pytest

from jalapeno.cli import main
from jalapeno.testing import simulate_json

SMALL = ["--model", "llama-3.1-8b", "--hardware", "h100", "--isl", "256", "--osl", "64", "--num-prompts", "24"]

#: the vLLM `bench serve` result keys (vLLM docs / benchmark_serving.py), plus the InferenceX per-chip and power keys
VLLM_KEYS = (
    ["completed", "total_input_tokens", "total_output_tokens", "duration", "request_throughput",
     "output_throughput", "total_token_throughput"]
    + [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p90", "p99")]
)
IX_KEYS = ["num_chips", "output_throughput_per_chip", "total_token_throughput_per_chip", "median_interactivity",
           "avg_power_w_per_chip", "avg_power_w_deployment", "output_tokens_per_joule"]


run_json = simulate_json


def test_json_has_vllm_and_inferencex_keys(capsys):
    m = run_json(capsys, *SMALL, "--tp", "2", "--dp", "2", "--concurrency", "8")
    for k in VLLM_KEYS + IX_KEYS:
        assert k in m, k
    assert m["completed"] == 24 and m["num_chips"] == 4
    assert m["output_throughput_per_chip"] == pytest.approx(m["output_throughput"] / 4)
    assert m["total_token_throughput_per_chip"] == pytest.approx(m["total_token_throughput"] / 4)
    assert m["avg_power_w_deployment"] > 0 and m["output_tokens_per_joule"] > 0
    # power per chip is the deployment's over its 4 chips, and a chip cannot draw more than its TDP (H100: 700 W)
    # nor less than its idle power (0.2 x TDP in the catalogue)
    assert m["avg_power_w_per_chip"] == pytest.approx(m["avg_power_w_deployment"] / 4)
    assert 140 <= m["avg_power_w_per_chip"] <= 700 < m["avg_power_w_deployment"]
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
        (["--kv-sram-gb", "0.5"], "kv_resident"),  # H100's L2 is a cache: no KV tier there
        (["--kv-offload", "host:10"], "host section"),  # H100's file has no host link: give GB/s
        (["--kv-offload", "dram:10"], "--kv-offload"),
        (["--chip-features", "maybe"], "on or off"),
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


def test_power_is_named_predicted_and_dollars_per_mtok_follow_the_price(capsys):
    """Hand check: $/Mtok = chips × catalogue $/chip-hour / (output tokens/s × 3600 / 1e6)."""
    from jalapeno.hardware import get_chip

    m = run_json(capsys, *SMALL, "--tp", "2", "--concurrency", "8")
    assert m["power_measured"] is False and m["power_source"] == "predicted" and m["avg_power_w"] > 0
    price = float(get_chip("h100").price.usd_per_hour.value)
    assert m["hourly_cost_usd"] == pytest.approx(2 * price)
    assert m["usd_per_mtok"] == pytest.approx(2 * price / (m["output_throughput"] * 3600 / 1e6))
    with pytest.raises(SystemExit):
        main(["simulate", *SMALL, "--concurrency", "8"])
        raise SystemExit(0)
    out = capsys.readouterr().out
    assert "$ per million output tokens" in out and "predicted" in out


@pytest.mark.parametrize("extra", [["--isl", "131000", "--osl", "200"], ["--chain-calls", "3", "--isl", "60000"]])
def test_requests_beyond_the_context_are_refused(capsys, extra):
    """llama-3.1-8b's context is 131072 tokens: 131000 + 200 does not fit; nor does a 3-call chain of ~60k."""
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--model", "llama-3.1-8b", "--hardware", "h100", "--concurrency", "2",
              "--num-prompts", "2", "--random-range-ratio", "1.0", "--osl", "64", *extra])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "context of 131072" in err


def test_max_num_batched_tokens_sizes_the_memory_check(capsys):
    """Groq LP30 (0.5 GB SRAM per chip): Llama-3.1-8B on tp=32 pp=2 leaves no KV room with the default 8192-token
    activation reserve, as the error says; with --max-num-batched-tokens 512 (the error's own advice) it fits,
    with the KV capacity of the cost model's memory plan for that budget."""
    from jalapeno.sim import cost_model_for

    args = ["--model", "llama-3.1-8b", "--hardware", "groq-lp30", "--tp", "32", "--pp", "2", "--concurrency", "4",
            "--num-prompts", "4", "--isl", "128", "--osl", "8"]
    with pytest.raises(SystemExit) as e:
        main(["simulate", *args])
    assert e.value.code == 2 and "--max-num-batched-tokens" in capsys.readouterr().err
    # (--max-num-seqs 4: the budget is raised to max_num_seqs when smaller, and the default is 1024)
    m = run_json(capsys, *args, "--max-num-batched-tokens", "512", "--max-num-seqs", "4")
    assert m["completed"] == 4
    plan = cost_model_for("llama-3.1-8b", "groq-lp30", tp=32, pp=2).memory_plan(512)
    assert m["sim"]["kv_capacity_tokens_per_replica"] == plan.kv_capacity_tokens // 16 * 16


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


def test_fp32_weights_and_kv_are_accepted_and_priced_at_four_bytes(capsys) -> None:
    """`simulate --precision fp32 --kv-dtype fp32` (what the CPU engine runs; the cost model had it, the CLI
    refused it): a batch-1 decode of a dense model is weight-bandwidth bound, so twice the bytes per weight
    roughly doubles TPOT against bf16 (overheads and the bf16 KV keep it a little under 2)."""
    args = ("--model", "llama-3.1-8b", "--hardware", "h100", "--isl", "256", "--osl", "64", "--num-prompts", "4",
            "--concurrency", "1")
    bf16 = run_json(capsys, *args)
    fp32 = run_json(capsys, *args, "--precision", "fp32", "--kv-dtype", "fp32")
    assert 1.6 < fp32["median_tpot_ms"] / bf16["median_tpot_ms"] < 2.05


def test_scheduler_recv_interval_delays_admission_and_bad_values_are_one_line():
    """SGLang's --scheduler-recv-interval: new requests are polled every N decode steps, so at a load where
    requests keep arriving mid-run TTFT grows with N; TPOT (the decode steps) barely moves."""
    from jalapeno.errors import ConfigError
    from jalapeno.sim.scenario import Scenario, run_scenario

    base = dict(model="llama-3.1-8b", hardware="h200", framework="sglang", concurrency=16, num_prompts=64,
                isl=512, osl=128)
    one = run_scenario(Scenario(**base))
    thirty = run_scenario(Scenario(**base, scheduler_recv_interval=30))
    assert thirty["median_ttft_ms"] > one["median_ttft_ms"] * 1.5
    with pytest.raises(ConfigError, match="scheduler-recv-interval must be >= 1"):
        run_scenario(Scenario(**base, scheduler_recv_interval=0))
    with pytest.raises(ConfigError, match="--framework"):
        run_scenario(Scenario(**{**base, "framework": None}, scheduler_recv_interval=30))


def test_attention_dp_balance_delays_admission_and_bad_values_are_one_line():
    """TensorRT-LLM's attention-DP balancing (--attention-dp-balance N): with every rank decoding, a new request waits
    for one per rank or N steps, so TTFT grows with N at a load where requests keep arriving; off by default."""
    from jalapeno.errors import ConfigError
    from jalapeno.sim.scenario import Scenario, run_scenario

    base = dict(model="gpt-oss-120b", hardware="b200", framework="trt-llm", tp=8, dp_attention=True, concurrency=64,
                num_prompts=192, isl=512, osl=256)
    off = run_scenario(Scenario(**base))
    sixty = run_scenario(Scenario(**base, attention_dp_balance=60))
    assert sixty["median_ttft_ms"] > off["median_ttft_ms"] * 1.5
    with pytest.raises(ConfigError, match="attention-dp-balance must be >= 1"):
        run_scenario(Scenario(**base, attention_dp_balance=0))
    with pytest.raises(ConfigError, match="--dp-attention"):
        run_scenario(Scenario(**{**base, "dp_attention": False}, attention_dp_balance=60))
