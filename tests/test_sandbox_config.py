"""autograder.sandbox.config: the one typed configuration every sandbox is launched with (issue 50)."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import course
from autograder.kernel.environment import kernel_sandbox
from autograder.kernel.session import Limits
from autograder.sandbox.config import SandboxConfig, memory_breach
from autograder.sandbox.sandbox_errors import SandboxConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_a_config_travels_as_json_and_comes_back_equal(tmp_path):
    cfg = SandboxConfig(scratch=str(tmp_path), memory_mb=300, disk_mb=16, cpu_s=90, uid=1_900_000_001,
                        gid=1_900_000_001, read_only=("/usr", "/etc"), library=str(tmp_path / "lib"),
                        library_target="/x/scalelib", hide=("/y/scalelib",))
    assert SandboxConfig.from_json(cfg.to_json()) == cfg
    assert set(json.loads(cfg.to_json())) == {f.name for f in dataclasses.fields(SandboxConfig)}


@pytest.mark.parametrize("raw, words", [
    ({"scratch": "/s", "memory": 300}, "unknown sandbox setting 'memory'"),  # a typo never means "no limit"
    ({"scratch": "/s", "memory_mb": "300"}, "memory_mb is '300'"),
    ({"scratch": "/s", "memory_mb": True}, "memory_mb is True"),  # a bool is not a size
    ({"scratch": "/s", "cpu_s": 1.5}, "cpu_s is 1.5"),
    ({"scratch": "/s", "disk_mb": -1}, "disk_mb is -1: use 0 for no limit"),
    ({"scratch": "/s", "hide": [1]}, "hide is (1,)"),
    ({"scratch": "/s", "library": "/lib"}, "library needs library_target"),
    ({"memory_mb": 1}, "no scratch folder"),
    ([1, 2], "must be a JSON object"),
])
def test_a_wrong_setting_is_refused_with_its_name(raw, words):
    with pytest.raises(SandboxConfigError, match=None) as err:
        SandboxConfig.from_json(json.dumps(raw))
    assert words in str(err.value), err.value


def test_the_launcher_refuses_a_wrong_setting_before_it_starts_anything(tmp_path):
    done = subprocess.run([sys.executable, "-m", "autograder.sandbox", json.dumps({"scratch": str(tmp_path),
                                                                                    "memory": 1}),
                           "--", sys.executable, "-c", "open('ran', 'w')"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode != 0 and "unknown sandbox setting 'memory'" in done.stderr, done.stderr
    assert not (tmp_path / "ran").exists()


def test_a_kernels_sandbox_is_built_in_one_place_from_its_limits(tmp_path):
    limits = Limits(memory_mb=512, disk_mb=32, notebook_timeout_s=10)
    cfg = kernel_sandbox(tmp_path, isolate=True, memory_mb=limits.memory_mb, disk_mb=limits.disk_mb,
                         cpu_s=limits.cpu_limit_s())
    assert (cfg.memory_mb, cfg.disk_mb, cfg.cpu_s, cfg.scratch) == (512, 32, limits.cpu_limit_s(), str(tmp_path))
    assert (cfg.uid is not None) == (__import__("os").geteuid() == 0)  # as root: a host uid of its own
    assert SandboxConfig.from_json(cfg.to_json()) == cfg


def test_one_memory_default_and_one_wording():
    unset = course.settings_from_text("[tool.scalelib-course]\ninstall-source = \"\"\n")  # no memory-mb given
    assert Limits().memory_mb == unset.memory_mb == course.MEMORY_MB
    assert memory_breach(300) == "over the memory limit of 300 MB (all its processes together)"
    written = [p for p in (ROOT / "autograder").rglob("*.py") if "over the memory limit of" in p.read_text()]
    assert written == [ROOT / "autograder" / "sandbox" / "config.py"], written  # said once, used everywhere
