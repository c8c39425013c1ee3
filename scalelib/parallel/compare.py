"""What differs between a sharded run and its reference, as sentences (empty lists: nothing differs).

The one comparator of tests/test_parallel_schemes.py, ``scalelib.parallel.selfcheck`` and chapter 5
(book section 5: a scheme must train like one device): values against the single-device step at
fixed tolerances, output placement against the scheme's rules, compiled collectives
(``scalelib.hlo.collective_ops``) against the scheme's ``predicted_collectives`` (and a table of
both to print), and which mesh axes cross processes. A test asserts an empty list; the self-check
prints the sentences.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from scalelib import hlo_text as ht

RTOL, ATOL = 1e-5, 1e-6  # float32 steps against one device (``scalelib.parallel.cases`` says why)
MATMUL_RTOL = MATMUL_ATOL = 1e-5  # tests/test_collective_matmul.py


def differences(got: Any, want: Any, what: str, rtol: float = RTOL, atol: float = ATOL) -> list[str]:
    """Leaves of ``got`` not within ``rtol`` / ``atol`` of ``want`` (pytrees of host arrays)."""
    import jax
    import numpy as np

    pairs, wants = jax.tree_util.tree_flatten_with_path(got)[0], jax.tree.leaves(want)
    if len(pairs) != len(wants):
        return [f"{what}: {len(pairs)} arrays, expected {len(wants)}"]
    out = []
    for (path, g), w in zip(pairs, wants, strict=True):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        name = f"{what}{jax.tree_util.keystr(path)}"
        if g.shape != w.shape:
            out.append(f"{name} has shape {g.shape}, expected {w.shape}")
        elif not np.allclose(g, w, rtol=rtol, atol=atol):
            excess = np.max(np.abs(g - w) - rtol * np.abs(w))
            out.append(f"{name} off by up to {excess:.2e} beyond rtol {rtol:g} (atol {atol:g})")
    return out


def placement(scheme: Any, state: Any, grads: Any, mesh_shape: dict[str, int]) -> list[str]:
    """Outputs not laid out as the scheme's rules say (the gradients as the optimizer state)."""
    import jax
    from jax.sharding import PartitionSpec as P

    from scalelib.parallel import specs

    want = scheme.state_specs(state.params, mesh_shape)

    def placed(tree: Any) -> Any:
        return specs.as_json(jax.tree.map(lambda a: P(*a.sharding.spec), tree))

    out = []
    if placed(state) != specs.as_json(want):
        out.append("the new state is not laid out as the scheme's rules say")
    if placed(grads) != specs.as_json(want.opt.mu):
        out.append("the gradients are not laid out as the optimizer state")
    return out


def op_counts(collectives: Any) -> Counter:
    """Ops per (kind, axes): a prediction's ``count`` each, one per compiled op."""
    from scalelib.parallel.scheme import Collective

    out: Counter = Counter()
    for c in collectives:
        out[(c.kind, c.axes)] += c.count if isinstance(c, Collective) else 1
    return out


