"""The serving simulator: the real engine (``jalapeno.engine``) over :class:`SimBackend` on a virtual clock.

* ``backend``  — :class:`SimBackend`: prices each scheduled batch with the cost model (``jalapeno.perf``);
  :class:`Speculation` (speculative decoding's expected accepted tokens and proposer cost);
* ``factory``  — the one way to build simulated engines: :func:`cost_model_for`, :class:`SimLimits` (the one set
  of default scheduler limits) and :func:`build_sim_engines`; every caller that simulates uses it;
* ``client``   — the simulated client / event loop: closed or open loop, chains; :func:`run_workload` →
  :class:`SimResult`;
* ``cluster``  — several engines on one timeline (data-parallel replicas, disaggregated prefill/decode);
* ``scenario`` — :class:`Scenario` (``jalapeno simulate``'s flags) and :func:`run_scenario`; ``batch`` — the
  scenarios-CSV runner; ``commands`` — the ``simulate`` command.

Never a second scheduler: everything here drives ordinary :class:`~jalapeno.engine.Engine` objects.
"""

from jalapeno.sim.backend import SimBackend, Speculation
from jalapeno.sim.client import SimResult, run_workload
from jalapeno.sim.cluster import Cluster, KVLink
from jalapeno.sim.factory import DEFAULT_MIN_NUM_SEQS, SimLimits, build_sim_engine, build_sim_engines, cost_model_for

__all__ = [
    "DEFAULT_MIN_NUM_SEQS",
    "Cluster",
    "KVLink",
    "SimBackend",
    "SimLimits",
    "SimResult",
    "Speculation",
    "build_sim_engine",
    "build_sim_engines",
    "cost_model_for",
    "run_workload",
]
