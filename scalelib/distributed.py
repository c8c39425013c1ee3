"""Several processes, one program: joining them with ``jax.distributed``, and data in and out.

Book sections 5 and 10: a TPU pod or a GPU cluster runs one process per host, and each process
sees only its own chips. ``jax.distributed.initialize`` joins the processes into one set of devices
(``jax.devices()`` lists them all, ``jax.local_devices()`` the ones this process drives), so one
mesh spans every host and the same ``shard_map`` step runs unchanged; collectives between hosts go
over the network (DCN on a pod, gloo over TCP between CPU processes).

First thing in a script, before any JAX computation::

    from scalelib import distributed
    info = distributed.initialize()

* Under ``python -m scalelib.launch`` the launcher's environment variables give the coordinator,
  this process's rank and its number of CPU devices.
* Elsewhere ``jax.distributed.initialize()`` with no arguments reads the cluster's environment
  (SLURM, Open MPI, Kubernetes, Cloud TPU VMs); with no cluster found, the script runs as one
  process on its local devices.

No array is assumed to be fully addressable: ``from_host`` and ``from_process_rows`` build global
arrays from what each process holds, and ``to_host`` brings any array back to every process.

``python -m scalelib.distributed SCRIPT [ARGS]`` runs a script as one process of a job and exits
at once (status 1, or its ``sys.exit`` status) if the script fails, instead of waiting in JAX's
shutdown barrier for peers that may be stuck in a collective with it. The launcher uses it.
"""

from __future__ import annotations

import errno
import faulthandler
import io
import itertools
import os
import runpy
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from scalelib import devices  # no JAX at import: the launcher imports this module

if TYPE_CHECKING:
    import jax

ENV_COORDINATOR = "SCALELIB_COORDINATOR"  # host:port of process 0's coordination service
ENV_NUM_PROCESSES = "SCALELIB_NUM_PROCESSES"
ENV_PROCESS_ID = "SCALELIB_PROCESS_ID"
ENV_LOCAL_DEVICES = "SCALELIB_LOCAL_DEVICES"  # CPU devices per process
ENV_LAUNCH_ID = "SCALELIB_LAUNCH_ID"  # one id per launch, on every process it starts
ENV_LAUNCHER_PID = "SCALELIB_LAUNCHER_PID"  # the launcher's pid: a process dies with its launcher
ENV_NATIVE_STDOUT_FD = "SCALELIB_NATIVE_STDOUT_FD"  # the pipe that takes file descriptor 1 (see native_stdout_apart)
STACK_SIGNAL = signal.SIGUSR1  # the launcher sends it to a hung process to print its Python stack

# Every wait between processes that a user can meet, in seconds: the variable that sets it and its default. The
# launcher passes them on to its processes; a scheduler's tasks read them from the job's environment. gloo's own
# 30 s (a collective whose members arrive that far apart) cannot be set in JAX, so scalelib never lets one rank
# reach a collective while another still works alone: it meets the others at ``barrier`` first.
ENV_INIT_TIMEOUT = "SCALELIB_INIT_TIMEOUT_S"  # initialize(): every process joins jax.distributed
ENV_BARRIER_TIMEOUT = "SCALELIB_BARRIER_TIMEOUT_S"  # barrier(): every process reaches the same point
ENV_HEARTBEAT_TIMEOUT = "SCALELIB_HEARTBEAT_TIMEOUT_S"  # JAX declares a silent process dead
TIMEOUT_DEFAULTS_S = {ENV_INIT_TIMEOUT: 120, ENV_BARRIER_TIMEOUT: 600, ENV_HEARTBEAT_TIMEOUT: 100}


class DistributedSetupError(RuntimeError):
    """The processes could not be joined as asked; the message says what to change."""


@dataclass(frozen=True)
class ProcessInfo:
    """Where this process stands in the job."""

    process_id: int
    num_processes: int
    local_device_count: int
    device_count: int
    platform: str
    source: str  # "scalelib.launch", "cluster environment" or "single process"

    def __str__(self) -> str:
        return (f"process {self.process_id} of {self.num_processes} ({self.source}): "
                f"{self.local_device_count} of {self.device_count} {self.platform} devices are local")


@dataclass(frozen=True)
class LaunchEnv:
    coordinator: str
    num_processes: int
    process_id: int
    local_devices: int


