"""SIGTERM ends etdeploy the way Ctrl-C does.

CI systems stop a job with SIGTERM and kill what is left after a grace period:
Kubernetes' kubelet sends TERM, then KILL once the pod's grace period is over
(kubernetes.io, "Termination of Pods"); a cancelled GitHub Actions step gets
SIGINT, SIGTERM 7.5 s later, and its process tree is killed 2.5 s after that
(docs.github.com, workflow cancellation reference; both read 2026-12-04). A
shell's Ctrl-C sends SIGINT. Python turns SIGINT into KeyboardInterrupt, which
unwinds every `finally` and context manager: the runner on the device is killed
(devices/process.killed_if_interrupted), the job's directory removed
(devices/workdir.JobDirs), the device lock released, the result document written.
SIGTERM's default is to die on the spot, leaving all of that behind. Here it
raises Interrupted, a KeyboardInterrupt, so the same unwinding runs, and the
process exits as a shell reports a death by that signal: 128 + its number (130
for SIGINT, 143 for SIGTERM).

A second SIGTERM while unwinding is ignored: a clean-up cut half-way is what the
first one's handling exists to avoid. SIGKILL (the CI's last word) cannot be
caught; what it leaves the next run on that device sweeps (devices/workdir.py).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Interrupted(KeyboardInterrupt):
    """A stop from outside by `signum` (SIGTERM), raised where the main thread was."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_of(exc: KeyboardInterrupt) -> int:
    """The signal that stopped us: SIGINT for Ctrl-C, else the one Interrupted names."""
    return exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)


def exit_code_of(exc: KeyboardInterrupt) -> int:
    """128 + the signal, as a shell reports a process that signal ended."""
    return 128 + signal_of(exc)


def signal_name(exc: KeyboardInterrupt) -> str:
    return signal.Signals(signal_of(exc)).name


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM raises Interrupted in the main thread (once; a
    repeat is ignored while that unwinds). Elsewhere than the main thread, a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, _frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
