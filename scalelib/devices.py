"""Device set-up: N simulated CPU devices on a laptop or Colab, the real chips elsewhere.

Book section 10 (Programming TPUs in JAX) runs its sharding examples on 8 devices; on a machine
without accelerators we ask XLA for 8 CPU "devices" (threads sharing host memory) so the same
code runs unchanged. The count can only be chosen before JAX starts its backends, so call
``setup`` first thing in a notebook or at the top of a test session.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_DEVICES = 8
_COUNT_FLAG = "xla_force_host_platform_device_count"


class DeviceSetupError(RuntimeError):
    """JAX started with fewer devices than asked for; restarting the process is the fix."""


@dataclass(frozen=True)
class DeviceInfo:
    platform: str  # 'cpu', 'gpu' or 'tpu'
    count: int
    simulated: bool  # True when the devices are CPU threads standing in for chips

    def __str__(self) -> str:
        kind = "simulated CPU devices" if self.simulated else f"{self.platform.upper()} devices"
        return f"{self.count} {kind}"


def setup(n: int = DEFAULT_DEVICES) -> DeviceInfo:
    """Make at least ``n`` devices available and say which.

    * Accelerators present (GPU/TPU): they are used as they are, whatever their count.
    * CPU only and JAX not started yet: JAX is configured for ``n`` CPU devices.
    * CPU only and JAX already started with fewer: ``DeviceSetupError`` explains how to recover.
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int (number of devices), got {n!r}")
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
    platform = devices[0].platform
    if platform != "cpu":
        return DeviceInfo(platform=platform, count=len(devices), simulated=False)
    if len(devices) < n:
        raise DeviceSetupError(
            f"JAX is already running with {len(devices)} CPU device(s), but {n} were asked for. "
            "The device count is fixed when JAX starts, so scalelib.devices.setup() must run before "
            "any JAX computation. Restart the kernel (Colab: Runtime > Restart session), then run "
            "the set-up cell first."
        )
    return DeviceInfo(platform="cpu", count=len(devices), simulated=True)


def request_cpu_devices(n: int) -> None:
    """Ask for exactly ``n`` CPU devices without starting JAX (so ``jax.distributed`` can start it).

    Unlike ``setup``, a count already in ``XLA_FLAGS`` (inherited from a parent process that set up
    its own devices) is replaced: each process of a multi-process run gets the count its launcher
    gave it. Raises ``DeviceSetupError`` once JAX's backends have started.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int (number of CPU devices), got {n!r}")
    from scalelib import compat

    if compat.backends_initialized():
        raise DeviceSetupError(
            f"JAX has already started, so the CPU device count can no longer be set to {n}. Call "
            "scalelib.distributed.initialize() (or request_cpu_devices) before any JAX computation.")
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if _COUNT_FLAG not in f]
    os.environ["XLA_FLAGS"] = " ".join([*kept, f"--{_COUNT_FLAG}={n}"])
    compat.set_cpu_device_count(n)
