"""Where chips sit and how fast they can reach each other.

Book section 2 (How to Think About TPUs: "TPU networking" and the GPU appendix). A TPU slice is
a 1D/2D/3D grid of chips, each wired by ICI to its nearest neighbours only; an axis whose two
ends are also wired together (a wraparound, decided by ``Chip.has_wraparound``) is a ring, an
axis without one is a line. Chips are attached to CPU hosts over PCIe, and hosts talk to each
other over the data-centre network (DCN). A GPU node is different: NVLink switches connect every
GPU of the node to every other, and nodes are joined by a scale-out network.

Bandwidth conventions follow ``scalelib.hardware``: ``one_way`` is one link in one direction;
``bidi`` is what a chip can push along one axis when it can use both neighbours, which needs a
wraparound on that axis.
"""

from __future__ import annotations

import math
from typing import Sequence, cast
from dataclasses import dataclass

from scalelib.hardware import Chip, CoreFigures
from scalelib.validate import positive_int


@dataclass(frozen=True)
class RingAxis:
    """One axis of devices as the collectives of section 3 see it.

    ``one_way_bytes_per_s``: rate of one device sending to ONE neighbour in ONE direction.
    ``bidi_bytes_per_s``: rate of one device sending along the axis using both directions
    (TPU: twice the one-way rate; switched GPU: the same as one-way, since all NVLink traffic
    shares the GPU's egress).
    """

    size: int
    wraparound: bool
    one_way_bytes_per_s: float
    bidi_bytes_per_s: float
    hop_latency_s: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", positive_int("axis size", self.size))
        for name in ("one_way_bytes_per_s", "bidi_bytes_per_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive finite rate, got {value!r}")
        if self.hop_latency_s < 0:
            raise ValueError(f"hop_latency_s must be >= 0, got {self.hop_latency_s!r}")


def ring_axis(chip: Chip | CoreFigures, size: int, wraparound: bool = True) -> RingAxis:
    """A standalone axis of ``size`` chips (or cores) of ``chip`` (e.g. a ring the book assumes exists)."""
    bidi = chip.ici_bidi_bytes_per_s if chip.torus else chip.ici_one_way_bytes_per_s
    return RingAxis(size, wraparound, chip.ici_one_way_bytes_per_s, bidi, chip.ici_hop_latency_s)


