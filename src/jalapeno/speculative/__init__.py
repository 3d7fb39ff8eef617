"""Speculative decoding: proposers (n-gram / prompt lookup here; self-speculative in the torch backend), the
per-sequence adaptive draft length and the acceptance counters. Exact rejection sampling lives in
``jalapeno.speculative.rejection`` (torch; imported only by the torch backend and its tests).

The scheduler is unchanged: it already budgets ``1 + k`` tokens and KV slots per decode and gives back the
blocks of rejected positions in ``update_from_output``. The backend fills those slots with draft tokens,
verifies them in one forward pass and returns the accepted tokens plus one (see docs/speculative.md)."""

from jalapeno.speculative.proposer import (
    SPECULATIVE_METHODS,
    AdaptiveK,
    Draft,
    DraftRequest,
    KPolicy,
    MeasuredAcceptance,
    NgramProposer,
    Proposer,
    SpeculativeConfig,
    SpeculativeStats,
    acceptance_from_counters,
    read_acceptance_file,
    spec_config_from_options,
)

__all__ = [
    "SPECULATIVE_METHODS",
    "AdaptiveK",
    "Draft",
    "DraftRequest",
    "KPolicy",
    "MeasuredAcceptance",
    "NgramProposer",
    "Proposer",
    "SpeculativeConfig",
    "SpeculativeStats",
    "acceptance_from_counters",
    "read_acceptance_file",
    "spec_config_from_options",
]