def launch_env(environ: dict[str, str] | None = None) -> LaunchEnv | None:
    """The launcher's settings from the environment, or None when not started by ``scalelib.launch``."""
    env = os.environ if environ is None else environ
    names = (ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID, ENV_LOCAL_DEVICES)
    present = [n for n in names if n in env]
    if not present:
        return None
    if len(present) < len(names):
        raise DistributedSetupError(f"{sorted(set(names) - set(present))} missing while {present} are set; "
                                    "start the script with python -m scalelib.launch, or unset all of them")
    try:
        n, rank, local = (int(env[k]) for k in (ENV_NUM_PROCESSES, ENV_PROCESS_ID, ENV_LOCAL_DEVICES))
    except ValueError as err:
        raise DistributedSetupError(f"the launcher's variables must be integers: {err}") from None
    if not (n >= 1 and 0 <= rank < n and local >= 1):
        raise DistributedSetupError(f"inconsistent launcher variables: process {rank} of {n}, {local} devices")
    return LaunchEnv(env[ENV_COORDINATOR], n, rank, local)


# The variables JAX's own cluster detection reads (jax._src.clusters): present together only in a task
# its scheduler started (an `srun` step, an `mpirun` rank), with the number of processes of the job.
CLUSTER_PROCESS_COUNTS = (
    ("SLURM_NTASKS", ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")),
    ("OMPI_COMM_WORLD_SIZE", ("OMPI_MCA_orte_hnp_uri", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")),
)


def cluster_processes(environ: dict[str, str] | None = None) -> int | None:
    """How many processes a cluster launcher (SLURM's ``srun``, Open MPI's ``mpirun``) started for
    this job, from the variables JAX reads to join them; None outside one (or with a count that is
    not a positive integer, which ``jax.distributed`` then reports)."""
    env = os.environ if environ is None else environ
    for count, needed in CLUSTER_PROCESS_COUNTS:
        if all(k in env for k in needed):
            try:
                n = int(env[count])
            except ValueError:
                return None
            return n if n >= 1 else None
    return None


def timeout_setting(name: str, environ: dict[str, str] | None = None) -> int:
    """The wait ``name`` (one of ``TIMEOUT_DEFAULTS_S``) in whole seconds: the environment's value, else its default."""
    env = os.environ if environ is None else environ
    text = env.get(name, "").strip()
    if not text:
        return TIMEOUT_DEFAULTS_S[name]
    try:
        seconds = int(text)
    except ValueError:
        seconds = 0
    if seconds < 1:
        raise DistributedSetupError(f"{name}={text!r}: give a whole number of seconds, 1 or more "
                                    f"(default {TIMEOUT_DEFAULTS_S[name]})")
    return seconds


def port_is_free(port: int) -> bool:
    """True if a TCP server could listen on ``port`` on this host, as JAX's coordinator will ([::]:port)."""
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((address, port))
            return True
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return False
            # no IPv6 on this host: try IPv4
    return False


def initialize(local_devices: int | None = None, *, timeout_s: int | None = None) -> ProcessInfo:
    """Join this process to the job (or run alone) and check that every process has as many devices.

    ``local_devices``: CPU devices for this process (ignored on GPUs and TPUs); under the launcher it
    must agree with ``--local-devices`` or be None. ``timeout_s``: how long to wait for every process
    to join (default: ``SCALELIB_INIT_TIMEOUT_S``, else 120). A process that stays silent for
    ``SCALELIB_HEARTBEAT_TIMEOUT_S`` (default 100, JAX's own) is taken for dead and the job fails. A
    second call returns the same information; in a process where JAX already runs alone (a notebook,
    a test session) it only checks the devices.
    """
    import jax

    from scalelib import compat

    env = launch_env()
    if env and local_devices is not None and local_devices != env.local_devices:
        raise DistributedSetupError(f"the script asks for {local_devices} local devices but the launcher gave "
                                    f"--local-devices {env.local_devices}; drop the argument or make them agree")
    if jax.distributed.is_initialized():
        source = "scalelib.launch" if env else "cluster environment"
    elif compat.backends_initialized():
        if env:
            raise DistributedSetupError("JAX has already started in this process, so it cannot join the other "
                                        "processes any more; call scalelib.distributed.initialize() first thing, "
                                        "before any JAX computation")
        source = "single process"
    else:
        count = env.local_devices if env else local_devices
        if count is not None:
            devices.request_cpu_devices(count)
        compat.use_cpu_collectives()
        source = _join(env, timeout_setting(ENV_INIT_TIMEOUT) if timeout_s is None else timeout_s,
                       timeout_setting(ENV_HEARTBEAT_TIMEOUT))
    check_device_counts(env.local_devices if env else local_devices, exact=env is not None)
    return ProcessInfo(jax.process_index(), jax.process_count(), jax.local_device_count(), jax.device_count(),
                       jax.devices()[0].platform, source)


def _join(env: LaunchEnv | None, timeout_s: int, heartbeat_s: int) -> str:
    import jax

    from scalelib import compat

    if env is None:
        try:
            jax.distributed.initialize(initialization_timeout=timeout_s, heartbeat_timeout_seconds=heartbeat_s)
        except ValueError as err:
            if compat.no_cluster_found(err):
                return "single process"
            raise
        _fail_fast_on_uncaught_exceptions()
        return "cluster environment"
    port = int(env.coordinator.rsplit(":", 1)[1])
    if env.process_id == 0 and not port_is_free(port):
        raise DistributedSetupError(f"the coordinator port {port} is already in use on this host (is an earlier "
                                    "run still alive?); pick another with --port, or leave --port out for a free one")
    jax.distributed.initialize(env.coordinator, env.num_processes, env.process_id, initialization_timeout=timeout_s,
                               heartbeat_timeout_seconds=heartbeat_s)
    # The launcher stops processes with SIGTERM, which JAX's preemption notifier would otherwise swallow.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    faulthandler.register(STACK_SIGNAL, all_threads=True)
    _fail_fast_on_uncaught_exceptions()
    return "scalelib.launch"


def check_device_counts(local_devices: int | None = None, exact: bool = True) -> None:
    """Every process must drive the same number of devices (meshes split them evenly), and on CPU
    this one as many as asked for (at least as many when not ``exact``)."""
    import jax

    per_process: dict[int, int] = {}
    for d in jax.devices():
        per_process[d.process_index] = per_process.get(d.process_index, 0) + 1
    if len(set(per_process.values())) > 1:
        counts = ", ".join(f"process {p}: {n}" for p, n in sorted(per_process.items()))
        raise DistributedSetupError(f"processes have different numbers of devices ({counts}); a mesh needs the "
                                    "same count on every process: give every process the same --local-devices "
                                    "(or the same number of chips)")
    have = jax.local_device_count()
    if local_devices is None or jax.devices()[0].platform != "cpu":
        return
    if have < local_devices or (exact and have != local_devices):
        raise DistributedSetupError(f"this process has {have} CPU devices but {local_devices} were asked for; the "
                                    "count is fixed when JAX starts, so call scalelib.distributed.initialize() "
                                    "before any JAX computation (and leave XLA_FLAGS' device count alone)")


def _fail_fast_on_uncaught_exceptions() -> None:
    """An uncaught exception prints its traceback and ends the process at once (status 1).

    A normal exit waits in JAX's shutdown barrier for every peer; after an error the peers may be
    blocked in a collective with this process, so waiting would hang the whole job.
    """
    previous = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        previous(exc_type, exc, tb)
        _exit_now(1)

    sys.excepthook = hook


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe must not keep the process alive
            continue
    os._exit(code)


# ------------------------------------------------------------------ data in and out


def from_host(tree: Any, shardings: Any) -> Any:
    """Global arrays from host arrays every process holds in full (e.g. made from the same seed).

    Each process places only the shards its own devices hold (``jax.make_array_from_callback``).
    ``shardings``: one sharding for all leaves, or a tree of them matching ``tree``.
    """
    import jax

    def one(x: Any, sharding: jax.sharding.Sharding) -> jax.Array:
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    if isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda x: one(x, shardings), tree)
    return jax.tree.map(one, tree, shardings)


def process_rows(sharding: jax.sharding.Sharding, global_shape: tuple[int, ...]) -> slice:
    """The rows (leading dim) of a global array that this process's devices hold, as one slice."""
    index_map = sharding.addressable_devices_indices_map(tuple(global_shape))
    rows = {range(*ix[0].indices(global_shape[0])) if ix else range(global_shape[0]) for ix in index_map.values()}
    start, stop = min(r.start for r in rows), max(r.stop for r in rows)
    if sum(len(r) for r in rows) < stop - start:
        raise ValueError(f"this process's devices hold non-contiguous rows {sorted((r.start, r.stop) for r in rows)} "
                         "of the global array; order the mesh so each process's devices are adjacent on the "
                         "sharded axis (compat.make_mesh does), or use from_host")
    return slice(start, stop)


def from_process_rows(local: Any, sharding: jax.sharding.Sharding, global_shape: tuple[int, ...]) -> jax.Array:
    """A global array from the rows this process holds (``process_rows``): a data loader's batch.

    ``jax.make_array_from_process_local_data``, with a clear error when the rows do not fit.
    """
    import jax

    rows = process_rows(sharding, global_shape)
    local = np.asarray(local)
    want = (rows.stop - rows.start, *global_shape[1:])
    if local.shape != want:
        raise ValueError(f"process {jax.process_index()} holds rows {rows.start}:{rows.stop} of a "
                         f"{tuple(global_shape)} array, so its local data must have shape {want}, got {local.shape}")
    return jax.make_array_from_process_local_data(sharding, local, tuple(global_shape))


def to_host(tree: Any) -> Any:
    """Every leaf as a full numpy array on every process, whatever its sharding (a collective when
    the array spans processes: call it on all processes together)."""
    import jax
    from jax.experimental import multihost_utils

    def one(x: Any) -> np.ndarray:
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return np.asarray(x)
        if x.is_fully_replicated:
            return np.asarray(x.addressable_shards[0].data)
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(one, tree)


def broadcast_from_first(tree: Any) -> Any:
    """``tree`` as process 0 holds it, as numpy arrays on every process: one sum over every device of process 0's
    values and the others' zeros (``multihost_utils.broadcast_one_to_all``). The other processes pass a tree of the
    same structure, shapes and dtypes; their values are not used. A collective: call it on all processes together."""
    import jax
    from jax.experimental import multihost_utils

    return jax.tree.map(np.asarray, multihost_utils.broadcast_one_to_all(tree))  # (alone: the tree as numpy)


_barrier_count = itertools.count()  # every process calls barrier() in the same order, so the counts agree


def barrier(name: str, timeout_s: int | None = None) -> None:
    """Wait until every process reaches this point (a no-op alone), at most ``timeout_s`` (default:
    ``SCALELIB_BARRIER_TIMEOUT_S``, else 600).

    Call it after work whose length varies between processes (compiling, loading, anything one
    process does alone) and before new collectives: gloo gives the members of a collective a fixed
    30 s to arrive, which a busy machine or a slow first step can overrun. The wait is
    ``jax.distributed``'s own barrier (the coordination service), not a collective, so its only limit
    is the one given here.
    """
    import jax

    from scalelib import compat

    if jax.process_count() == 1:
        return
    wait_s = timeout_setting(ENV_BARRIER_TIMEOUT) if timeout_s is None else timeout_s
    barrier_id = f"scalelib.barrier.{next(_barrier_count)}.{name}"
    try:
        compat.wait_at_barrier(barrier_id, wait_s)
    except Exception as err:  # JAX's runtime error, DEADLINE_EXCEEDED or a peer gone
        raise DistributedSetupError(f"barrier {name!r}: not every process arrived within {wait_s} s ({err}). A "
                                    f"slow process needs a longer {ENV_BARRIER_TIMEOUT}; one that never arrives "
                                    "is stuck elsewhere, or reached a different barrier") from err


# ------------------------------------------------------------------ python -m scalelib.distributed


def run_target(argv: list[str]) -> Callable[[], Any]:
    """``[SCRIPT, ARGS...]`` or ``['-m', MODULE, ARGS...]`` as a function that runs it as ``__main__``."""
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        raise SystemExit("usage: python -m scalelib.distributed (SCRIPT | -m MODULE) [ARGS...]")
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # sys.path[0] is already the working directory, as for `python -m`
        return lambda: runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as `python SCRIPT` sets it
    return lambda: runpy.run_path(argv[0], run_name="__main__")


def die_with_launcher(environ: dict[str, str] | None = None) -> None:
    """Under the launcher (Linux): have the kernel SIGKILL this process when the launcher dies.

    Done here, after exec, rather than in a ``preexec_fn`` (unsafe with threads); if the launcher
    died before this line ran, the process is already an orphan and exits.
    """
    env = os.environ if environ is None else environ
    if ENV_LAUNCHER_PID not in env or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != int(env[ENV_LAUNCHER_PID]):
        _exit_now(1)


def native_stdout_apart(environ: dict[str, str] | None = None) -> None:
    """Under the launcher: Python's ``sys.stdout`` keeps the launcher's stdout pipe, while file descriptor 1
    (what C++ code and child processes write to) moves to a second pipe the launcher passed.

    gloo (jax 0.10.2) writes its connection messages to descriptor 1 from C++ threads, piece by piece and
    without a lock shared with Python, so on one pipe a ``print`` could land inside one of them, mid-line.
    On two pipes every line Python prints arrives whole, and the launcher filters the chatter from the
    other pipe only.
    """
    env = os.environ if environ is None else environ
    if ENV_NATIVE_STDOUT_FD not in env:
        return
    native = int(env.pop(ENV_NATIVE_STDOUT_FD))  # a child of this process must not take it for its own
    python_fd = os.dup(1)
    os.dup2(native, 1)
    os.close(native)
    old = sys.stdout
    sys.stdout = io.TextIOWrapper(io.FileIO(python_fd, "w"), encoding=old.encoding, errors=old.errors,
                                  line_buffering=True, write_through=True)


def main(argv: list[str]) -> None:
    die_with_launcher()
    native_stdout_apart()
    run = run_target(argv)
    try:
        run()
    except SystemExit as stop:
        if stop.code in (None, 0):
            raise
        if not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
        _exit_now(stop.code if isinstance(stop.code, int) else 1)
    except BaseException as exc:  # any failure, KeyboardInterrupt included, ends this process now
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>"):
            tb = tb.tb_next  # start the traceback at the user's code, not at this runner
        traceback.print_exception(type(exc), exc, tb)
        _exit_now(1)


if __name__ == "__main__":
    main(sys.argv[1:])
