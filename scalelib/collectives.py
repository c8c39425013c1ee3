"""Cost model of the ICI collectives (book section 3.3) and of point-to-point transfers (section 2).

Every collective is priced two ways:

* ``bandwidth_s``: the book's closed form. On an axis that wraps, used in both directions,
  ``T_AllGather = T_ReduceScatter = V / (W_bidi * n_axes)``, ``T_AllReduce`` is twice that and
  ``T_AllToAll`` a quarter of it. Used in one direction only (no wraparound, or asked for), the
  ring needs N - 1 hops of V / N bytes over ONE-WAY links: ``T = (N - 1) / N * V / W_one_way``
  (AllToAll: half of that). Several axes share the load, the book's idealisation (harmonic sum).
* ``ring_*``: exact counts of the ring algorithm in ``scalelib.ring_collectives`` (rounds of
  ``ppermute``, messages and bytes each device sends, bytes on the busiest link direction).
  The two agree for large N; they differ by a factor (N - 1) / N for the bidirectional gather,
  and the bidirectional AllToAll's busiest direction carries (N + 2) / (2N) of its bytes
  rather than the book's even half.

``V`` (``array_bytes``) is always the size of ONE copy of the logical array the collective
works on: the gathered output of an AllGather, the unreduced input of a ReduceScatter or
AllReduce, the whole (all shards together) array of an AllToAll.
Latency: each ring round costs ``hop_latency_s`` at least; ``total_s = max(bandwidth, latency)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

from scalelib.topology import RingAxis, Slice

Op = Literal["all_gather", "reduce_scatter", "all_reduce", "all_to_all"]
# The collectives' names, defined once: section 3.3's four, then every kind a compiled program holds
# (XLA spells them with hyphens: all-gather, ..., collective-permute), and the book's spelling.
OPS: tuple[str, ...] = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
KINDS: tuple[str, ...] = OPS + ("collective_permute",)
BOOK_NAMES: dict[str, str] = {"all_gather": "AllGather", "reduce_scatter": "ReduceScatter", "all_reduce": "AllReduce",
                              "all_to_all": "AllToAll", "collective_permute": "CollectivePermute"}


@dataclass(frozen=True)
class RingCounts:
    """What one device does in the ring algorithm over one or more axes."""

    steps: int  # rounds of ppermute (a bidirectional round sends both ways at once)
    sends: int  # ppermute messages sent per device
    bytes_sent: float  # sum over all messages of one device
    busiest_link_bytes: float  # summed over phases: bytes on the most loaded link direction
    max_step_link_bytes: float  # largest single message on one link direction


@dataclass(frozen=True)
class CollectiveCost:
    """Time of one collective, split into the book's bandwidth and latency terms."""

    op: str
    array_bytes: float
    axis_sizes: tuple[int, ...]
    bidirectional: tuple[bool, ...]
    counts: RingCounts
    bandwidth_s: float  # the book's closed form (see module docstring)
    ring_bandwidth_s: float  # busiest link direction of the real ring, one axis after another
    latency_s: float  # ring rounds x per-hop latency
    step_bandwidth_s: float  # largest single message over one link direction

    @property
    def ring_steps(self) -> int:
        return self.counts.steps

    @property
    def bytes_sent_per_device(self) -> float:
        return self.counts.bytes_sent

    @property
    def total_s(self) -> float:
        return max(self.bandwidth_s, self.latency_s)

    @property
    def bound(self) -> str:
        return "bandwidth" if self.bandwidth_s >= self.latency_s else "latency"


# ------------------------------------------------------------------ one axis

