"""scalelib.distributed inside one process: the launcher's variables, the checks, data in and out.

Across processes the same helpers run in tests/test_launch.py (a real 2 x 4 job, every fault) and
tests/test_parallel_selfcheck.py (every scheme).
"""

import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, devices, distributed

GOOD = {distributed.ENV_COORDINATOR: "localhost:1234", distributed.ENV_NUM_PROCESSES: "2",
        distributed.ENV_PROCESS_ID: "1", distributed.ENV_LOCAL_DEVICES: "4"}


def test_launch_env_is_read_and_checked():
    assert distributed.launch_env({}) is None
    assert distributed.launch_env(GOOD) == distributed.LaunchEnv("localhost:1234", 2, 1, 4)
    with pytest.raises(distributed.DistributedSetupError, match="SCALELIB_PROCESS_ID.*missing"):
        distributed.launch_env({k: v for k, v in GOOD.items() if k != distributed.ENV_PROCESS_ID})
    with pytest.raises(distributed.DistributedSetupError, match="must be integers"):
        distributed.launch_env({**GOOD, distributed.ENV_LOCAL_DEVICES: "four"})
    with pytest.raises(distributed.DistributedSetupError, match="process 2 of 2"):
        distributed.launch_env({**GOOD, distributed.ENV_PROCESS_ID: "2"})


def test_initialize_in_a_running_session_only_checks_devices(monkeypatch):
    info = distributed.initialize(8)  # this test session already runs 8 CPU devices alone
    assert (info.process_id, info.num_processes, info.source) == (0, 1, "single process")
    assert info.local_device_count == info.device_count >= 8
    n = info.device_count
    assert str(info) == f"process 0 of 1 (single process): {n} of {n} cpu devices are local"
    with pytest.raises(distributed.DistributedSetupError, match="has 8 CPU devices but 16 were asked for"):
        distributed.initialize(16)
    for name, value in GOOD.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(distributed.DistributedSetupError, match="asks for 2 local devices but the launcher gave"):
        distributed.initialize(2)
    with pytest.raises(distributed.DistributedSetupError, match="already started in this process"):
        distributed.initialize()
    with pytest.raises(devices.DeviceSetupError, match="already started"):
        devices.request_cpu_devices(4)


def test_a_fresh_process_alone_runs_on_its_local_devices():
    """No launcher and no cluster: jax.distributed finds nothing to join and the script runs alone,
    with the device count it asked for even if XLA_FLAGS (inherited) says otherwise."""
    code = "from scalelib import distributed; print(distributed.initialize(3))"
    env = {"PATH": "", "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                         check=False)
    assert out.stdout.strip() == "process 0 of 1 (single process): 3 of 3 cpu devices are local", out.stderr


def test_port_check():
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        assert not distributed.port_is_free(s.getsockname()[1])
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    assert distributed.port_is_free(port)


@pytest.fixture(scope="module")
def mesh():
    return compat.make_mesh((2, 4), ("x", "y"))


def test_from_host_and_back(mesh):
    x = np.arange(64.0).reshape(8, 8)  # [8, 8]
    shardings = {"a": NamedSharding(mesh, P("x", "y")), "b": NamedSharding(mesh, P())}
    placed = distributed.from_host({"a": x, "b": x[:2]}, shardings)
    assert placed["a"].sharding == shardings["a"] and placed["a"].addressable_shards[0].data.shape == (4, 2)
    back = distributed.to_host(placed)
    np.testing.assert_array_equal(back["a"], x)
    np.testing.assert_array_equal(back["b"], x[:2])
    one = distributed.from_host(x, shardings["a"])  # one sharding for every leaf
    np.testing.assert_array_equal(distributed.to_host(jax.jit(lambda a: 2 * a)(one)), 2 * x)


def test_process_rows_and_from_process_rows(mesh):
    sharding = NamedSharding(mesh, P(("x", "y")))
    assert distributed.process_rows(sharding, (16, 3)) == slice(0, 16)  # one process holds every row
    assert distributed.process_rows(NamedSharding(mesh, P()), (5, 3)) == slice(0, 5)
    rows = np.arange(48).reshape(16, 3)
    placed = distributed.from_process_rows(rows, sharding, (16, 3))
    np.testing.assert_array_equal(distributed.to_host(placed), rows)
    with pytest.raises(ValueError, match=r"holds rows 0:16 of a \(16, 3\) array, so its local data must have shape"):
        distributed.from_process_rows(rows[:8], sharding, (16, 3))


def test_runner_exits_with_the_script_status(tmp_path):
    """``python -m scalelib.distributed`` runs a script as __main__ with its arguments and directory on
    sys.path, and ends on a failure at once with the script's status (1 for an exception)."""
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    script = tmp_path / "job.py"
    script.write_text("import sys, helper\nprint(__name__, sys.argv[1:], helper.VALUE)\n"
                      "if sys.argv[1] == 'raise':\n    raise KeyError('boom')\nsys.exit(int(sys.argv[1]))\n")

    def run(arg):
        return subprocess.run([sys.executable, "-m", "scalelib.distributed", str(script), arg],
                              capture_output=True, text=True, timeout=60, check=False)

    ok, three, boom = run("0"), run("3"), run("raise")
    assert (ok.returncode, ok.stdout) == (0, "__main__ ['0'] 7\n")
    assert three.returncode == 3
    assert boom.returncode == 1 and "KeyError: 'boom'" in boom.stderr
    assert "scalelib/distributed.py" not in boom.stderr  # the traceback starts at the script


def test_every_wait_between_processes_is_a_setting_the_readme_names():
    """Each wait a user can meet (joining, a barrier, JAX's heartbeat) reads its variable, has the default the
    README gives it, and refuses a value that is not a whole number of seconds."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert distributed.TIMEOUT_DEFAULTS_S == {distributed.ENV_INIT_TIMEOUT: 120, distributed.ENV_BARRIER_TIMEOUT: 600,
                                              distributed.ENV_HEARTBEAT_TIMEOUT: 100}
    for name, default in distributed.TIMEOUT_DEFAULTS_S.items():
        assert f"`{name}` ({default}" in readme, name
        assert distributed.timeout_setting(name, {}) == default
        assert distributed.timeout_setting(name, {name: " 7 "}) == 7
        for bad in ("0", "-3", "1.5", "soon"):
            with pytest.raises(distributed.DistributedSetupError, match=f"{name}=.*whole number of seconds"):
                distributed.timeout_setting(name, {name: bad})
    assert "`--timeout` (600)" in readme  # the launcher's own, for the whole run
