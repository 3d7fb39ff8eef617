"""Collective communication costs: time = latency term + bytes / (bandwidth x efficiency).

Every function returns ``(latency_s, seconds_per_byte, sent_per_byte)`` for a message of ``M`` bytes, so the
cost is affine in ``M`` (which the cost model keeps affine in the step's token counts):
``time = latency_s + seconds_per_byte * M`` and each rank sends ``sent_per_byte * M`` bytes.

``M`` is the full per-rank tensor for all-reduce (ring: each rank sends 2(n-1)/n M), the gathered tensor for
all-gather (each rank sends (n-1)/n M), and the bytes a rank sends for all-to-all and point-to-point.
Bandwidths are per chip, per direction (the schema's convention). The topology sets the hop count (latency
term) and, for all-to-all, a contention factor on the bandwidth term (:func:`alltoall_contention`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jalapeno.errors import ConfigError
from jalapeno.hardware.schema import ChipSpec, Efficiency, NetworkLink


@dataclass(frozen=True)
class Collective:
    latency_s: float = 0.0
    s_per_byte: float = 0.0
    sent_per_byte: float = 0.0

    def __add__(self, o: "Collective") -> "Collective":
        return Collective(
            self.latency_s + o.latency_s, self.s_per_byte + o.s_per_byte, self.sent_per_byte + o.sent_per_byte
        )


NONE = Collective()


#: BoardFly (TPU 8i): 4 chips per board fully connected, groups of 8 boards fully connected, groups fully
#: connected to each other (Jeff Dean, https://x.com/JeffDean/status/2047407537566495033: 36 groups x 8 boards
#: x 4 chips = 1,152 chips per pod). A Dragonfly whose routers are boards.
BOARDFLY_BOARD = 4
BOARDFLY_GROUP = 32


def hops(link: NetworkLink, n: int) -> int:
    """Worst-case hops between two of ``n`` chips in ``link``'s topology (capped at ``link.max_hops``).

    BoardFly (a ``dragonfly`` of 4-chip boards in 32-chip groups; ``board_size`` / ``group_size`` set others): a
    path to another group is chip -> board-mate holding the local link -> board in its group holding
    the global link -> that board's chip on the link -> global link -> and the same three back down: 7 hops
    (1 on one board, 3 inside one group); a 3D torus of 1,024 chips (8x8x16) needs 4+4+8 = 16."""
    if n <= 1:
        return 0
    t = link.topology
    if t in ("switch", "fully-connected", "none"):
        h = 1
    elif t in ("ring", "chain"):
        h = math.ceil(n / 2)
    elif t == "torus2d":
        h = sum(d // 2 for d in _box(n, 2))
    elif t == "torus3d":
        h = sum(d // 2 for d in _box(n, 3))
    elif t == "mesh":
        h = sum(d - 1 for d in _box(n, 2))
    elif t in ("boardfly", "dragonfly"):
        b, g = _fly(link)
        h = 1 if n <= b else 3 if n <= g else 7
    else:  # pragma: no cover - schema restricts topologies
        h = 1
    h = max(1, h)
    if link.max_hops is not None and link.max_hops > 0:
        h = min(h, link.max_hops)
    return h


def mean_hops(link: NetworkLink, n: int) -> float:
    """Mean hops from a chip to the other ``n - 1`` chips of its group (uniform all-to-all traffic)."""
    if n <= 1:
        return 0.0
    t = link.topology
    if t in ("switch", "fully-connected", "none"):
        return 1.0
    if t == "ring":
        total = n * n // 4  # sum over destinations (self included) of min(j, n - j)
    elif t == "chain":
        total = (n * n - 1) / 3  # mean |i - j| over all ordered pairs, times n
    elif t in ("torus2d", "torus3d"):
        dims = _box(n, 2 if t == "torus2d" else 3)
        total = n * sum((d * d // 4) / d for d in dims)
    elif t == "mesh":
        total = n * sum((d * d - 1) / (3 * d) for d in _box(n, 2))
    else:  # boardfly / dragonfly: a board hop is needed unless the chip already holds the link (3 of 4 times)
        return _fly_mean(n, *_fly(link))
    return total / (n - 1)


def _fly(link: NetworkLink) -> tuple[int, int]:
    """(chips per board, chips per group) of a boardfly / dragonfly link."""
    return link.board_size or BOARDFLY_BOARD, link.group_size or BOARDFLY_GROUP


def _fly_mean(n: int, b: int, g: int) -> float:
    on_board = min(n, b) - 1
    in_group = min(n, g) - min(n, b)
    across = n - min(n, g)
    miss = (b - 1) / b  # the link a step needs sits on another chip of the board
    boards = max(1, min(n, g) // b)
    local_miss = (boards - 1) / boards  # the global link sits on another board of the group
    h_group = 2 * miss + 1
    h_across = 4 * miss + 2 * local_miss + 1
    return (on_board * 1 + in_group * h_group + across * h_across) / (n - 1)


def alltoall_contention(link: NetworkLink, n: int) -> float:
    """How many times longer a uniform all-to-all's bandwidth term is than ``M / link bandwidth`` (>= 1).

    A switch is non-blocking up to its radix (the domain): 1. A direct network (ring, torus, mesh, BoardFly)
    forwards other chips' traffic on its own links, so the all-to-all is bound by the larger of the link load
    (every byte occupies ``mean_hops`` link transfers out of the ``n x bandwidth`` the group has) and the
    bisection: half of all bytes cross the cut through the longest dimension ``a``, ``2n/a`` links of
    ``bandwidth / (2k)`` each for a k-dimensional torus (``n/a`` links without wrap-around for a mesh), so
    time = ``a k / 4 x M / bandwidth`` (torus) or ``a k / 2`` (mesh; ``n/2`` for a chain). BoardFly's global
    links are balanced with its injection bandwidth (one per chip, Dragonfly's rule), so its link load binds."""
    if n <= 1:
        return 1.0
    t = link.topology
    if t in ("switch", "fully-connected", "none"):
        return 1.0
    load = mean_hops(link, n)
    if t == "ring":
        bis = n / 4
    elif t == "chain":
        bis = n / 2
    elif t in ("torus2d", "torus3d"):
        k = 2 if t == "torus2d" else 3
        bis = max(_box(n, k)) * k / 4
    elif t == "mesh":
        bis = max(_box(n, 2)) * 2 / 2
    else:
        bis = 0.0
    return max(1.0, load, bis)


def _box(n: int, k: int) -> list[int]:
    """Split ``n`` chips into a near-cubic box of ``k`` dimensions (a sub-torus / sub-mesh for the group)."""
    dims = []
    m = n
    for left in range(k, 0, -1):
        target = m ** (1 / left)
        divs = [d for d in range(1, m + 1) if m % d == 0]
        d = min(divs, key=lambda d: (abs(d - target), d))
        dims.append(d)
        m //= d
    return dims


def _bw(link: NetworkLink, eff: float) -> float:
    return float(link.bandwidth_gbps) * 1e9 * eff


def _lat(link: NetworkLink) -> float:
    return float(link.latency_us) * 1e-6


def _flat(link: NetworkLink, eff: float, n: int, kind: str) -> Collective:
    if n <= 1:
        return NONE
    bw = _bw(link, eff)
    if bw <= 0:
        raise ConfigError("the chip's network bandwidth is unknown (0); fill bandwidth_gbps in its hardware file")
    h = hops(link, n)
    if kind == "allreduce":  # ring reduce-scatter + all-gather
        f, phases = 2 * (n - 1) / n, 2
    elif kind == "allgather":
        f, phases = (n - 1) / n, 1
    elif kind == "alltoall":  # M is what this rank sends; the topology's contention stretches it
        return Collective(h * _lat(link), alltoall_contention(link, n) / bw, 1.0)
    else:  # p2p: M is what this rank sends, one hop
        f, phases = 1.0, 1
    return Collective(phases * h * _lat(link), f / bw, f)


def collective(chip: ChipSpec, eff: Efficiency, n: int, kind: str, group_desc: str = "") -> Collective:
    """Cost of one collective of ``kind`` ("allreduce" | "allgather" | "alltoall" | "p2p") over ``n`` chips.

    Uses ``chip.scale_up`` when the group fits in its domain (``domain_size`` 0 = unbounded); otherwise a
    hierarchical scheme: the in-domain part on scale-up, the part that crosses domains on ``chip.scale_out``.
    """
    if n <= 1:
        return NONE
    up = chip.scale_up
    dom = up.domain_size or n
    if n <= dom:
        return _flat(up, eff.scale_up, n, kind)
    out = chip.scale_out
    if out is None:
        raise ConfigError(
            f"a group of {n} chips{group_desc} exceeds the {chip.key} scale-up domain of {dom} and the chip has no "
            "scale-out network; use a smaller tp/ep or add scale_out to its hardware file"
        )
    n_out = math.ceil(n / dom)
    if kind == "allreduce":  # reduce-scatter in domain, all-reduce 1/dom of the data across, all-gather in domain
        inner = _flat(up, eff.scale_up, dom, "allreduce")
        outer = _flat(out, eff.scale_out, n_out, "allreduce")
        return inner + Collective(outer.latency_s, outer.s_per_byte / dom, outer.sent_per_byte / dom)
    if kind == "allgather":
        inner = _flat(up, eff.scale_up, dom, "allgather")
        outer = _flat(out, eff.scale_out, n_out, "allgather")
        return inner + outer
    if kind == "alltoall":  # a fraction (n - dom)/n of what a rank sends leaves its domain
        cross = (n - dom) / n
        inner = _flat(up, eff.scale_up, dom, "alltoall")
        outer = _flat(out, eff.scale_out, n_out, "alltoall")
        return Collective(
            inner.latency_s + outer.latency_s, (1 - cross) * inner.s_per_byte + cross * outer.s_per_byte, 1.0
        )
    return _flat(out, eff.scale_out, 2, "p2p")


def p2p(chip: ChipSpec, eff: Efficiency, crosses_domain: bool) -> Collective:
    """One point-to-point transfer between neighbouring chips (pipeline hand-off): one hop."""
    if crosses_domain and chip.scale_out is not None:
        return _flat(chip.scale_out, eff.scale_out, 2, "p2p")
    return _flat(chip.scale_up, eff.scale_up, 2, "p2p")
