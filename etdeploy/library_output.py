"""Torch's and ExecuTorch's own output, kept instead of printed (a build, the
profile of a run, the explorer).

torch.export and the lowering log warnings (a data-dependent guard prints the
graph it was tracing, about 30 lines), emit UserWarnings on every export, and
torch.export.load logs a whole traceback before raising. That text helps the
model's author, with --verbose; without it, etdeploy's one line and hint must be
the last thing on screen. The core never prints: what was captured travels with
the result (BuildResult.log) or with the error (EtdeployError.log), and the CLI
shows it with --verbose.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TextIO

from etdeploy.errors import EtdeployError

# Loggers whose handlers are swapped for the capture; their children propagate to them.
_LIBRARIES = ("torch", "executorch", "torchao")


@dataclass
class Captured:
    """What the libraries wrote while the block ran, in order."""

    _stream: io.StringIO = field(default_factory=io.StringIO)

    @property
    def text(self) -> str:
        return self._stream.getvalue()

    def write(self, text: str) -> None:
        self._stream.write(text if text.endswith("\n") else text + "\n")


class _Diverted(io.TextIOBase):
    """sys.stdout or sys.stderr while a build runs: what torch prints (the partial
    graph of a failed export goes to stderr with print) lands in the capture.
    `etdeploy_passthrough` is the stream it stands in for: etdeploy's own consoles write
    there, so progress keeps showing while the libraries are quiet."""

    def __init__(self, sink: Captured, passthrough: TextIO) -> None:
        super().__init__()
        self._sink = sink
        self.etdeploy_passthrough = passthrough

    def write(self, text: str) -> int:
        self._sink._stream.write(text)
        return len(text)

    def isatty(self) -> bool:
        return False


def passthrough_stream(stream: TextIO) -> TextIO:
    """The real stream behind a diverted one (itself when not diverted)."""
    return stream.etdeploy_passthrough if isinstance(stream, _Diverted) else stream


class _Handler(logging.Handler):
    def __init__(self, sink: Captured) -> None:
        super().__init__(logging.NOTSET)
        self._sink = sink
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._sink.write(self.format(record))
        except Exception:  # a record that cannot be formatted must not break the build
            self.handleError(record)


def _library_loggers() -> list[logging.Logger]:
    found = [logging.getLogger()]
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        # A PlaceHolder stands for a logger not made yet, a parent of made ones: none to hold.
        if not isinstance(logger, logging.Logger) or name.split(".")[0] not in _LIBRARIES:
            continue
        if logger.handlers or not logger.propagate:
            found.append(logger)
    return found


@contextlib.contextmanager
def captured_library_output() -> Iterator[Captured]:
    """Route the libraries' logging, warnings and prints into a buffer.

    An EtdeployError leaving the block carries the buffer in its log (after any
    log it had), so `--verbose` shows torch's own account of the failure.
    """
    sink = Captured()
    handler = _Handler(sink)
    swapped: list[tuple[logging.Logger, list[logging.Handler], bool]] = []
    for logger in _library_loggers():
        swapped.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers = [handler]
        if logger is not logging.getLogger():
            logger.propagate = False

    def show_warning(message: Warning | str, category: type[Warning], filename: str,
                     lineno: int, file: object = None, line: str | None = None) -> None:  # fmt: skip
        sink.write(f"{category.__name__}: {message} ({filename}:{lineno})")

    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(_Diverted(sink, passthrough_stream(sys.stdout))),
            contextlib.redirect_stderr(_Diverted(sink, passthrough_stream(sys.stderr))),
        ):
            warnings.simplefilter("default")
            warnings.showwarning = show_warning
            yield sink
    except EtdeployError as exc:
        if sink.text.strip():
            exc.log = "\n".join(part for part in (sink.text.rstrip(), exc.log) if part)
        raise
    finally:
        for logger, handlers, propagate in swapped:
            logger.handlers = handlers
            logger.propagate = propagate
