"""The four collectives of book section 3.3 built by hand from neighbour-to-neighbour sends.

Each function runs per device inside ``scalelib.compat.shard_map`` and moves data only with
``jax.lax.ppermute`` to the next (+1) or previous (-1) device of one mesh axis: a ring. Results
equal ``jax.lax.all_gather`` / ``psum_scatter`` / ``psum`` / ``all_to_all`` (tiled, along dim 0).

* One way: data flows +1 only; N - 1 rounds.
* Both ways: floor(N / 2) rounds, each sending one message +1 and one -1 (the book's
  bidirectional ring). For even N the device exactly opposite is reached from both sides, so
  its shard (AllGather) or partial sum (ReduceScatter) travels as two halves, one per direction.
  AllToAll sends each chunk the shorter way round, the opposite one going +1.

``trace_ppermutes`` counts rounds, messages and bytes from the traced program, so they can be
held against ``scalelib.collectives.axis_counts``; ``compiled_collectives`` lists the
collective ops XLA compiles a program into.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import jax
import jax.extend.core as jex_core
import jax.numpy as jnp
import numpy as np

from scalelib import compat, hlo


def ring(axis_name: str) -> tuple[int, jax.Array]:
    """(ring size N, this device's position i) along ``axis_name``, inside shard_map."""
    try:
        return jax.lax.axis_size(axis_name), jax.lax.axis_index(axis_name)
    except NameError as err:
        raise ValueError(f"axis {axis_name!r} is not an axis of the enclosing shard_map ({err}); "
                         "call this inside compat.shard_map over a mesh that has that axis") from err


def send(x: jax.Array, axis_name: str, n: int, step: int) -> jax.Array:
    """Every device sends ``x`` to its neighbour ``step`` (+1 or -1) along the ring of ``n`` devices."""
    return jax.lax.ppermute(x, axis_name, [(j, (j + step) % n) for j in range(n)])


def _by_offset(pieces: list, i: jax.Array, n: int) -> jax.Array:
    """pieces[o] belongs to device i + o; return them stacked in device order."""
    stacked = jnp.stack(pieces)  # [N, ...] ordered by offset from this device
    return stacked[(jnp.arange(n) - i) % n]


def _check_halves(x: jax.Array, what: str) -> int:
    if x.size % 2:
        raise ValueError(f"a bidirectional {what} on a ring of even size splits a {what} in two, "
                         f"but it has {x.size} elements (shape {x.shape}); use an even size or bidirectional=False")
    return x.size // 2


def all_gather(x: jax.Array, axis_name: str, bidirectional: bool = False) -> jax.Array:
    """AllGather along dim 0: [S, ...] per device -> [N * S, ...], shards in device order."""
    n, i = ring(axis_name)
    pieces: list[Any] = [None] * n  # pieces[o]: shard of device i + o, [S, ...]
    pieces[0] = x
    if not bidirectional:
        buf = x
        for k in range(1, n):
            buf = send(buf, axis_name, n, +1)  # now the shard of device i - k
            pieces[n - k] = buf
    else:
        right = left = x
        for k in range(1, n // 2 + 1):
            if n % 2 == 0 and k == n // 2:  # the opposite device: half from each side
                h = _check_halves(x, "shard")
                lo = send(right.reshape(-1)[:h], axis_name, n, +1)
                hi = send(left.reshape(-1)[h:], axis_name, n, -1)
                pieces[k] = jnp.concatenate([lo, hi]).reshape(x.shape)
            else:
                right, left = send(right, axis_name, n, +1), send(left, axis_name, n, -1)
                pieces[n - k], pieces[k] = right, left
    out = _by_offset(pieces, i, n)  # [N, S, ...]
    return out.reshape((n * x.shape[0],) + x.shape[1:])


def _add(block: jax.Array, part: jax.Array, which: str) -> jax.Array:
    """Add ``part`` (the whole block, or its first/second flattened half) into ``block``."""
    if which == "all":
        return block + part
    flat = block.reshape(-1)
    h = flat.size // 2
    flat = flat.at[:h].add(part) if which == "lo" else flat.at[h:].add(part)
    return flat.reshape(block.shape)


def reduce_scatter(x: jax.Array, axis_name: str, bidirectional: bool = False) -> jax.Array:
    """ReduceScatter along dim 0: [N * S, ...] per device -> [S, ...], block i summed over devices."""
    n, i = ring(axis_name)
    if x.shape[0] % n:
        raise ValueError(f"dim 0 of the input ({x.shape[0]}) must be a multiple of the ring size {n}")
    blocks = x.reshape((n, x.shape[0] // n) + x.shape[1:])  # [N, S, ...]

    def block(offset: int) -> jax.Array:  # this device's contribution to device i + offset
        return jax.lax.dynamic_index_in_dim(blocks, (i + offset) % n, 0, keepdims=False)

    if not bidirectional:
        acc = block(-1)  # partial sum travelling towards device i - 1, N - 1 hops away
        for k in range(1, n):
            acc = send(acc, axis_name, n, +1) + block(-1 - k)
        return acc
    if n == 1:
        return block(0)
    m, even = n // 2, n % 2 == 0
    # Partial sums for device i + m (moving +1) and i - m (moving -1); for even N those are the
    # same device, which gets the first half of the block from one side and the second from the other.
    right, left = block(m), block(-m)
    r_part = l_part = "all"
    if even:
        h = _check_halves(right, "block")
        right, left = right.reshape(-1)[:h], left.reshape(-1)[h:]
        r_part, l_part = "lo", "hi"
    for k in range(1, m + 1):
        right, left = send(right, axis_name, n, +1), send(left, axis_name, n, -1)
        if k < m:
            right, left = _add(block(m - k), right, r_part), _add(block(k - m), left, l_part)
            r_part = l_part = "all"
    return _add(_add(block(0), right, r_part), left, l_part)


def all_reduce(x: jax.Array, axis_name: str, bidirectional: bool = False) -> jax.Array:
    """AllReduce = ReduceScatter then AllGather (twice the traffic of either)."""
    return all_gather(reduce_scatter(x, axis_name, bidirectional), axis_name, bidirectional)


def all_to_all(x: jax.Array, axis_name: str, bidirectional: bool = False) -> jax.Array:
    """AllToAll along dim 0: chunk j of [N * C, ...] goes to device j; chunks come back in source order."""
    n, i = ring(axis_name)
    if x.shape[0] % n:
        raise ValueError(f"dim 0 of the input ({x.shape[0]}) must be a multiple of the ring size {n}")
    chunks = x.reshape((n, x.shape[0] // n) + x.shape[1:])  # [N, C, ...] by destination
    mine = chunks[(i + jnp.arange(n)) % n]  # [N, C, ...]: mine[o] is for device i + o
    got: list[Any] = [None] * n  # got[o]: chunk that device i + o sent here
    got[0] = mine[0]
    right_hops, left_hops = (n // 2, (n - 1) // 2) if bidirectional else (n - 1, 0)
    right = mine[1 : right_hops + 1]  # for devices i+1 .. i+right_hops
    left = mine[::-1][: left_hops]  # for devices i-1 .. i-left_hops
    for k in range(1, right_hops + 1):
        right = send(right, axis_name, n, +1)  # from device i - k; its first chunk is ours
        got[n - k], right = right[0], right[1:]
        if k <= left_hops:
            left = send(left, axis_name, n, -1)
            got[k], left = left[0], left[1:]
    out = _by_offset(got, i, n)  # [N, C, ...] by source
    return out.reshape(x.shape)


OPS = {"all_gather": all_gather, "reduce_scatter": reduce_scatter,
       "all_reduce": all_reduce, "all_to_all": all_to_all}


def on_mesh(fn: Callable, mesh: jax.sharding.Mesh, in_specs: Any, out_specs: Any) -> Callable:
    """``fn`` run per device over ``mesh`` (shard_map), jitted."""
    return jax.jit(compat.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs))


# ------------------------------------------------------------------ reading the program back

@dataclass(frozen=True)
class PpermuteTrace:
    """ppermute sends of one device, read from a traced program (not from our own bookkeeping)."""

    sends: int  # ppermute equations
    steps: int  # longest chain of ppermutes that depend on each other
    bytes_sent: float  # operand bytes summed over the sends
    max_message_bytes: float
    shifts: frozenset  # ring offsets used, e.g. {1, -1}


def _sub_jaxprs(eqn: Any) -> Iterator[Any]:
    for value in eqn.params.values():
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, jex_core.ClosedJaxpr):
                yield v.jaxpr
            elif isinstance(v, jex_core.Jaxpr):
                yield v


def _walk(jaxpr: Any, in_depths: list[int], found: list) -> list[int]:
    depth = dict(zip(jaxpr.invars, in_depths))

    def get(v: Any) -> int:
        return depth.get(v, 0) if not isinstance(v, jex_core.Literal) else 0

    for eqn in jaxpr.eqns:
        d_in = max((get(v) for v in eqn.invars), default=0)
        if eqn.primitive.name == "ppermute":
            n = len(eqn.params["perm"])
            offs = {(dst - src) % n for src, dst in eqn.params["perm"]}
            nbytes = sum(np.prod(v.aval.shape) * v.aval.dtype.itemsize for v in eqn.invars)
            found.append((float(nbytes), frozenset(o if o <= n // 2 else o - n for o in offs)))
            outs = [d_in + 1] * len(eqn.outvars)
        else:
            outs = [d_in] * len(eqn.outvars)
            for sub in _sub_jaxprs(eqn):
                args = [get(v) for v in eqn.invars]
                if len(args) != len(sub.invars):
                    args = [d_in] * len(sub.invars)
                sub_out = _walk(sub, args, found)
                if len(sub_out) == len(eqn.outvars):
                    outs = [max(a, b) for a, b in zip(outs, sub_out)]
        for v, d in zip(eqn.outvars, outs):
            depth[v] = d
    return [get(v) for v in jaxpr.outvars]


def trace_ppermutes(fn: Callable, *args: Any) -> PpermuteTrace:
    """Trace ``fn(*args)`` and count its ppermutes (per device: shard_map bodies see local shapes)."""
    closed = jax.make_jaxpr(fn)(*args)
    found: list = []
    outs = _walk(closed.jaxpr, [0] * len(closed.jaxpr.invars), found)
    return PpermuteTrace(
        sends=len(found), steps=max(outs, default=0),
        bytes_sent=sum(b for b, _ in found), max_message_bytes=max((b for b, _ in found), default=0.0),
        shifts=frozenset().union(*(s for _, s in found)))


def compiled_collectives(fn: Any, *args: Any) -> set[str]:
    """Collective op kinds in the HLO that XLA compiles ``fn`` (a jitted function) into."""
    return set(hlo.COLLECTIVE_OP.findall(fn.lower(*args).compile().as_text()))