def collectives(ops: Any, predicted: Any, mode: str = "sums", hlo_text: str = "") -> list[str]:
    """Compiled collectives against a prediction, as tests/test_parallel_schemes.py compares them.

    "sums": bytes per (kind, axes) equal; XLA may combine ops of one kind into one tuple op, so each
    count lies between 1 and the predicted one. "counts": counts equal too. "each": every op's kind,
    axes and bytes (permutes, whose pairs are no groups, without axes). "loop": a pipeline's tick
    loop kept rolled, so its two permutes appear once, in the one loop that runs collectives, whose trip
    count is the predicted number of ticks, beside one all-reduce.
    """
    from scalelib.parallel.scheme import sum_by_kind

    if mode in ("sums", "counts"):
        got_bytes, want_bytes = sum_by_kind(ops), sum_by_kind(predicted)
        out = [f"{k} over {a}: compiled {got_bytes.get((k, a), 0)} bytes, predicted {b}"
               for (k, a), b in want_bytes.items() if got_bytes.get((k, a), 0) != b]
        out += [f"unpredicted {k} over {a} ({b} bytes)" for (k, a), b in got_bytes.items() if (k, a) not in want_bytes]
        got, want = op_counts(ops), op_counts(predicted)
        for key, n in want.items():
            if key in got and not (got[key] == n if mode == "counts" else 1 <= got[key] <= n):
                out.append(f"{key[0]} over {key[1]}: {got[key]} ops compiled, {n} predicted")
        return out
    if mode == "each":
        seen = Counter((o.kind, o.axes, o.result_bytes) for o in ops)
        want_each: Counter = Counter()
        for p in predicted:
            want_each[(p.kind, None if p.kind == "collective_permute" else p.axes, p.bytes_per_device)] += p.count
        return [] if seen == want_each else [f"compiled collectives {dict(seen)}, predicted {dict(want_each)}"]
    if mode == "loop":
        fwd, bwd, reduce = predicted
        permutes = [o.result_bytes for o in ops if o.kind == "collective_permute"]
        trips = ht.collective_loop_trips(hlo_text)  # XLA may add loops of its own (an expanded scatter)
        reduces = [(o.axes, o.result_bytes) for o in ops if o.kind == "all_reduce"]
        out = []
        if permutes != [fwd.bytes_per_device, bwd.bytes_per_device]:
            out.append(f"permutes of {permutes} bytes, predicted {[fwd.bytes_per_device, bwd.bytes_per_device]}")
        if trips != [fwd.count]:
            out.append(f"trip counts of the loops holding collectives {trips}, predicted one loop of {fwd.count} ticks")
        if reduces != [(reduce.axes, reduce.bytes_per_device)] or len(ops) != 3:
            out.append(f"{len(ops)} collectives with all-reduces {reduces}, predicted one of "
                       f"{reduce.bytes_per_device} B")
        return out
    raise ValueError(f"mode must be 'sums', 'counts', 'each' or 'loop', got {mode!r}")


def collective_table(ops: Any, predicted: Any) -> str:
    """Compiled bytes (ops) next to predicted bytes (ops), one line per (kind, axes) of either."""
    from scalelib.parallel.scheme import sum_by_kind

    got, want = sum_by_kind(ops), sum_by_kind(predicted)
    n_got, n_want = op_counts(ops), op_counts(predicted)
    lines = [f"{'collective':18s} {'axes':16s} {'compiled bytes (ops)':>22s} {'predicted bytes (ops)':>22s}"]
    for k in sorted(set(got) | set(want), key=str):
        lines.append(f"{k[0]:18s} {k[1]!s:16s} {got.get(k, 0):>14,d} ({n_got.get(k, 0):3d}) "
                     f"{want.get(k, 0):>14,d} ({n_want.get(k, 0):3d})")
    return "\n".join(lines)


def axes_cross_processes(mesh: Any, crossing: tuple[str, ...], inside: tuple[str, ...]) -> list[str]:
    """Each axis of ``crossing`` must join devices of different processes (the DCN axis of a pod),
    each of ``inside`` only devices of one process (ICI), when the mesh spans several processes."""
    import numpy as np

    procs = np.vectorize(lambda d: d.process_index)(mesh.devices)  # [mesh shape] process of each device
    if len(np.unique(procs)) == 1:
        return []
    out = []
    for axis in crossing + inside:
        rows = np.moveaxis(procs, mesh.axis_names.index(axis), -1).reshape(-1, mesh.shape[axis])
        spans = any(len(set(row)) > 1 for row in rows)
        if axis in crossing and not spans:
            out.append(f"mesh axis {axis!r} stays inside each process; it should join the processes (the slow link)")
        if axis in inside and spans:
            out.append(f"mesh axis {axis!r} crosses processes; it should stay inside each one (the fast link)")
    return out
