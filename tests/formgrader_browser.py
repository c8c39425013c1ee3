"""nbgrader's formgrader served by a real `jupyter server` on 127.0.0.1 and a real Chromium driven by Playwright.

Debian's `chromium` (/usr/bin/chromium; `.ci/run` installs it) is used: Playwright's own browser download cannot
work where CI runs. Everything started here is stopped when the `with` block ends, failure or not.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("SCALELIB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def browser_or_skip() -> Any:
    """Playwright's sync API, or a skip that says what is missing and how to get it."""
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium at /usr/bin/chromium: `apt-get install -y chromium` (.ci/run does it)")
    try:
        from playwright import sync_api
    except ImportError:
        pytest.skip("Playwright for Python is not installed: pip install -e .[test] -c .ci/constraints.txt")
    return sync_api


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def jupyter_server(course_dir: Path, log: Path, timeout_s: float = 90.0) -> Iterator[tuple[str, str]]:
    """`jupyter server` in ``course_dir`` (whose nbgrader_config.py formgrader reads) on a free port with a random
    token; yields (base url, token) once it answers, and stops it (its whole process group) afterwards."""
    token, port = secrets.token_hex(16), _free_port()
    runtime = log.parent / "jupyter-runtime"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime), JUPYTER_CONFIG_DIR=str(log.parent / "jupyter-config"),
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    cmd = [sys.executable, "-m", "jupyter", "server", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={course_dir}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    base = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=course_dir, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"jupyter server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
                try:
                    with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as reply:
                        if reply.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter server did not answer in {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")
                time.sleep(0.3)
            yield base, token
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@contextlib.contextmanager
def chromium_page(sync_api: Any) -> Iterator[Any]:
    """A headless Chromium page (Debian's binary); the browser is closed afterwards, failure or not."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(30_000)
            yield page
        finally:
            browser.close()
