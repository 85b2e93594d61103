"""What every device does while a command runs: keep its output within bounds,
watch its deadline and idle timeout, and make sure it dies with its caller.

The transports differ in how they start and kill a command (a local process
group, a pid file on a phone, a pid header over SSH); the rules about when to
stop it and what to keep of its output are these, once.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import select
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, AnyStr, Generic

from etdeploy.errors import UsageError

# Head and tail of each stream: a runner stuck printing a line per iteration must
# not fill this machine's memory before its deadline.
OUTPUT_LIMIT = 16 << 20
# Exit status a wrapper uses when it cannot enter the requested directory.
CWD_FAILED = 125
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class BoundedOutput:
    """A command's output (text or bytes) kept within `limit` characters: the
    head and the tail, with a marker for what was dropped between. A runner
    stuck printing a line per iteration must not fill this machine's memory
    before its deadline; the tail keeps what a shell wrapper prints last."""

    def __init__(self, limit: int = OUTPUT_LIMIT) -> None:
        self._half = limit // 2
        # Chunks are all str or all bytes; the first non-empty one decides.
        self._head: list[Any] = []
        self._head_size = 0
        self._tail: collections.deque[Any] = collections.deque()
        self._tail_size = 0
        self._dropped = 0
        self._empty: str | bytes = ""

    def append(self, chunk: str | bytes) -> None:
        if not chunk:
            return
        self._empty = chunk[:0]
        if self._head_size < self._half:
            self._head.append(chunk)
            self._head_size += len(chunk)
            return
        self._tail.append(chunk)
        self._tail_size += len(chunk)
        while self._tail_size > self._half and len(self._tail) > 1:
            dropped = self._tail.popleft()
            self._tail_size -= len(dropped)
            self._dropped += len(dropped)

    def _joined(self) -> str | bytes:
        marker = (
            f"[... {self._dropped} characters of output dropped ...]\n" if self._dropped else ""
        )
        if isinstance(self._empty, bytes):
            return b"".join([*self._head, marker.encode(), *self._tail])
        return "".join([*self._head, marker, *self._tail])

    def text(self) -> str:
        joined = self._joined()
        return joined.decode(errors="replace") if isinstance(joined, bytes) else joined

    def data(self) -> bytes:
        joined = self._joined()
        return joined if isinstance(joined, bytes) else joined.encode()


class RunClock:
    """When a command must be stopped: at its deadline, or after a silence longer
    than its idle timeout (None: silence is fine)."""

    def __init__(self, deadline_s: float, idle_timeout_s: float | None = None) -> None:
        self.started = time.monotonic()
        self.deadline = self.started + deadline_s
        self.idle_timeout_s = idle_timeout_s
        self.last_output = self.started
        #: What ran out first, once one has: "deadline" or "idle" (the silence).
        self.ran_out: str | None = None

    def heard(self) -> None:
        """The command said something: it is alive."""
        self.last_output = time.monotonic()

    def remaining(self) -> float:
        """Seconds until the deadline or the idle timeout, whichever comes first."""
        now = time.monotonic()
        left = self.deadline - now
        if self.idle_timeout_s is not None:
            left = min(left, self.idle_timeout_s - (now - self.last_output))
        return max(0.0, left)

    def expired(self) -> bool:
        if self.ran_out is not None:
            return True
        now = time.monotonic()
        if now >= self.deadline:
            self.ran_out = "deadline"
        elif self.idle_timeout_s is not None and now - self.last_output >= self.idle_timeout_s:
            self.ran_out = "idle"
        return self.ran_out is not None

    @property
    def idle(self) -> bool:
        """Whether the command was stopped for its silence, not at its deadline."""
        return self.ran_out == "idle"

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started


def wait_until_ended(ended: Callable[[float], bool], clock: RunClock, *, poll_s: float) -> bool:
    """Wait until ended(timeout) says the command is over, or the clock runs out.

    ended() waits at most its argument and returns whether the command has ended,
    so a command that exits returns at once, with no poll interval added to it.
    Returns True when the clock ran out first (the caller kills the command).
    """
    timeout = 0.0
    while not ended(timeout):
        if clock.expired():
            return True
        timeout = max(0.01, min(poll_s, clock.remaining()))
    return False


class ExitWaiter:
    """ended(timeout) for wait_until_ended: whether `process` has exited, waiting at
    most `timeout` seconds. A context manager: its descriptor is closed on leaving.

    Popen.wait(timeout) polls, sleeping up to 50 ms between looks (CPython 3.11
    Lib/subprocess.py, Popen._wait, read 2026-12-04), so a runner that exits
    after 40 ms was seen about 20 ms late, a tenth of a warm run. Linux (5.3+)
    hands out a descriptor that becomes readable the moment the process exits
    (os.pidfd_open, pidfd_open(2)); it is used where there is one, and
    Popen.wait elsewhere (macOS).
    """

    def __init__(self, process: subprocess.Popen[Any]) -> None:
        self._process = process
        self._pidfd: int | None = None
        opener = getattr(os, "pidfd_open", None)
        if opener is not None:
            with contextlib.suppress(OSError):
                self._pidfd = opener(process.pid)

    def __call__(self, timeout: float) -> bool:
        if self._pidfd is not None and self._process.returncode is None:
            readable, _, _ = select.select([self._pidfd], [], [], timeout)
            if not readable:
                return False
            timeout = 0.0  # it has exited: the wait below reaps it at once
        try:
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def __enter__(self) -> ExitWaiter:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class OutputPump(threading.Thread, Generic[AnyStr]):
    """Drains one stream of a command on its own thread, so neither stream can
    fill and block the command; each chunk tells the clock the command is alive.

    read() returns the next chunk, empty at the end. An exception from it ends the
    pump and is kept in `error` for the caller to judge.
    """

    def __init__(
        self,
        read: Callable[[], AnyStr],
        write: Callable[[AnyStr], None],
        clock: RunClock,
        *,
        name: str,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._read: Callable[[], AnyStr] = read
        self._write: Callable[[AnyStr], None] = write
        self._clock = clock
        self._on_end = on_end
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while chunk := self._read():
                self._clock.heard()
                self._write(chunk)
        except BaseException as exc:  # handed to the caller through .error
            self.error = exc
        finally:
            if self._on_end is not None:
                self._on_end()


@contextlib.contextmanager
def killed_if_interrupted(kill: Callable[[], None]) -> Iterator[None]:
    """Our caller interrupted (Ctrl-C, a farm's job timeout): the command must not
    outlive it. The kill is best effort; the interruption goes on up."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            kill()
        raise


def env_exports(env: Mapping[str, str]) -> str:
    """`export NAME=value; ` for each variable, for a POSIX shell; a name the shell
    cannot take is a usage error."""
    check_env_names(env)
    return "".join(f"export {key}={shlex.quote(value)}; " for key, value in env.items())


def check_env_names(env: Mapping[str, str]) -> None:
    for key in env:
        if not _ENV_NAME.match(key):
            raise UsageError(
                f"not an environment variable name: {key!r}", "use letters, digits and _"
            )
