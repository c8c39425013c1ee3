"""Collective matmuls: the communication of a sharded matmul hidden behind its own arithmetic.

Book section 10 (Programming TPUs in JAX): the collective-matmul example, Exercises 10.1, 10.2 and
10.4. Each per-device function runs inside ``scalelib.compat.shard_map`` and moves data only with
``jax.lax.ppermute`` around one mesh axis (the ring, N devices). Instead of one big collective
before or after the product, the product is cut into N chunks: while a chunk is multiplied, the
block the next chunk needs is already in flight, so on hardware that overlaps the two (TPU ICI DMAs
next to the MXU) the collective costs little beyond its first or last hop.

* ``allgather_matmul``: A[B_X, D_Y] . W[D, F_Y] -> Out[B_X, F_Y]. Collective pattern: AllGather of
  A over Y, done as a ring. The blocks of A go round the ring; the device holding A's column block
  j multiplies it with rows j of its W and adds the product into its output.
* ``matmul_reduce_scatter``: Tmp[B_X, F_Y] . W2[F_Y, D] -> Out[B_X, D_Y]. Pattern: ReduceScatter
  over Y. A partial sum [B/X, D/Y] travels the ring and every device it visits adds its own
  contribution for that output block, computed just before it is needed.
* ``matmul_all_reduce``: A[B_X, D_Y] . W[D_Y, F] -> Out[B_X, F]. Pattern: AllReduce over Y,
  tiled over F: each tile of the output is a ReduceScatter collective matmul followed by a ring
  AllGather of the finished blocks, so a tile's gather can overlap the next tile's products.

One way (``bidirectional=False``) the data moves +1 only: N - 1 ppermutes in N - 1 rounds.
Both ways, half the blocks go each way: floor(N / 2) rounds of two ppermutes (+1 and -1), so
2 floor(N / 2) ppermutes (N - 1 for odd N, N for even N). For even N the device opposite is
reached from both sides, so its block travels as two halves split along the ring-sharded dim.
Every device sends N - 1 blocks' worth of bytes either way.

``on_mesh`` wraps a kind in shard_map + jit over a mesh; ``collective_matmul_cost``
compares, round by round, the time of the chunk products with the time of the blocks in flight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

import jax
import jax.numpy as jnp

from scalelib import collectives, compat, placement, ring_collectives
from scalelib.ring_collectives import ring, send
from scalelib.hardware import Chip, Dtype
from scalelib.sharding import Sharding
from scalelib.validate import positive_int

Kind = Literal["all_gather", "reduce_scatter", "all_reduce"]
KINDS: tuple[str, ...] = collectives.OPS[:3]  # the collective each kind hides: all but AllToAll
_HI = jax.lax.Precision.HIGHEST


def _mm(x: jax.Array, w: jax.Array) -> jax.Array:
    """One chunk's product, accumulated in float32."""
    return jnp.dot(x, w, precision=_HI, preferred_element_type=jnp.float32)


def _half(size: int, what: str, n: int) -> int:
    """Half of ``size``, for the block of the opposite device on an even ring."""
    if size % 2:
        raise ValueError(f"a bidirectional collective matmul on a ring of even size {n} sends the opposite "
                         f"device's block as two halves of {what}, but {what} is {size}, which is odd; "
                         "use an even size or bidirectional=False")
    return size // 2


