"""Interrupting a blocking call from the test itself, as Ctrl-C or a farm's job
timeout interrupts a run: SIGALRM raises KeyboardInterrupt in the main thread."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def interrupted_after(seconds: float) -> Iterator[None]:
    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
