"""An output pipe that closes before the command is done (`etdeploy run ... | head -2`).

The reader has all it wanted; nothing went wrong with the run, so nothing is said,
and the status is not 1, which means "a check failed". It is 141, 128 + SIGPIPE's
number, what a shell reports for a program that a closed pipe ended (the default of
most command-line tools, which SIGPIPE kills). Python ignores SIGPIPE and raises
BrokenPipeError instead; etdeploy keeps that (SIGPIPE's default would also end it in
the middle of a file being written, or on a closed adb or SSH socket), catches it
where a command writes, and points the standard stream at /dev/null so that the
interpreter's last flush at exit has nowhere to fail (Python's own advice:
docs.python.org/3/library/signal.html, "Note on SIGPIPE", read 2026-12-05).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys

EXIT_OUTPUT_CLOSED = 128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 141


def is_closed_pipe(exc: BaseException) -> bool:
    """Whether exc is a write to a pipe (or socket) whose reader has gone."""
    return isinstance(exc, BrokenPipeError) or (
        isinstance(exc, OSError) and exc.errno == errno.EPIPE
    )


def _to_devnull(stream: object) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            os.dup2(devnull, stream.fileno())  # type: ignore[attr-defined]
    finally:
        os.close(devnull)


def flush_or_closed() -> bool:
    """Flush stdout and stderr; False when a reader has gone. A stream whose reader
    has gone then writes to /dev/null: what it still buffers is dropped there, and
    the interpreter's final flush cannot fail on it."""
    closed = False
    for stream in (sys.stdout, sys.stderr):
        if stream is None:
            continue
        try:
            stream.flush()
        except OSError as exc:
            if not is_closed_pipe(exc):
                raise
            _to_devnull(stream)
            closed = True
        except ValueError:  # a stream closed by its owner: nothing left to flush
            continue
    return not closed


def output_closed(stream: object = None) -> int:
    """After a BrokenPipeError writing to `stream` (stdout when not known): that
    stream and any other whose reader has gone silenced, and the status to exit with."""
    flush_or_closed()
    _to_devnull(stream if stream is not None else sys.stdout)
    return EXIT_OUTPUT_CLOSED
