"""The served engine's KV-cache capacity reaches the simulated comparison (issue 16, thirteenth session): the server
exposes its block size beside its blocks on ``/metrics``; ``jalapeno bench --compare-sim`` reads both and caps the
simulated engine's cache with them. A CPU server keeps 1 GiB (about 23k SmolLM2 tokens) while the probed chip's
memory would hold ~473k: unequal capacities preempt on one side only (ISL 2048 at c >= 12, or c = 32 x 768 tokens)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CHIP = ROOT / "benchmarks" / "data" / "local_probe_quiet_1750.yaml"


def test_the_server_exposes_its_kv_capacity_in_tokens(sim_server) -> None:
    from jalapeno.bench.compare import scrape_kv_tokens

    served, srv = sim_server
    st = served.engine.stats
    assert st.kv_blocks_total > 0
    assert scrape_kv_tokens(srv.url) == st.kv_blocks_total * served.engine.config.block_size
    assert scrape_kv_tokens(srv.url + "/v1") == st.kv_blocks_total * served.engine.config.block_size
    assert scrape_kv_tokens("http://127.0.0.1:9") is None  # nothing there: no cap, no error


def test_metrics_without_the_block_size_give_no_cap() -> None:
    from jalapeno.bench.compare import parse_kv_tokens

    assert parse_kv_tokens("jalapeno_kv_blocks_total 100.0\n") is None
    assert parse_kv_tokens("jalapeno_kv_blocks_total 100.0\njalapeno_kv_block_size 16.0\n") == 1600


def test_the_capped_simulation_preempts_where_the_served_engine_would() -> None:
    """16 requests of 2,048 + 256 tokens (36,864 at once) on the 17:50 chip: with the CPU server's 23,296-token cache
    (1,456 blocks of 16, by hand: 1 GiB / (2 x 30 layers x 3 KV heads x 64 dims x 4 bytes)) the simulated engine
    preempts; sized from the chip's memory it never does."""
    from jalapeno.bench.compare import kv_capped
    from jalapeno.hardware.catalog import load_spec_file
    from jalapeno.sim import build_sim_engine, cost_model_for, run_workload
    from jalapeno.workload import Workload

    cm = cost_model_for("smollm2-135m", load_spec_file(CHIP), precision="fp32", kv="fp32")
    cap = (1 << 30) // (2 * 30 * 3 * 64 * 4) // 16 * 16
    assert cap == 23296
    got = {}
    for name, kv in (("capped", cap), ("chip", None)):
        e = build_sim_engine(cm, in_flight=16, backend_cls=kv_capped(kv))
        run_workload(e, Workload(np.full(16, 2048), np.full(16, 256), concurrency=16))
        got[name] = (e.stats.kv_blocks_total, e.scheduler.num_preemptions)
    assert got["capped"][0] == cap // 16 and got["capped"][1] > 0
    assert got["chip"][0] > 20 * got["capped"][0] and got["chip"][1] == 0
