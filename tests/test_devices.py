import subprocess
import sys

import jax
import pytest

from scalelib import devices


def test_session_has_eight_devices():
    info = devices.setup(8)
    assert info.count >= 8 and len(jax.devices()) >= 8
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
