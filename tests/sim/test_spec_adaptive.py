"""The adaptive draft length (``AdaptiveK``), one policy for the torch engine and the simulator: the
workload-wide acceptance prior, probing, and the simulator running it from a measured acceptance file."""

import json
from types import SimpleNamespace

import pytest
from jalapeno.testing.engine_fakes import FakeCostModel

from jalapeno.engine import Engine, EngineConfig
from jalapeno.sim.backend import SimBackend, Speculation
from jalapeno.sim.client import run_workload
from jalapeno.speculative import AdaptiveK, KPolicy, SpeculativeStats
from jalapeno.testing import simulate_json
from jalapeno.workload import Workload

K = 4


def seq(i):
    return SimpleNamespace(seq_id=i)


def test_a_failed_workload_starts_new_sequences_at_k0():
    pol = AdaptiveK(KPolicy(K, min_acceptance=0.1, probe_tokens=8, probe_interval=32))
    a = seq("a")
    assert pol.k_for(a) == K  # nothing known yet: speculate
    pol.record(a, 4, 0)
    assert pol.k_for(a) == K  # 4 of its own + 4 of prior: too little evidence (prior < probe_tokens)
    pol.record(a, 4, 0)
    assert pol.k_for(a) == 0  # its own 8 tokens, none accepted
    # a new sequence: the workload prior (8 tokens, 0 accepted) says no before it spends a draft
    b = seq("b")
    assert [pol.k_for(b) for _ in range(32)] == [0] * 32
    assert pol.k_for(b) == K  # ... but it probes once every probe_interval steps
    pol.record(b, 4, 4)  # the probe hit: (4 + 0·4) / 8 = 0.5 >= 10%
    assert pol.k_for(b) == K
    # a sequence whose own probe_tokens failed probes too, at the same interval
    assert [pol.k_for(a) for _ in range(32)] == [0] * 31 + [K]  # (it was held once above)
    pol.record(a, 4, 0)
    assert pol.k_for(a) == 0
    pol.reset()  # a new engine: no inherited prior
    assert pol.k_for(seq("c")) == K


def test_cold_start_drafts_only_what_the_prior_needs():
    pol = AdaptiveK(KPolicy(K, probe_tokens=8))
    seqs = [seq(i) for i in range(8)]
    assert [pol.k_for(s) for s in seqs] == [K, K] + [0] * 6  # 2 drafts of 4 fill probe_tokens = 8
    pol.skip(seqs[0])  # an n-gram miss: its slot goes to the next sequence that asks
    assert pol.k_for(seqs[2]) == K and pol.k_for(seqs[3]) == 0
    pol.record(seqs[1], 4, 4)
    pol.record(seqs[2], 4, 3)  # the prior now holds 8 tokens, 7 accepted: everyone speculates
    assert [pol.k_for(s) for s in seqs] == [K] * 8


def test_prior_weighs_recent_drafts_only():
    pol = AdaptiveK(KPolicy(K, probe_tokens=8, prior_window=16))
    for i in range(10):
        pol.record(seq(i), 4, 0)  # a bad stretch
    assert pol.k_for(seq("new")) == 0
    for i in range(10):
        pol.record(seq(100 + i), 4, 4)  # then a copy-heavy stretch: the window forgets the old one
    # each record of 4 tokens scales the window (16) by 16/20: the bad stretch weighs 0.8^10 of it
    assert pol.estimate("new2") == pytest.approx(1 - 0.8**10)
    assert pol.k_for(seq("new2")) == K


def test_large_probe_tokens_keeps_speculating():
    pol = AdaptiveK(KPolicy(K, probe_tokens=1000))
    for i in range(100):
        pol.record(seq(i % 3), 4, 0)
    assert pol.k_for(seq(0)) == K and pol.k_for(seq("new")) == K


def _run(chain, draft_rate, osl=64, conc=8, seed=0):
    spec = Speculation("ngram", K, tuple(chain), policy=KPolicy(K), draft_rate=draft_rate, seed=seed)
    b = SimBackend(FakeCostModel(), speculation=spec, keep_trace=True)
    e = Engine(b, EngineConfig(max_num_seqs=conc, max_num_batched_tokens=4096, num_speculative_tokens=K))
    r = run_workload(e, Workload([64] * conc, [osl] * conc, concurrency=conc))
    return r, b


def _plain(osl=64, conc=8):
    e = Engine(SimBackend(FakeCostModel()), EngineConfig(max_num_seqs=conc, max_num_batched_tokens=4096))
    return run_workload(e, Workload([64] * conc, [osl] * conc, concurrency=conc))


def test_sim_adaptive_no_copy_workload_decodes_plainly():
    r, b = _run((0.0,) * K, 1.0)
    st = b.spec_decode_stats()
    # cold start: the first decode step drafts for 2 sequences only (8 tokens fill the prior), the other 6
    # wait; then the prior (0% accepted) holds all 8 at k = 0, and in 64 tokens each probes once after
    # probe_interval = 32 held steps
    assert st["num_drafts"] == 2 + 8
    assert all(o.output_tokens == 64 for o in r.outcomes)
    plain = _plain()
    assert r.metrics()["mean_tpot_ms"] / plain.metrics()["mean_tpot_ms"] < 1.05


def test_sim_adaptive_reproduces_the_measured_chain_and_draft_rate():
    chain = (0.9, 0.8, 0.7, 0.6)
    r, b = _run(chain, 0.5, osl=400)
    st = b.spec_decode_stats()
    assert st["draft_rate"] == pytest.approx(0.5, abs=0.05)
    assert st["acceptance_chain"] == pytest.approx(chain, abs=0.05)
    # tokens per decode step: 1 + draft_rate · Σ Π a_j (every sequence keeps k = K at these rates)
    e = 1 + 0.5 * (0.9 + 0.9 * 0.8 + 0.9 * 0.8 * 0.7 + 0.9 * 0.8 * 0.7 * 0.6)
    seq_steps = sum(t["decode_seqs"] for t in b.trace if not t["prefill_tokens"])
    assert 8 * 399 / seq_steps == pytest.approx(e, rel=0.05)
    again, _ = _run(chain, 0.5, osl=400)
    assert again.metrics() == r.metrics()  # seeded: the same run, the same result


def test_simulate_reads_the_generate_json_with_the_adaptive_policy(tmp_path, capsys):
    st = SpeculativeStats(3)
    for proposed, accepted in [(3, 3), (3, 3), (3, 2), (3, 3)]:
        st.record(proposed, accepted)
    st.num_draft_requests = 8  # half the asks found an n-gram match
    f = tmp_path / "gen.json"
    f.write_text(json.dumps({"spec_decode": st.to_dict()}))
    small = ["--model", "llama-3.1-8b", "--hardware", "h100", "--isl", "256", "--osl", "64", "--num-prompts", "24",
             "--concurrency", "4"]
    args = [*small, "--spec-decode", "ngram", "--spec-tokens", "3"]
    from_file = simulate_json(capsys, *args, "--acceptance", str(f))
    inline = simulate_json(capsys, *args, "--acceptance", ",".join(repr(a) for a in st.acceptance_chain()))
    plain = simulate_json(capsys, *small)
    # half the steps draft: faster than plain decoding, slower than the fixed-k model where every step drafts
    assert inline["median_tpot_ms"] < from_file["median_tpot_ms"] < plain["median_tpot_ms"]
