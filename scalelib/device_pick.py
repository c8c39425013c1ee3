"""Which devices a mesh is laid out on when its caller names none (below both ``compat`` and ``devices``).

On a machine with enough accelerators, the first of JAX's default devices; beside too few (Colab's one GPU), the
simulated CPU devices ``scalelib.devices.setup`` asked for next to them, so the course's 8-device sharding examples
run unchanged while single-device work stays on the accelerator.
"""

from __future__ import annotations

from typing import Any

from scalelib.validate import positive_int


class DeviceSetupError(RuntimeError):
    """JAX started with fewer devices than asked for; restarting the process is the fix."""



def cpu_devices() -> list[Any]:
    """JAX's CPU devices, [] when the CPU backend is left out (``JAX_PLATFORMS=cuda``, say)."""
    import jax

    try:
        return list(jax.devices("cpu"))
    except RuntimeError:  # "Unknown backend cpu" / backend failed to initialize
        return []


def mesh_devices(n: int) -> list[Any]:
    """The ``n`` devices a mesh of ``n`` devices is laid out on when its caller names none.

    ``compat.make_mesh`` calls it. The first ``n`` of JAX's default devices when there are that many (every
    CPU set-up; an accelerator machine with at least ``n`` chips; all processes' devices in a multi-process
    job), else, in a single process beside too few accelerators, the first ``n`` CPU devices that ``setup``
    asked for. Neither: ``DeviceSetupError`` saying what to do.
    """
    n = positive_int("n (the number of devices in the mesh)", n)
    import jax

    default = jax.devices()
    if len(default) >= n:
        return list(default[:n])
    platform = default[0].platform
    if platform != "cpu" and jax.process_count() == 1:
        cpu = cpu_devices()
        if len(cpu) >= n:
            return cpu[:n]
        more = f" and {len(cpu)} CPU device(s)"
    else:
        more = ""
    raise DeviceSetupError(
        f"a mesh of {n} devices needs {n} devices, but this process has {len(default)} {platform.upper()} "
        f"device(s){more}. Ask for them first thing, before any JAX computation: scalelib.devices.setup({n}) "
        "(in a notebook: restart the kernel and run the set-up cell first, with the count changed), or build a "
        "smaller mesh.")