def allgather_matmul(a_block: jax.Array, w_block: jax.Array, axis_name: str,
                     bidirectional: bool = False) -> jax.Array:
    """Per device: a_block [B/X, D/N], w_block [D, F/N] -> [B/X, F/N] = AllGather_N(A) . W."""
    n, i = ring(axis_name)
    d_blk = a_block.shape[1]  # columns of A per device
    if w_block.shape[0] != n * d_blk:
        raise ValueError(f"W has {w_block.shape[0]} rows per device but A's column blocks add up to "
                         f"{n} x {d_blk} = {n * d_blk}; shard A as [B, D_{axis_name}] and W as [D, F_{axis_name}]")

    def rows(owner: Any, lo: int = 0, size: int = d_blk) -> jax.Array:  # W rows matching A's block `owner`
        return jax.lax.dynamic_slice_in_dim(w_block, (owner % n) * d_blk + lo, size, axis=0)  # [size, F/N]

    out = _mm(a_block, rows(i))  # [B/X, F/N]: own block first, while the first hop is under way
    if not bidirectional:
        held = a_block  # after k hops: A's column block of device i - k
        for k in range(1, n):
            held = send(held, axis_name, n, +1)
            out = out + _mm(held, rows(i - k))
    else:
        right = left = a_block  # after k hops: blocks of devices i - k and i + k
        for k in range(1, n // 2 + 1):
            if n % 2 == 0 and k == n // 2:  # the opposite device: one half from each side
                h = _half(d_blk, f"A's column block (D/{n})", n)
                lo = send(right[:, :h], axis_name, n, +1)  # [B/X, h]
                hi = send(left[:, h:], axis_name, n, -1)  # [B/X, D/N - h]
                out = out + _mm(lo, rows(i - k, 0, h)) + _mm(hi, rows(i + k, h, d_blk - h))
            else:
                right, left = send(right, axis_name, n, +1), send(left, axis_name, n, -1)
                out = out + _mm(right, rows(i - k)) + _mm(left, rows(i + k))
    return out.astype(jnp.result_type(a_block, w_block))


def _place(full: jax.Array, piece: jax.Array, first: bool) -> jax.Array:
    """``full`` [B, c] with ``piece`` added into its first (or last) columns."""
    w = piece.shape[1]
    return full.at[:, :w].add(piece) if first else full.at[:, full.shape[1] - w:].add(piece)


def matmul_reduce_scatter(t_block: jax.Array, w_block: jax.Array, axis_name: str,
                          bidirectional: bool = False) -> jax.Array:
    """Per device: t_block [B/X, F/N], w_block [F/N, D] -> [B/X, D/N] = ReduceScatter_N(T . W)."""
    n, i = ring(axis_name)
    if w_block.shape[0] != t_block.shape[1]:
        raise ValueError(f"Tmp has {t_block.shape[1]} columns per device but W2 has {w_block.shape[0]} rows; "
                         f"shard both over {axis_name!r} along the contracted dim F")
    if w_block.shape[1] % n:
        raise ValueError(f"the output dim D ({w_block.shape[1]}) is scattered over the {n} devices of "
                         f"{axis_name!r}, which does not divide it; pick D a multiple of {n}")
    d_blk = w_block.shape[1] // n

    def part(owner: Any, lo: int = 0, size: int = d_blk) -> jax.Array:  # this device's share of a block
        cols = jax.lax.dynamic_slice_in_dim(w_block, (owner % n) * d_blk + lo, size, axis=1)  # [F/N, size]
        return _mm(t_block, cols)  # [B/X, size], partial over F

    if not bidirectional or n == 1:
        acc = part(i - 1)  # partial sum bound for device i - 1, N - 1 hops away going +1
        for k in range(1, n):
            acc = send(acc, axis_name, n, +1) + part(i - 1 - k)  # now bound for device i - 1 - k
        return acc.astype(jnp.result_type(t_block, w_block))
    m, even = n // 2, n % 2 == 0
    # right moves +1 and is bound for device i + m - k after k hops; left moves -1, bound for i - m + k.
    # For even N both start at the opposite device, which splits its share into two halves.
    h = _half(d_blk, f"the output block (D/{n})", n) if even else d_blk
    right = part(i + m, 0, h)  # [B/X, h]
    left = part(i - m, h, d_blk - h) if even else part(i - m)  # [B/X, D/N - h] or [B/X, D/N]
    for k in range(1, m + 1):
        right, left = send(right, axis_name, n, +1), send(left, axis_name, n, -1)
        if k < m:
            right = _place(part(i + m - k), right, first=True)  # [B/X, D/N]
            left = _place(part(i - m + k), left, first=False)
    out = _place(_place(part(i), right, first=True), left, first=False)  # [B/X, D/N]
    return out.astype(jnp.result_type(t_block, w_block))


def matmul_all_reduce(a_block: jax.Array, w_block: jax.Array, axis_name: str, bidirectional: bool = False,
                      num_tiles: int = 1) -> jax.Array:
    """Per device: a_block [B/X, D/N], w_block [D/N, F] -> [B/X, F] = AllReduce_N(A . W), tiled over F."""
    n, _ = ring(axis_name)
    f = w_block.shape[1]
    num_tiles = positive_int("num_tiles", num_tiles)
    if f % (num_tiles * n):
        raise ValueError(f"F ({f}) is cut into num_tiles={num_tiles!r} tiles of {n} blocks (one per device "
                         f"of {axis_name!r}); pick num_tiles >= 1 with num_tiles x {n} dividing {f}")
    width = f // num_tiles
    tiles = []
    for t in range(num_tiles):
        mine = matmul_reduce_scatter(a_block, w_block[:, t * width:(t + 1) * width], axis_name,
                                     bidirectional)  # [B/X, F/(T N)], summed over the ring
        gathered = ring_collectives.all_gather(mine.T, axis_name, bidirectional)  # [F/T, B/X]
        tiles.append(gathered.T)  # [B/X, F/T]
    return jnp.concatenate(tiles, axis=1)  # [B/X, F]


KERNELS = {"all_gather": allgather_matmul, "reduce_scatter": matmul_reduce_scatter,
           "all_reduce": matmul_all_reduce}


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def shardings(kind: Kind, ring_axis: str = "Y", batch_axis: str | None = "X") -> tuple[Sharding, Sharding, Sharding]:
    """(lhs, rhs, out) in the book's notation, e.g. A[B_X, D_Y], W[D, F_Y], Out[B_X, F_Y]."""
    _check_kind(kind)
    b = (batch_axis,) if batch_axis else ()
    y = (ring_axis,)
    dims: tuple[Any, Any]
    if kind == "all_gather":
        dims = (("B", "D"), ("D", "F"), ("B", "F")), ((b, y), ((), y), (b, y))
    elif kind == "reduce_scatter":
        dims = (("B", "F"), ("F", "D"), ("B", "D")), ((b, y), (y, ()), (b, y))
    else:
        dims = (("B", "D"), ("D", "F"), ("B", "F")), ((b, y), (y, ()), (b, ()))
    names = ("Tmp" if kind == "reduce_scatter" else "A", "W", "Out")
    lhs, rhs, out = (Sharding(d, a, (), nm) for d, a, nm in zip(*dims, names))
    return lhs, rhs, out


def on_mesh(mesh: jax.sharding.Mesh, kind: Kind, ring_axis: str, batch_axis: str | None = None,
            bidirectional: bool = False, num_tiles: int = 1) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """``f(x, w) -> x @ w`` computed by the ``kind`` collective matmul over ``mesh`` (shard_map + jit).

    x is [B, K] and w [K, N], global. Inputs are placed on the shardings of
    ``shardings(kind, ring_axis, batch_axis)`` with ``placement.put``, before the jit and inside
    ``f.jitted``, so any array (placed or not) may be passed to either; global shapes are checked
    first with a clear error.
    """
    _check_kind(kind)
    names = tuple(mesh.axis_names)
    for role, axis in (("ring_axis", ring_axis), ("batch_axis", batch_axis)):
        if axis is not None and axis not in names:
            raise ValueError(f"{role} {axis!r} is not an axis of the mesh, whose axes are {names}; "
                             "pass one of those names")
    if batch_axis == ring_axis:
        raise ValueError(f"batch_axis and ring_axis are both {ring_axis!r}; shard the batch over another axis or None")
    lhs, rhs, out = shardings(kind, ring_axis, batch_axis)
    kernel = KERNELS[kind]
    kw = {"num_tiles": num_tiles} if kind == "all_reduce" else {}
    # The all-reduce output is replicated over the ring, but the ring-built AllGather types it as
    # varying; check_vma=False accepts it (the values are equal on every device: tested).
    body = compat.shard_map(lambda x, w: kernel(x, w, ring_axis, bidirectional, **kw), mesh=mesh,
                            in_specs=(lhs.spec, rhs.spec), out_specs=out.spec, check_vma=kind != "all_reduce")
    in_shardings = tuple(jax.sharding.NamedSharding(mesh, s.spec) for s in (lhs, rhs))

    def place(x: jax.Array, w: jax.Array) -> tuple[jax.Array, ...]:  # under the jit, a resharding
        return tuple(placement.put(v, s) for v, s in zip((x, w), in_shardings))

    jitted = jax.jit(lambda x, w: body(*place(x, w)))

    def run(x: jax.Array, w: jax.Array) -> jax.Array:
        if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
            raise ValueError(f"expected x [B, K] and w [K, N] with matching K, got {x.shape} and {w.shape}")
        for s, shape in ((lhs, x.shape), (rhs, w.shape), (out, (x.shape[0], w.shape[1]))):
            s.local_shape(shape, mesh)  # says which mesh axis fails to divide which dim
        return jitted(*place(x, w))

    run.jitted = jitted  # type: ignore[attr-defined]  # for lowering / compiled-HLO checks
    return run


# ------------------------------------------------------------------ when does the ring hide?

@dataclass(frozen=True)
class CollectiveMatmulCost:
    """Round-by-round time of one device's collective matmul x[B, K] . w[K, N] (section 10).

    A chunk is one device's [B/X, K/Y] . [K/Y, N/Y] product; a block is one message: A's column
    block [B/X, K/Y] (all_gather) or a partial sum [B/X, N/Y] (reduce_scatter, all_reduce).
    Messages go over one ICI link in one direction; both ways, the two directions run at once.
    all_reduce is priced with one tile (num_tiles=1): its scatter rounds, then a gather of the
    finished blocks with no products left to hide under.
    """

    kind: str
    axis_size: int
    bidirectional: bool
    chunk_flops: float
    block_bytes: float
    flops_per_s: float
    link_bytes_per_s: float  # one link, one direction

    @property
    def chunk_s(self) -> float:
        return self.chunk_flops / self.flops_per_s

    @property
    def block_s(self) -> float:
        return self.block_bytes / self.link_bytes_per_s

    @property
    def rounds(self) -> tuple[tuple[float, float], ...]:
        """(compute_s, comms_s) of each round: the products done while the next messages fly."""
        n, c, t = self.axis_size, self.chunk_s, self.block_s
        if not self.bidirectional or n == 1:
            gather = [(c, t)] * (n - 1) + [(c, 0.0)]
        else:  # own chunk, then two received chunks per round; even N ends on two half blocks
            m, even = n // 2, n % 2 == 0
            hop = [t / 2 if even and k == m else t for k in range(1, m + 1)]
            last = c if even else 2 * c
            gather = [(c, hop[0])] + [(2 * c, x) for x in hop[1:]] + [(last, 0.0)]
        if self.kind == "all_gather":
            return tuple(gather)
        scatter = gather[::-1]  # a partial sum is computed, then sent: the gather run backwards
        if self.kind == "reduce_scatter":
            return tuple(scatter)
        return tuple(scatter) + tuple((0.0, t * x) for x in _gather_hops(n, self.bidirectional))

    @property
    def compute_s(self) -> float:
        return sum(c for c, _ in self.rounds)

    @property
    def comms_s(self) -> float:
        return sum(m for _, m in self.rounds)

    @property
    def overlapped_s(self) -> float:
        """Each round lasts as long as the slower of its products and its messages."""
        return sum(max(c, m) for c, m in self.rounds)

    @property
    def serial_s(self) -> float:
        """Nothing overlapped: every product and every message one after the other."""
        return self.compute_s + self.comms_s

    @property
    def hidden(self) -> bool:
        """True when every message takes no longer than the products of its round."""
        return all(m <= c for c, m in self.rounds)


def _gather_hops(n: int, bidirectional: bool) -> tuple[float, ...]:
    """Message of each round of a ring AllGather of finished blocks, in blocks per link direction."""
    if not bidirectional:
        return (1.0,) * (n - 1)
    m = n // 2
    return tuple(0.5 if n % 2 == 0 and k == m else 1.0 for k in range(1, m + 1))


def collective_matmul_cost(kind: Kind, batch: int, k: int, n_out: int, axis_size: int, chip: Chip,
                           batch_shards: int = 1, bidirectional: bool = False, dtype_bytes: float = 2,
                           dtype: Dtype = "bf16") -> CollectiveMatmulCost:
    """Cost of x[batch, k] . w[k, n_out] with the ring over ``axis_size`` devices of ``chip``.

    ``k`` is the contracted dim (D for all_gather, F for reduce_scatter), ``n_out`` the output's
    (F, D). The batch is split over ``batch_shards`` devices of another axis. Bandwidth: the chip's
    one-way ICI link rate (``scalelib.hardware``); FLOPs: its peak for ``dtype``.
    """
    _check_kind(kind)
    for name, v in (("batch", batch), ("k", k), ("n_out", n_out), ("axis_size", axis_size),
                    ("batch_shards", batch_shards)):
        positive_int(name, v)
    b = batch / batch_shards
    chunk_flops = 2 * b * (k / axis_size) * (n_out / axis_size)
    block_elems = b * (k if kind == "all_gather" else n_out) / axis_size
    return CollectiveMatmulCost(kind, axis_size, bool(bidirectional), float(chunk_flops),
                                float(block_elems * dtype_bytes), chip.flops_per_s(dtype),
                                chip.ici_one_way_bytes_per_s)


def hiding_width(chip: Chip, dtype_bytes: float = 2, dtype: Dtype = "bf16") -> float:
    """Smallest N/Y (all_gather) or K/Y (reduce_scatter) for which a chunk outlasts its message.

    A chunk does 2 (B/X)(K/Y)(N/Y) FLOPs while a block of (B/X)(K/Y) elements (all_gather; a
    reduce_scatter sends (B/X)(N/Y)) crosses one link, so the batch cancels: the width of the
    other dim must reach dtype_bytes x C / (2 W_one_way), one chunk per message. Both ways, the
    middle rounds have two chunks per message each way, but the first (or, scattering, the last)
    round still pairs one chunk with a whole block, so the same width hides every round.
    """
    return dtype_bytes * chip.flops_per_s(dtype) / (2 * chip.ici_one_way_bytes_per_s)


def expected_ppermutes(kind: Kind, n: int, bidirectional: bool, num_tiles: int = 1) -> int:
    """ppermutes one device issues: N - 1 one way, 2 floor(N / 2) both ways (per phase)."""
    _check_kind(kind)
    per_phase = 2 * (n // 2) if bidirectional else n - 1
    return per_phase * (2 * num_tiles if kind == "all_reduce" else 1)


__all__ = ["KINDS", "CollectiveMatmulCost", "allgather_matmul", "collective_matmul_cost", "expected_ppermutes",
           "hiding_width", "matmul_all_reduce", "matmul_reduce_scatter", "on_mesh", "shardings"]
