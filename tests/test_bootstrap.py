"""The set-up cell's installer (scalelib/bootstrap.py), run with a fake pip: no network, no install.

Its three cases: a wheel next to the notebook, an install source stamped by the release, neither; then the
requirements step keeps a JAX the runtime already has, whatever its version, and installs only what is missing.
"""

from __future__ import annotations

import subprocess

import pytest

from scalelib import bootstrap

REQUIRES = ["jax<0.11,>=0.7.2", "numpy>=1.26", "matplotlib>=3.8", 'jupyterlab>=4; extra == "course"',
            "tomli>=2; python_version < \"3.11\" and extra == \"instructor\""]


class FakePip:
    def __init__(self, returncode=0, stderr=""):
        self.calls, self.returncode, self.stderr = [], returncode, stderr

    def __call__(self, cmd, **kwargs):
        assert kwargs.get("capture_output") and cmd[1:4] == ["-m", "pip", "install"]
        self.calls.append(cmd[4:])
        return subprocess.CompletedProcess(cmd, self.returncode, "", self.stderr)


def _said():
    lines = []
    return lines, lines.append


def test_a_wheel_next_to_the_notebook_wins_over_the_source(tmp_path):
    for name in ("scalelib-0.1.0-py3-none-any.whl", "notes.txt"):
        (tmp_path / name).write_text("")
    pip, (lines, say) = FakePip(), _said()
    bootstrap.install_scalelib("scalelib @ git+https://example.org/x@v1", str(tmp_path), run=pip, say=say)
    wheel = str(tmp_path / "scalelib-0.1.0-py3-none-any.whl")
    assert pip.calls == [["-q", "--no-deps", wheel]]  # then only what is missing: nothing, in this environment
    assert lines[0] == f"installing scalelib from {wheel} ..."
    assert lines[-1].startswith("scalelib is installed; jax ") and "tested with jax>=0.7.2,<0.11" in lines[-1]
    print("\n".join(lines))


def test_the_stamped_source_without_a_wheel(tmp_path):
    pip, (lines, say) = FakePip(), _said()
    source = "scalelib @ git+https://github.com/ann/scale-course@v3"
    bootstrap.install_scalelib(source, str(tmp_path), run=pip, say=say)
    assert pip.calls == [["-q", "--no-deps", source]]
    assert lines[0] == f"installing scalelib from {source} ..." and len(lines) == 2
    print("\n".join(lines))


def test_neither_says_what_to_do_in_three_lines_and_runs_no_pip(tmp_path):
    pip, (lines, say) = FakePip(), _said()
    with pytest.raises(Exception) as err:
        bootstrap.install_scalelib("", str(tmp_path), run=pip, say=say)
    shown = err.value._render_traceback_()
    assert pip.calls == [] and lines == []
    assert "scalelib is not installed" in shown[0] and len(shown) == 4
    assert "course's link" in " ".join(shown) and "upload scalelib's wheel" in " ".join(shown)
    print("\n".join(shown))


def test_a_failing_pip_is_reported_with_its_last_words(tmp_path):
    pip, (lines, say) = FakePip(1, "Collecting x\nERROR: Could not find a version\nERROR: No matching distribution"), _said()
    with pytest.raises(Exception) as err:
        bootstrap.install_scalelib("scalelib @ git+https://example.org/gone@v9", str(tmp_path), run=pip, say=say)
    shown = err.value._render_traceback_()
    assert shown[1] == "Installing it from scalelib @ git+https://example.org/gone@v9 failed. pip's last words:"
    assert "    ERROR: No matching distribution" in shown and len(shown) <= 8


def test_a_jax_outside_the_tested_range_is_kept_and_named():
    pip, (lines, say) = FakePip(), _said()
    versions = {"jax": "0.12.0", "numpy": "2.0.2", "matplotlib": "3.10.0"}
    assert bootstrap.install_requirements(pip, say, REQUIRES, versions.get) == []
    assert pip.calls == []  # nothing replaced: pip would have downgraded jax
    assert lines == ["scalelib is installed; this runtime's jax 0.12.0 is kept, but the course was tested with "
                     "jax>=0.7.2,<0.11"]


def test_only_missing_requirements_are_installed_each_in_its_range():
    pip, (lines, say) = FakePip(), _said()
    versions = {"jax": "0.7.2"}
    assert bootstrap.install_requirements(pip, say, REQUIRES, versions.get) == ["numpy>=1.26", "matplotlib>=3.8"]
    assert pip.calls == [["-q", "numpy>=1.26", "matplotlib>=3.8"]]
    assert lines[-1] == "scalelib is installed; jax 0.7.2 (the course was tested with jax>=0.7.2,<0.11)"


def test_version_ranges_compare_release_numbers():
    assert bootstrap.within("0.7.2", ">=0.7.2,<0.11") and bootstrap.within("0.10.2", ">=0.7.2,<0.11")
    assert not bootstrap.within("0.11.0", ">=0.7.2,<0.11") and not bootstrap.within("0.7.1", ">=0.7.2,<0.11")
    assert bootstrap.within("0.9.0.dev20260101+cuda", ">=0.7.2,<0.11")
    assert bootstrap.declared_requirements(REQUIRES) == {"jax": ">=0.7.2,<0.11", "numpy": ">=1.26",
                                                         "matplotlib": ">=3.8"}
    assert bootstrap.declared_requirements(["jax (<0.11,>=0.7.2)"]) == {"jax": ">=0.7.2,<0.11"}
