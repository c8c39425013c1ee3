"""The one module that knows which JAX version is installed.

Every other scalelib module imports mesh, shard_map and device-count helpers from here, so a
change in JAX's API is absorbed in one place. Supported: the range declared in pyproject.toml
(``jax>=0.7``), which covers the JAX that Colab ships and the one pip installs today.
"""

from __future__ import annotations

from typing import Literal, Sequence

import jax

JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:3] if p.isdigit())

AxisKind = Literal["explicit", "auto", "manual"]


def backends_initialized() -> bool:
    """True once JAX has created its backends (after which the CPU device count is fixed)."""
    from jax._src import xla_bridge  # private, but stable across the supported range

    return bool(xla_bridge.backends_are_initialized())


def set_cpu_device_count(n: int) -> None:
    """Ask for ``n`` CPU devices; only effective before the backends start."""
    jax.config.update("jax_num_cpu_devices", n)


def make_mesh(shape: Sequence[int], names: Sequence[str], kind: AxisKind = "explicit", devices=None) -> jax.sharding.Mesh:
    """A device mesh whose axis types are always given explicitly (never JAX's default)."""
    axis_type = {
        "explicit": jax.sharding.AxisType.Explicit,
        "auto": jax.sharding.AxisType.Auto,
        "manual": jax.sharding.AxisType.Manual,
    }[kind]
    return jax.make_mesh(tuple(shape), tuple(names), axis_types=(axis_type,) * len(shape), devices=devices)


shard_map = jax.shard_map


def fast_compiles(enable: bool = True) -> None:
    """Have XLA skip its expensive machine-code (LLVM) optimizations from now on, or stop skipping.

    The HLO optimizations still run, so a compiled program's ops, shardings and collectives
    (``compiled.as_text()``), its ``cost_analysis`` and its argument bytes are what they were; only
    the generated code runs slower. For a notebook's tiny training steps on simulated CPU devices
    compiling costs about a second and running a few milliseconds, so this halves the wait.
    """
    jax.config.update("jax_disable_most_optimizations", bool(enable))
