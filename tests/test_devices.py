import subprocess
import sys

import jax
import pytest

from scalelib import compat, devices


def test_session_has_eight_devices():
    info = devices.setup(8)  # on CPU: 8 simulated devices; beside one GPU (the GPU check script): 8 CPU devices too
    assert info.count >= 8 or info.mesh_cpu_devices >= 8
    assert len(devices.mesh_devices(8)) == 8 and len({d.platform for d in devices.mesh_devices(8)}) == 1
    assert "8" in str(info) or info.count > 8


def test_bad_count_rejected():
    with pytest.raises(ValueError, match="positive int"):
        devices.setup(0)


def test_too_late_gives_clear_error():
    # A fresh interpreter that starts JAX first, then asks for more devices than it has.
    code = (
        "import jax; jax.devices()\n"
        "from scalelib import devices\n"
        "try:\n    devices.setup(64)\nexcept devices.DeviceSetupError as e:\n    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PATH": "", "JAX_PLATFORMS": "cpu"})
    assert "ERR JAX is already running with" in out.stdout, out.stderr
    assert "Restart the kernel" in out.stdout


def test_fresh_process_gets_requested_count():
    code = "from scalelib import devices; print(devices.setup(4).count)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PATH": "", "JAX_PLATFORMS": "cpu"})
    assert out.stdout.strip() == "4", out.stderr


def test_mesh_devices_are_the_default_devices_or_the_cpus_beside_too_few():
    devices.setup(8)
    default = jax.devices()  # on a machine with fewer than 8 accelerators the suite's meshes use the CPU devices
    expected = default if len(default) >= 8 else jax.devices("cpu")
    assert devices.mesh_devices(4) == expected[:4]
    assert list(compat.make_mesh((2, 4), ("x", "y")).devices.flat) == expected[:8]
    with pytest.raises(devices.DeviceSetupError, match=r"a mesh of 64 devices needs 64 .*devices.setup\(64\)"):
        devices.mesh_devices(64)
    with pytest.raises(ValueError, match="positive int"):
        devices.mesh_devices(0)


# A Colab-like runtime with one GPU, faked on the CPU: jax.devices() (the default backend, which is what setup and
# mesh_devices read) answers one stand-in GPU, jax.devices("cpu") the real simulated CPU devices. The stand-in is
# never computed on; everything the script runs goes to the CPU devices, as the chapters' meshes would.
ONE_GPU = """
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from scalelib import compat, devices

class FakeGpu:
    platform, device_kind, id, process_index = "gpu", "Tesla T4", 0, 0

real_devices = jax.devices
jax.devices = lambda backend=None: [FakeGpu()] if backend is None else real_devices(backend)
info = devices.setup(8)
print("REPORT", str(info).replace("\\n", " | "))
print("INFO", info.platform, info.count, info.simulated, info.kind, info.mesh_cpu_devices)
mesh = compat.make_mesh((2, 4), ("x", "y"))
flat = list(mesh.devices.flat)
print("MESH", sorted({d.platform for d in flat}), mesh.size, flat == real_devices("cpu"))
x = jax.device_put(np.arange(32.0).reshape(8, 4), NamedSharding(mesh, P(("x", "y"))))
total = jax.jit(compat.shard_map(lambda b: jax.lax.psum(b.sum(), ("x", "y")), mesh=mesh, in_specs=P(("x", "y")),
                                 out_specs=P()))(x)
print("PSUM", float(total), float(np.arange(32.0).sum()))
print("ONE", type(devices.mesh_devices(1)[0]).__name__)
try:
    devices.mesh_devices(16)
except devices.DeviceSetupError as err:
    print("ERR16", err)
try:
    devices.setup(16)
except devices.DeviceSetupError as err:
    print("SETUP16", err)
"""


def test_one_gpu_runtime_lays_meshes_on_cpu_devices_beside_it():
    out = subprocess.run([sys.executable, "-c", ONE_GPU], capture_output=True, text=True, timeout=120,
                         env={"PATH": "", "JAX_PLATFORMS": "cpu"})
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.stdout.splitlines() if " " in line}
    assert out.returncode == 0, out.stderr[-2000:]
    print(lines["REPORT"])
    assert lines["INFO"] == "gpu 1 False Tesla T4 8"
    assert lines["REPORT"].startswith("1 GPU device (Tesla T4): single-device work runs on it")
    assert "use 8 simulated CPU devices beside it" in lines["REPORT"] and "not the GPU's" in lines["REPORT"]
    assert lines["MESH"] == "['cpu'] 8 True"
    assert lines["PSUM"] == "496.0 496.0"
    assert lines["ONE"] == "FakeGpu"  # a one-device mesh stays on the accelerator
    assert "a mesh of 16 devices needs 16 devices, but this process has 1 GPU device(s) and 8 CPU" in lines["ERR16"]
    assert "fewer than the 16 the sharding examples lay out" in lines["SETUP16"]
    assert "Restart the kernel" in lines["SETUP16"]


def test_report_names_accelerators_and_where_meshes_go():
    assert str(devices.DeviceInfo("cpu", 8, True, "cpu")) == "8 simulated CPU devices"
    assert str(devices.DeviceInfo("tpu", 8, False, "TPU v5 lite")) == "8 TPU devices (TPU v5 lite)"
    two = str(devices.DeviceInfo("gpu", 2, False, "NVIDIA H100 80GB HBM3", mesh_cpu_devices=8))
    assert two.startswith("2 GPU devices (NVIDIA H100 80GB HBM3): single-device work runs on it")
    assert "Meshes of more than 2 devices use 8 simulated CPU devices" in two