def axis_counts(op: Op, n: int, bidirectional: bool, v_bytes: float) -> RingCounts:
    """Exact ring counts of ``op`` over one axis of ``n`` devices for an array of ``v_bytes``.

    AllGather / ReduceScatter, one way: N - 1 rounds of a V / N shard. Both ways: floor(N / 2)
    rounds, the shard going both ways (for even N the shard of the opposite device is split in
    halves, one per direction), so every direction carries (N - 1) / (2N) of V. AllToAll sends
    chunks of V / N^2, each only as far as its destination (one way: (N - 1) ... 1 chunks per
    round; both ways: the nearer direction, ties going right as in the book's footnote).
    """
    _check_op(op)
    if n == 1:
        return RingCounts(0, 0, 0.0, 0.0, 0.0)
    if op == "all_reduce":
        half = axis_counts("reduce_scatter", n, bidirectional, v_bytes)
        return RingCounts(2 * half.steps, 2 * half.sends, 2 * half.bytes_sent,
                          2 * half.busiest_link_bytes, half.max_step_link_bytes)
    if op == "all_to_all":
        chunk = v_bytes / n**2
        right, left = (n // 2, (n - 1) // 2) if bidirectional else (n - 1, 0)
        moved = chunk * (right * (right + 1) + left * (left + 1)) / 2
        return RingCounts(right, right + left, moved, chunk * right * (right + 1) / 2, chunk * right)
    shard = v_bytes / n
    if not bidirectional:
        return RingCounts(n - 1, n - 1, (n - 1) * shard, (n - 1) * shard, shard)
    m = n // 2
    sends = 2 * m
    largest = shard if (n % 2 or m > 1) else shard / 2
    return RingCounts(m, sends, (n - 1) * shard, (n - 1) * shard / 2, largest)


def _book_axis_s(op: Op, axis: RingAxis, bidirectional: bool, v_bytes: float) -> float:
    """The book's closed form over one axis (see module docstring)."""
    n = axis.size
    if n == 1:
        return 0.0
    if bidirectional:
        gather = v_bytes / axis.bidi_bytes_per_s
    else:
        gather = (n - 1) / n * v_bytes / axis.one_way_bytes_per_s
    return {"all_gather": 1.0, "reduce_scatter": 1.0, "all_reduce": 2.0,
            "all_to_all": 0.25 if bidirectional else 0.5}[op] * gather


# ------------------------------------------------------------------ several axes

def _check_op(op: str) -> None:
    if op not in OPS:
        raise ValueError(f"op must be all_gather, reduce_scatter, all_reduce or all_to_all, got {op!r}")


def _directions(axes: tuple[RingAxis, ...], bidirectional: bool | None) -> tuple[bool, ...]:
    if bidirectional is None:
        return tuple(a.wraparound for a in axes)
    if bidirectional:
        lines = [i for i, a in enumerate(axes) if not a.wraparound and a.size > 1]
        if lines:
            raise ValueError(
                f"axes {lines} have no wraparound, so data cannot circle them both ways; pass "
                "bidirectional=None (both ways where the axis wraps) or False")
    return tuple(bool(bidirectional) for _ in axes)


def collective(op: Op, array_bytes: float, axes: RingAxis | Sequence[RingAxis],
               bidirectional: bool | None = None) -> CollectiveCost:
    """Cost of ``op`` on an array of ``array_bytes`` (one copy) over one or more ``axes``.

    ``bidirectional=None`` uses both directions on every axis that wraps (the book's W_bidi
    convention) and one direction on the others (one-way W with N - 1 hops).
    Counts assume the axes are done one after another (first axis first for a gather, last
    first for a scatter); the closed form assumes they share the load (book section 3.3).
    """
    _check_op(op)
    axes = (axes,) if isinstance(axes, RingAxis) else tuple(axes)
    if not axes or not all(isinstance(a, RingAxis) for a in axes):
        raise ValueError(f"axes must be one RingAxis or a non-empty sequence of them, got {axes!r}")
    if not (array_bytes >= 0 and math.isfinite(array_bytes)):
        raise ValueError(f"array_bytes must be a finite number >= 0, got {array_bytes!r}")
    bidi = _directions(axes, bidirectional)
    total = math.prod(a.size for a in axes)

    # Per-axis phases: (axis, bidi, bytes of the logical array in that phase).
    if op == "all_to_all":
        phases = [(a, b, array_bytes * a.size / total) for a, b in zip(axes, bidi)]
    else:
        grown, phases = array_bytes / total, []
        for a, b in zip(axes, bidi):  # gather: the array grows axis by axis
            grown *= a.size
            phases.append((a, b, grown))
        if op in ("reduce_scatter", "all_reduce"):  # scatter: last axis first, the array shrinks
            phases = [(a, b, array_bytes / math.prod(x.size for x in axes[len(axes) - i:]))
                      for i, (a, b) in enumerate(zip(reversed(axes), reversed(bidi)))]
    counts = [axis_counts(op, a.size, b, v) for a, b, v in phases]
    summed = RingCounts(
        sum(c.steps for c in counts), sum(c.sends for c in counts), sum(c.bytes_sent for c in counts),
        sum(c.busiest_link_bytes for c in counts), max(c.max_step_link_bytes for c in counts))

    def per_direction(a: RingAxis, b: bool) -> float:
        return a.bidi_bytes_per_s / 2 if b else a.one_way_bytes_per_s

    ring_s = sum(c.busiest_link_bytes / per_direction(a, b) for c, (a, b, _) in zip(counts, phases))
    step_s = max(c.max_step_link_bytes / per_direction(a, b) for c, (a, b, _) in zip(counts, phases))
    rates = [1.0 / _book_axis_s(op, a, b, array_bytes) for a, b in zip(axes, bidi)
             if a.size > 1 and array_bytes > 0]
    book_s = 1.0 / sum(rates) if rates else 0.0
    latency_s = sum(c.steps * a.hop_latency_s for c, (a, _, _) in zip(counts, phases))
    return CollectiveCost(op, float(array_bytes), tuple(a.size for a in axes), bidi, summed,
                          book_s, ring_s, latency_s, step_s)


def all_gather(array_bytes: float, axes: RingAxis | Sequence[RingAxis],
               bidirectional: bool | None = None) -> CollectiveCost:
    """AllGather [A_X, B] -> [A, B]; ``array_bytes`` is the gathered array (section 3.3)."""
    return collective("all_gather", array_bytes, axes, bidirectional)


def reduce_scatter(array_bytes: float, axes: RingAxis | Sequence[RingAxis],
                   bidirectional: bool | None = None) -> CollectiveCost:
    """ReduceScatter [A, B]{U_X} -> [A, B_X]; ``array_bytes`` is the unreduced input per device."""
    return collective("reduce_scatter", array_bytes, axes, bidirectional)


def all_reduce(array_bytes: float, axes: RingAxis | Sequence[RingAxis],
               bidirectional: bool | None = None) -> CollectiveCost:
    """AllReduce [A, B]{U_X} -> [A, B], done as ReduceScatter then AllGather: twice either one."""
    return collective("all_reduce", array_bytes, axes, bidirectional)


def all_to_all(array_bytes: float, axes: RingAxis | Sequence[RingAxis],
               bidirectional: bool | None = None) -> CollectiveCost:
    """AllToAll [A, B_X] -> [A_X, B]; ``array_bytes`` is the whole array (all shards together)."""
    return collective("all_to_all", array_bytes, axes, bidirectional)


def latency_bound_bytes(axis: RingAxis) -> float:
    """Message size below which one hop costs more in latency than in bandwidth (one-way link)."""
    return axis.one_way_bytes_per_s * axis.hop_latency_s


# ------------------------------------------------------------------ point to point (section 2)

@dataclass(frozen=True)
class Transfer:
    """Sending one buffer between two chips of a slice (Exercise 2.5's pattern)."""

    num_bytes: float
    hops: int
    ports: int  # links used in parallel at the busier end
    bytes_per_s: float  # ports x one-way link rate
    first_byte_s: float  # hops x per-hop latency
    bandwidth_s: float  # num_bytes / bytes_per_s: the book's "total transfer" estimate

    @property
    def total_s(self) -> float:
        """Arrival of the last byte: first-byte latency plus the streaming time."""
        return self.first_byte_s + self.bandwidth_s


def point_to_point(sl: Slice, src: Sequence[int], dst: Sequence[int], num_bytes: float) -> Transfer:
    """Send ``num_bytes`` from chip ``src`` to chip ``dst``, split over every link pointing towards it."""
    if not (num_bytes >= 0 and math.isfinite(num_bytes)):
        raise ValueError(f"num_bytes must be a finite number >= 0, got {num_bytes!r}")
    hops = sl.hops(src, dst)
    if hops == 0:
        return Transfer(float(num_bytes), 0, 0, math.inf, 0.0, 0.0)
    ports = min(sl.ports_towards(src, dst), sl.ports_towards(dst, src))
    rate = ports * sl.chip.ici_one_way_bytes_per_s
    return Transfer(float(num_bytes), hops, ports, rate, hops * sl.chip.ici_hop_latency_s, num_bytes / rate)


def receive_bound_s(sl: Slice, dst: Sequence[int], bytes_received: float) -> float:
    """Lower bound on one chip taking in ``bytes_received``: every link it has, one way each."""
    if not (bytes_received >= 0 and math.isfinite(bytes_received)):
        raise ValueError(f"bytes_received must be a finite number >= 0, got {bytes_received!r}")
    links = sl.links_at(dst)
    if links == 0:
        raise ValueError(f"chip {tuple(dst)} of slice {sl.shape} has no ICI links to receive on")
    return bytes_received / (links * sl.chip.ici_one_way_bytes_per_s)


def gather_to_one_s(sl: Slice, dst: Sequence[int], array_bytes: float) -> float:
    """Copy an array spread evenly over the slice onto one chip (Exercise 2.6's ICI step)."""
    return receive_bound_s(sl, dst, array_bytes * (sl.num_chips - 1) / sl.num_chips)
