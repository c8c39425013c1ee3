"""Sandboxed kernels started before they are needed (a warm pool).

Starting a kernel (a sandbox, an interpreter, the grader's helper) takes about a second; the pool does it while the
workers grade, in the order the workers will ask (:meth:`KernelPool.expect`). A kernel from the pool has run nothing
but the grader's helper: it is handed to one student, used for that student only, and closed after. Isolation is
the same as starting it on demand; only the waiting is gone.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from autograder.kernel.kernel_errors import KernelStartFailed
from autograder.kernel.session import KernelSession, Limits


@dataclass(frozen=True)
class Flavour:
    """What kind of kernel: its library (one per exercise surface) and its device count."""

    key: str
    library: Path | None
    allowed: str
    devices: int = 8


class KernelPool:
    def __init__(self, limits: Limits, scratch: Path, logs: Path, flavours: dict[str, Flavour], ahead: int,
                 starters: int = 1) -> None:
        self.limits, self.scratch, self.logs, self.flavours = limits, scratch, logs, flavours
        self.ahead = max(0, ahead)
        self._wanted: deque[str] = deque()
        self._ready: dict[str, deque[KernelSession]] = {k: deque() for k in flavours}
        self._starting: dict[str, int] = dict.fromkeys(flavours, 0)
        self._errors: dict[str, deque[str]] = {k: deque() for k in flavours}  # starts that failed, not yet told
        self._cond = threading.Condition()
        self._closed = False
        self._ids = itertools.count()
        self._threads = [threading.Thread(target=self._starter, name=f"kernel-pool-{i}", daemon=True)
                         for i in range(starters if self.ahead else 0)]
        for t in self._threads:
            t.start()

    def expect(self, keys: list[str]) -> None:
        """Kernels of these flavours will be asked for, in this order."""
        with self._cond:
            self._wanted.extend(keys)
            self._cond.notify_all()

    def forget(self, key: str) -> None:
        """One kernel of flavour ``key`` that :meth:`expect` announced will not be asked for after all; if it is
        started already, the next student who needs that flavour gets it."""
        with self._cond, contextlib.suppress(ValueError):
            self._wanted.remove(key)

    def _start(self, key: str) -> KernelSession:
        """A started kernel; raises KernelStartFailed (whatever went wrong) and leaves nothing behind then."""
        f = self.flavours[key]
        n = next(self._ids)
        scratch, log = self.scratch / f"k{n:05d}", self.logs / f".pool-{n:05d}.log"
        try:
            return KernelSession(scratch, self.limits, log, library=f.library, allowed=f.allowed, devices=f.devices)
        except Exception as err:
            shutil.rmtree(scratch, ignore_errors=True)
            log.unlink(missing_ok=True)  # what it said is in the error
            if isinstance(err, KernelStartFailed):
                raise
            raise KernelStartFailed(f"kernel did not start: {type(err).__name__}: {err}") from err

    def _starter(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._wanted or self._idle() >= self.ahead):
                    self._cond.wait()
                if self._closed:
                    return
                key = self._wanted.popleft()
                self._starting[key] += 1
            session = None
            try:
                session = self._start(key)
            except KernelStartFailed as err:  # told to whoever takes this kernel; the starter goes on
                with self._cond:
                    self._errors[key].append(str(err))
            finally:
                with self._cond:
                    self._starting[key] -= 1
                    if session is not None:
                        if self._closed:
                            session.close()
                        else:
                            self._ready[key].append(session)
                    self._cond.notify_all()

    def _idle(self) -> int:
        return sum(len(q) for q in self._ready.values()) + sum(self._starting.values())

    def take(self, key: str) -> KernelSession:
        """A started kernel of flavour ``key`` (waiting for one the pool is starting, else starting one here).
        Raises KernelStartFailed if the kernel started for this call could not be."""
        with self._cond:
            while True:
                if self._ready[key]:
                    session = self._ready[key].popleft()
                    self._cond.notify_all()
                    return session
                if self._errors[key]:
                    raise KernelStartFailed(self._errors[key].popleft())
                if not self._starting[key]:
                    with contextlib.suppress(ValueError):
                        self._wanted.remove(key)  # started here instead: the pool must not start it too
                    break
                self._cond.wait()
        return self._start(key)

    def close(self) -> None:
        """Stop starting kernels and close every kernel nobody took."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=180)
        with self._cond:
            left = [s for q in self._ready.values() for s in q]
            for q in self._ready.values():
                q.clear()
        for session in left:
            session.close()
            shutil.rmtree(session.scratch, ignore_errors=True)
            Path(session.log_path).unlink(missing_ok=True)
