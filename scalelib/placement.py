"""Putting a whole array onto a mesh: ``jax.device_put`` with the split done on the host when it is there already.

Book section 10 (Programming TPUs in JAX) places a batch or a weight with ``jax.device_put(x, NamedSharding(mesh,
spec))``. When ``x`` is a JAX array held whole by one device, JAX cuts the pieces with a small compiled slicing
program, one per shape and split, about 0.1 s of compiling each on a CPU. On the CPU backend (the simulated devices
of a laptop or Colab) that array already sits in host memory, so :func:`put` hands it to ``device_put`` as a numpy
view and the pieces are cut by indexing, with nothing to compile: the same values on the same devices. An array on
an accelerator, one already split over several devices, a PRNG key, or a tracer (inside jit, grad or vmap) take
JAX's own path.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np


def _host_view(x: Any) -> np.ndarray | None:
    """A numpy view of ``x`` if it is a placed array (not a PRNG key) held whole by a single CPU device, else None.

    A tracer (inside jit, grad or vmap) gets None: it has no sharding to read, and should a later JAX give it one,
    it still cannot become a numpy array, so it takes JAX's own path either way."""
    if not isinstance(x, jax.Array) or jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return None
    try:
        devices: set[Any] = x.sharding.device_set
        if len(devices) == 1 and next(iter(devices)).platform == "cpu" and x.is_fully_addressable:
            return np.asarray(x)  # a view of the CPU buffer, no copy
    except (AttributeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        pass  # not plainly placed: JAX's own path, always right
    return None


def put(x: Any, sharding: jax.sharding.Sharding) -> Any:
    """``jax.device_put(x, sharding)`` for one array; see the module docstring for when the host cuts the pieces.

    Placing onto a single device, or an array already laid out over several, is exactly ``jax.device_put`` (a no-op
    for an array already placed so).
    """
    view = _host_view(x) if len(sharding.device_set) > 1 else None
    return jax.device_put(x if view is None else view, sharding)  # a view: device_put slices it on the host
