"""The one module that knows which JAX version is installed.

Every other scalelib module imports mesh, shard_map and device-count helpers from here, so a
change in JAX's API is absorbed in one place. Supported: the range declared in pyproject.toml
(``jax>=0.7.2``), which covers the JAX that Colab ships and the one pip installs today. On jax 0.7.0
eight parallel-scheme tests fail (XLA does not combine the gradient all-reduces into one, and
``scatter_add`` has no sharding rule), so the floor is 0.7.2, the release Colab ships.

Ahead of the range: jax 0.11's changelog removes names from ``jax.core`` and ``jax.interpreters.pxla``, makes
``jnp.empty`` return uninitialised memory, and drops Python 3.11 and NumPy 2.0. scalelib uses none of those names
(``jax.extend.core`` is the public home of what it needs) and never reads an array from ``jnp.empty``
(tests/test_compat.py keeps it so); its one private import, below, degrades instead of failing.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, Literal, Sequence

import jax

from scalelib.device_pick import mesh_devices

JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:3] if p.isdigit())

AxisKind = Literal["explicit", "auto", "manual"]


def backends_initialized() -> bool:
    """True once JAX has created its backends (after which the CPU device count is fixed)."""
    try:
        from jax._src import xla_bridge  # private, but stable across the supported range

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # a JAX past the range moved it: say "not yet", so the count is still
        return False  # asked for (set_cpu_device_count), and XLA_FLAGS, set before, covers a JAX that ignores it


def set_cpu_device_count(n: int) -> None:
    """Ask for ``n`` CPU devices; only effective before the backends start."""
    jax.config.update("jax_num_cpu_devices", n)


def make_mesh(shape: Sequence[int], names: Sequence[str], kind: AxisKind = "explicit",
              devices: Sequence[Any] | None = None) -> jax.sharding.Mesh:
    """A device mesh whose axis types are always given explicitly (never JAX's default).

    Without ``devices`` the mesh takes the first ``prod(shape)`` of ``scalelib.device_pick.mesh_devices``: JAX's
    default devices, or beside too few accelerators (one GPU) the simulated CPU devices set up next to them.
    """
    if devices is None:
        devices = mesh_devices(int(math.prod(shape)))
    axis_type = {
        "explicit": jax.sharding.AxisType.Explicit,
        "auto": jax.sharding.AxisType.Auto,
        "manual": jax.sharding.AxisType.Manual,
    }[kind]
    return jax.make_mesh(tuple(shape), tuple(names), axis_types=(axis_type,) * len(shape), devices=devices)


shard_map = jax.shard_map


def pvary(x: Any, axis_name: str | tuple[str, ...]) -> Any:
    """Mark ``x`` as varying over ``axis_name`` inside ``shard_map`` (no data moves).

    The transpose of this cast is a psum, so a gradient taken with respect to the cast value stays
    per device until the step reduces it explicitly. JAX 0.8.2 renamed ``lax.pvary(x, axes)`` to
    ``lax.pcast(x, axes, to="varying")``; the old name is gone from 0.9. Works on pytrees.
    """
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(x, axis_name, to="varying")
    return jax.lax.pvary(x, axis_name)  # type: ignore[attr-defined]  # gone from 0.9 and from its stubs


def all_gather_invariant(x: jax.Array, axis_name: str | tuple[str, ...], *, axis: int = 0,
                         tiled: bool = False) -> jax.Array:
    """AllGather whose result is typed invariant (the same on every device) over ``axis_name``.

    Its transpose is a ReduceScatter to this device's shard rather than a psum. JAX 0.9 spells it
    ``lax.all_gather(..., to="invarying")``; earlier releases have ``lax.all_gather_invariant``.
    """
    if hasattr(jax.lax, "all_gather_invariant"):
        return jax.lax.all_gather_invariant(x, axis_name, axis=axis, tiled=tiled)
    return jax.lax.all_gather(x, axis_name, axis=axis, tiled=tiled, to="invarying")


def fast_compiles(enable: bool = True) -> None:
    """Have XLA skip its expensive machine-code (LLVM) optimizations from now on, or stop skipping.

    The HLO optimizations still run, so a compiled program's ops, shardings and collectives
    (``compiled.as_text()``), its ``cost_analysis`` and its argument bytes are what they were; only
    the generated code runs slower. For a notebook's tiny training steps on simulated CPU devices
    compiling costs about a second and running a few milliseconds, so this halves the wait.
    """
    jax.config.update("jax_disable_most_optimizations", bool(enable))


@contextlib.contextmanager
def enable_x64() -> Iterator[None]:
    """Within the block, JAX computes in 64-bit by default (float64 arrays, float64 programs).

    Tests use it to compare two orderings of the same sums without float32 rounding noise.
    JAX 0.9 moved the context manager from ``jax.experimental.enable_x64`` to ``jax.enable_x64``.
    """
    if hasattr(jax, "enable_x64"):
        with jax.enable_x64(True):
            yield
    else:
        from jax.experimental import enable_x64 as _enable_x64  # type: ignore[attr-defined]  # moved in 0.9

        with _enable_x64():
            yield


# ------------------------------------------------------------------ profiler traces (scalelib.profiling.trace)

# What XLA:CPU names its ops in a trace when the compiled HLO is not at hand to say what they are
# (with the HLO, scalelib reads each op's opcode instead). jax 0.7.2 keeps a matmul as `dot.N` and a
# relayout as `copy.N`; jax 0.10.2 wraps them as `ynn_fusion.N` (a matmul handed to the YNNPACK
# library) and `wrapped_copy.N`. A collective is named after its opcode (`all-gather`) when XLA's
# partitioner made it, after the JAX primitive (`ppermute.3`, `reduce_scatter.7`) when shard_map did.
CPU_OP_NAME_KINDS: tuple[tuple[str, str], ...] = (
    ((r"^(all[-_]gather|all[-_]reduce|reduce[-_]scatter|all[-_]to[-_]all|collective[-_]permute"
      r"|collective[-_]broadcast|ppermute|psum|pmax|pmin|psum_scatter)(-start|-done)?(\.\d+)?$"), "collective"),
    (r"^(wrapped_)?copy(-start|-done)?(\.\d+)?$", "copy"),
)


def _wire_stop(data: bytes) -> int | None:
    """Offset of the first top-level protobuf field that runs past the end of ``data`` (None: intact)."""
    pos, end = 0, len(data)

    def varint(at: int) -> tuple[int, int]:
        value, shift = 0, 0
        while at < end and shift < 64:
            byte = data[at]
            value, at, shift = value | (byte & 0x7F) << shift, at + 1, shift + 7
            if byte < 0x80:
                return value, at
        raise IndexError

    while pos < end:
        start = pos
        try:
            tag, pos = varint(pos)
            wire = tag & 7
            if tag >> 3 == 0 or wire not in (0, 1, 2, 5):
                return start
            if wire == 0:
                _, pos = varint(pos)
            elif wire == 2:
                size, pos = varint(pos)
                pos += size
            else:
                pos += 8 if wire == 1 else 4
        except IndexError:
            return start
        if pos > end:
            return start
    return None


def parse_xspace(data: bytes) -> Any:
    """``jax.profiler.ProfileData`` of a serialized XSpace (the ``.xplane.pb`` a trace writes).

    jax 0.7.2 aborts the whole Python process (a C++ CHECK) on bytes that do not parse, where 0.10.2
    raises; so the bytes are walked first (protobuf wire format, top level: a cut-short file always
    fails here) and a ``ValueError`` names the byte where they stop making sense.
    """
    from jax.profiler import ProfileData

    stop = _wire_stop(data)
    if stop is not None:
        raise ValueError(f"the trace data stops making sense at byte {stop} of {len(data)}")
    try:
        return ProfileData.from_serialized_xspace(data)
    except Exception as err:  # jaxlib's error type differs between versions
        raise ValueError(f"the trace data could not be parsed ({type(err).__name__}: {err})") from None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send what C++ code writes to file descriptor 2 to /dev/null for the block."""
    import os
    import sys

    sys.stderr.flush()
    try:
        saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    except OSError:  # no descriptor 2 to silence (a closed stderr): nothing to do
        yield
        return
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@contextlib.contextmanager
def profiler_trace(directory: str) -> Iterator[None]:
    """``jax.profiler.trace(directory)`` without jax 0.7.2's noise.

    On 0.7.2 starting and stopping the profiler each log "Can't import tensorflow.python.profiler.trace"
    (the Python tracer looks for TensorFlow; the trace is complete without it), which a notebook shows
    as errors. Only those two calls run with C++ stderr silenced; failures still raise.
    """
    with _quiet_stderr():
        jax.profiler.start_trace(directory)
    try:
        yield
    finally:
        with _quiet_stderr():
            jax.profiler.stop_trace()


# ------------------------------------------------------------------ several processes (jax.distributed)

# gloo (TCP) runs the CPU collectives between processes; the config name and its default ("gloo")
# are the same across the supported range, set explicitly so a user's environment cannot switch it.
CPU_COLLECTIVES = "gloo"

# On jax 0.10.2 (0.7.2 is silent) gloo writes "[Gloo] Rank 3 is connected to 7 peer ranks. ..." straight
# to file descriptor 1 (from C++, not Python) whenever it builds a communicator, i.e. on the first run
# of each group of devices that talk. ``scalelib.launch`` gives descriptor 1 a pipe of its own, apart from
# Python's stdout, and drops those lines from it (it keeps the pattern itself: the launcher does not import
# JAX, to start its processes sooner).


def use_cpu_collectives() -> None:
    """CPU collectives across processes over gloo (before ``jax.distributed.initialize``)."""
    jax.config.update("jax_cpu_collectives_implementation", CPU_COLLECTIVES)


def no_cluster_found(err: BaseException) -> bool:
    """True if ``jax.distributed.initialize()`` (no arguments) failed only because no cluster was found.

    Outside SLURM, Open MPI, Kubernetes or a Cloud TPU VM, JAX cannot guess a coordinator and raises
    ``ValueError('coordinator_address should be defined.')`` (the same text from 0.7.2 to 0.10.2).
    """
    return isinstance(err, ValueError) and "coordinator_address should be defined" in str(err)


def wait_at_barrier(barrier_id: str, timeout_s: int) -> None:
    """Wait until every process of the job has reached the barrier ``barrier_id`` (at most ``timeout_s``).

    The barrier lives in ``jax.distributed``'s coordination service, not in gloo: unlike a collective, it has
    no fixed 30 s limit for the others to arrive, and it runs no program on the devices. The client is private
    (``jax._src.distributed.global_state.client``) but has the same ``wait_at_barrier(id, timeout_ms)`` from
    0.7.2 to 0.10.2. Raises JAX's runtime error (DEADLINE_EXCEEDED) when the time runs out.
    """
    from jax._src import distributed as jax_distributed  # private, but stable across the supported range

    client = jax_distributed.global_state.client
    if client is None:
        raise RuntimeError(f"barrier {barrier_id!r}: jax.distributed is not initialized in this process; call "
                           "scalelib.distributed.initialize() first")
    client.wait_at_barrier(barrier_id, int(timeout_s * 1000))