def _check_shape(shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(shape)
    if not shape:
        raise ValueError("slice shape must be a non-empty tuple of positive ints, got ()")
    return tuple(positive_int(f"slice shape {shape!r}: axis {i}", n) for i, n in enumerate(shape))


@dataclass(frozen=True)
class Slice:
    """A TPU slice: ``shape`` chips of ``chip`` joined by ICI (section 2, "TPU networking")."""

    chip: Chip
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _check_shape(self.shape))
        if self.chip.family != "tpu":
            raise ValueError(f"{self.chip.name} is a GPU; use GpuNode / GpuCluster for switched networks")
        if self.num_chips > self.chip.pod_chips or max(self.shape) > max(self.chip.pod_shape):
            raise ValueError(
                f"slice {self.shape} does not fit in a {self.chip.name} pod {self.chip.pod_shape}; "
                "ask for a smaller slice or use several slices joined by DCN")
        self.chip.has_wraparound(self.shape)  # raises on too many axes

    # ---- layout ----
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def num_chips(self) -> int:
        return math.prod(self.shape)

    @property
    def wraparound(self) -> tuple[bool, ...]:
        """Per axis: True where the axis is a ring (torus), False where it is a line (mesh)."""
        return self.chip.has_wraparound(self.shape)

    @property
    def kind(self) -> str:
        """'torus' (every axis of size > 1 wraps), 'mesh' (none does) or 'partial torus'."""
        wraps = [w for w, n in zip(self.wraparound, self.shape) if n > 1]
        if wraps and all(wraps):
            return "torus"
        return "partial torus" if any(wraps) else "mesh"

    def _check_axis(self, axis: int) -> int:
        if not (isinstance(axis, int) and -self.ndim <= axis < self.ndim):
            raise ValueError(f"axis must be an int in [0, {self.ndim}) for slice {self.shape}, got {axis!r}")
        return axis % self.ndim

    def _check_coord(self, coord: Sequence[int]) -> tuple[int, ...]:
        coord = tuple(coord)
        if len(coord) != self.ndim or any(not (0 <= c < n) for c, n in zip(coord, self.shape)):
            raise ValueError(f"coordinate {coord} is not a chip of slice {self.shape}; "
                             f"give {self.ndim} ints with 0 <= c_i < shape[i]")
        return coord

    # ---- hops ----
    def axis_hops(self, a: int, b: int, axis: int) -> int:
        """Shortest hop count from position a to b along one axis (around the ring if it wraps)."""
        axis = self._check_axis(axis)
        d = abs(a - b)
        return min(d, self.shape[axis] - d) if self.wraparound[axis] else d

    def hops(self, src: Sequence[int], dst: Sequence[int]) -> int:
        """ICI hops on a shortest path between two chips (Manhattan distance, rings taken into account)."""
        src, dst = self._check_coord(src), self._check_coord(dst)
        return sum(self.axis_hops(a, b, i) for i, (a, b) in enumerate(zip(src, dst)))

    @property
    def diameter_hops(self) -> int:
        """Largest hop count between any two chips: sum over axes of n // 2 (ring) or n - 1 (line)."""
        return sum(n // 2 if w else n - 1 for n, w in zip(self.shape, self.wraparound))

    def links_at(self, coord: Sequence[int]) -> int:
        """ICI links wired at one chip: corner and edge chips of a mesh have fewer."""
        coord = self._check_coord(coord)
        total = 0
        for c, n, w in zip(coord, self.shape, self.wraparound):
            if n > 1:
                total += (2 if n > 2 else 1) if w else (c > 0) + (c < n - 1)
        return total

    def ports_towards(self, src: Sequence[int], dst: Sequence[int]) -> int:
        """Links out of ``src`` that start a shortest path to ``dst`` (both ways where dst is opposite on a ring)."""
        src, dst = self._check_coord(src), self._check_coord(dst)
        ports = 0
        for i, (a, b) in enumerate(zip(src, dst)):
            n, d = self.shape[i], abs(a - b)
            if d == 0:
                continue
            ports += 2 if self.wraparound[i] and n > 2 and 2 * d == n else 1
        return ports

    # ---- bandwidth per axis ----
    def axis_one_way_bytes_per_s(self, axis: int) -> float:
        """One link, one direction, along ``axis``."""
        self._check_axis(axis)
        return self.chip.ici_one_way_bytes_per_s

    def axis_bidi_bytes_per_s(self, axis: int) -> float:
        """Both directions of one link: usable by a collective only where ``axis`` wraps."""
        self._check_axis(axis)
        return self.chip.ici_bidi_bytes_per_s

    def axis(self, axis: int) -> RingAxis:
        """The axis as a collective sees it (size, wraparound, rates, hop latency)."""
        i = self._check_axis(axis)
        return RingAxis(self.shape[i], self.wraparound[i], self.chip.ici_one_way_bytes_per_s,
                        self.chip.ici_bidi_bytes_per_s, self.chip.ici_hop_latency_s)

    def axes(self, *axes: int) -> tuple[RingAxis, ...]:
        return tuple(self.axis(a) for a in axes)

    # ---- hosts, PCIe and DCN ----
    @property
    def num_hosts(self) -> int:
        """CPU hosts needed: host tiles (``chip.host_shape``) that cover the slice."""
        host = tuple(self.chip.host_shape) + (1,) * (self.ndim - len(self.chip.host_shape))
        return math.prod(math.ceil(n / h) for n, h in zip(self.shape, host[: self.ndim]))

    @property
    def chips_per_host(self) -> int:
        return math.ceil(self.num_chips / self.num_hosts)

    @property
    def host_pcie_bytes_per_s(self) -> float:
        """Host-to-chips rate of one host: each of its chips has its own PCIe link."""
        return self.chips_per_host * self.chip.pcie_bytes_per_s

    @property
    def pcie_bytes_per_s(self) -> float:
        """All hosts loading their chips at once."""
        return self.num_chips * self.chip.pcie_bytes_per_s

    @property
    def dcn_bytes_per_s(self) -> float:
        """Egress of the whole slice onto the data-centre network (sum over its hosts)."""
        return self.num_hosts * self.chip.dcn_bytes_per_s_per_host


@dataclass(frozen=True)
class GpuNode:
    """GPUs of one node, all joined through NVLink switches (section 2, GPU appendix)."""

    chip: Chip
    gpus: int | None = None  # default: the chip's NVLink domain (``pod_shape``)

    def __post_init__(self) -> None:
        if self.chip.family != "gpu":
            raise ValueError(f"{self.chip.name} is a TPU; use Slice for ICI meshes")
        n = self.chip.pod_chips if self.gpus is None else self.gpus
        if not (isinstance(n, int) and 1 <= n <= self.chip.pod_chips):
            raise ValueError(f"gpus must be an int in [1, {self.chip.pod_chips}] for {self.chip.name}, got {n!r}")
        object.__setattr__(self, "gpus", n)

    @property
    def size(self) -> int:
        """GPUs in the node (``gpus``, once the default is filled in)."""
        return cast(int, self.gpus)

    def hops(self, src: int, dst: int) -> int:
        """One switched hop between any two distinct GPUs of the node."""
        for g in (src, dst):
            if not (isinstance(g, int) and 0 <= g < self.size):
                raise ValueError(f"GPU index must be in [0, {self.size}), got {g!r}")
        return 0 if src == dst else 1

    @property
    def egress_bytes_per_s(self) -> float:
        """All NVLink of one GPU, one direction; shared by whatever peers it sends to."""
        return self.chip.ici_one_way_bytes_per_s

    def axis(self) -> RingAxis:
        """A ring over the node; switching gives it a wraparound, but both directions share egress."""
        return RingAxis(self.size, True, self.egress_bytes_per_s, self.egress_bytes_per_s,
                        self.chip.ici_hop_latency_s)


@dataclass(frozen=True)
class GpuCluster:
    """Several GPU nodes joined by the scale-out network (one NIC rate per GPU)."""

    node: GpuNode
    nodes: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", positive_int("nodes", self.nodes))

    @property
    def num_gpus(self) -> int:
        return self.node.size * self.nodes

    @property
    def scale_out_bytes_per_s_per_gpu(self) -> float:
        return self.node.chip.dcn_bytes_per_s_per_chip

    def scale_out_axis(self) -> RingAxis:
        """A ring over nodes (one GPU per node), limited by each GPU's NIC."""
        bw = self.scale_out_bytes_per_s_per_gpu
        return RingAxis(self.nodes, True, bw, bw, self.node.chip.ici_hop_latency_s)
