"""Device set-up: N simulated CPU devices on a laptop or Colab, the real chips elsewhere.

Book section 10 (Programming TPUs in JAX) runs its sharding examples on 8 devices; on a machine
without accelerators we ask XLA for 8 CPU "devices" (threads sharing host memory) so the same
code runs unchanged. The count can only be chosen before JAX starts its backends, so call
``setup`` first thing in a notebook or at the top of a test session.

On an accelerator runtime with fewer chips than a chapter lays out (Colab's one GPU or one TPU
v5e), JAX still starts its CPU backend beside the accelerator, with the CPU device count ``setup``
asked for. Single-device work (arrays, ``scalelib.machine``'s roofline, flash attention, the
serving engine) runs on the accelerator, JAX's default device; a mesh built without naming its
devices (``compat.make_mesh``, through ``mesh_devices``) is laid out on the CPU devices when the
accelerators are too few, so the sharding examples run unchanged beside it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from scalelib.device_pick import DeviceSetupError, cpu_devices, mesh_devices
from scalelib.validate import positive_int

__all__ = ["DeviceInfo", "DeviceSetupError", "cpu_devices", "mesh_devices", "request_cpu_devices", "setup"]

DEFAULT_DEVICES = 8
_COUNT_FLAG = "xla_force_host_platform_device_count"


@dataclass(frozen=True)
class DeviceInfo:
    """What ``setup`` found: JAX's default devices and, beside too few accelerators, the CPU devices meshes use."""

    platform: str  # JAX's default backend: 'cpu', 'gpu' or 'tpu'
    count: int  # its devices
    simulated: bool  # True when the devices are CPU threads standing in for chips
    kind: str = ""  # the default devices' device_kind, e.g. "NVIDIA H100 80GB HBM3" ("" when not read)
    mesh_cpu_devices: int = 0  # accelerators too few for the meshes asked for: the CPU devices meshes use instead

    def __str__(self) -> str:
        if self.simulated:
            return f"{self.count} simulated CPU devices"
        chips = f"{self.count} {self.platform.upper()} device{'s' if self.count != 1 else ''}"
        chips += f" ({self.kind})" if self.kind else ""
        if not self.mesh_cpu_devices:
            return chips
        accel = self.platform.upper()
        return (f"{chips}: single-device work runs on it (arrays, scalelib.machine's roofline, flash attention, "
                f"the serving engine).\nMeshes of more than {self.count} device{'s' if self.count != 1 else ''} use "
                f"{self.mesh_cpu_devices} simulated CPU devices beside it, so the sharding examples run unchanged; "
                f"their timings are the CPU's, not the {accel}'s.")


def setup(n: int = DEFAULT_DEVICES) -> DeviceInfo:
    """Make at least ``n`` devices available and say which.

    * CPU only and JAX not started yet: JAX is configured for ``n`` CPU devices.
    * At least ``n`` accelerators (GPU/TPU): they are used as they are.
    * Fewer than ``n`` accelerators: they stay JAX's default devices (single-device work runs there), and the
      ``n`` CPU devices JAX starts beside them hold the meshes (``mesh_devices``); the report says so.
    * Too few devices (JAX already started with fewer CPU devices): ``DeviceSetupError`` explains how to recover.
    """
    n = positive_int("n (the number of devices)", n)
    # XLA_FLAGS covers JAX versions that read the flag at start; the config call covers the rest.
    flag = f"--xla_force_host_platform_device_count={n}"
    flags = os.environ.get("XLA_FLAGS", "")
    if _COUNT_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {flag}".strip()

    import jax

    from scalelib import compat

    if not compat.backends_initialized():
        compat.set_cpu_device_count(n)
    devices = jax.devices()
    platform, kind = devices[0].platform, str(devices[0].device_kind)
    if platform != "cpu":
        if len(devices) >= n:
            return DeviceInfo(platform=platform, count=len(devices), simulated=False, kind=kind)
        cpu = cpu_devices()
        if len(cpu) < n:
            raise DeviceSetupError(
                f"this runtime has {len(devices)} {platform.upper()} device(s), fewer than the {n} the sharding "
                f"examples lay out, and JAX started its CPU backend with {len(cpu)} device(s), so they cannot "
                f"run beside the {platform.upper()} either. {_RESTART}")
        return DeviceInfo(platform=platform, count=len(devices), simulated=False, kind=kind,
                          mesh_cpu_devices=len(cpu))
    if len(devices) < n:
        raise DeviceSetupError(
            f"JAX is already running with {len(devices)} CPU device(s), but {n} were asked for. "
            + _RESTART)
    return DeviceInfo(platform="cpu", count=len(devices), simulated=True, kind=kind)


_RESTART = ("The device count is fixed when JAX starts, so scalelib.devices.setup() must run before any JAX "
            "computation. Restart the kernel (Colab: Runtime > Restart session), then run the set-up cell first.")


def request_cpu_devices(n: int) -> None:
    """Ask for exactly ``n`` CPU devices without starting JAX (so ``jax.distributed`` can start it).

    Unlike ``setup``, a count already in ``XLA_FLAGS`` (inherited from a parent process that set up
    its own devices) is replaced: each process of a multi-process run gets the count its launcher
    gave it. Raises ``DeviceSetupError`` once JAX's backends have started.
    """
    n = positive_int("n (the number of CPU devices)", n)
    from scalelib import compat

    if compat.backends_initialized():
        raise DeviceSetupError(
            f"JAX has already started, so the CPU device count can no longer be set to {n}. Call "
            "scalelib.distributed.initialize() (or request_cpu_devices) before any JAX computation.")
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if _COUNT_FLAG not in f]
    os.environ["XLA_FLAGS"] = " ".join([*kept, f"--{_COUNT_FLAG}={n}"])
    compat.set_cpu_device_count(n)
