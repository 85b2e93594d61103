"""Feedback on long steps: the stage and its elapsed time, and each transfer with
its real byte counts.

In a terminal it is one live display on stderr (a spinner line for the stage,
a bar per transfer), gone when the step ends. Without a terminal (a CI log)
it is plain lines, each stamped with the wall clock and the time since the
command started, so a log shows where a slow night spent its minutes:

    13:46:37 +0.0s building digits for xnnpack
    13:46:41 +4.1s digits for xnnpack: exporting with torch.export
    13:47:02 +25.2s sent executor_runner: 6.21 MB in 1.4 s (4.44 MB/s)

Piped, a step shorter than a second leaves no line: a quick command's log is
its result alone.

--quiet silences both.
"""

from __future__ import annotations

import threading
import time
from pathlib import PurePosixPath
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from etdeploy.cli._app import err_console, is_quiet
from etdeploy.units import format_bytes

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

# Piped: a stage or transfer shorter than this leaves no line in the log.
PIPED_AFTER_S = 1.0
# Piped: a stage still running is mentioned again this often.
HEARTBEAT_S = 30.0
# Piped: a transfer still going gets a line of its progress this often.
PIPED_TRANSFER_EVERY_S = 5.0


class Feedback:
    """What the command is doing, for the person or the log watching it.

    `status(text)` starts a stage; `transfer(path, done, total)` is the devices'
    progress callback. Use as a context manager around the long work.

    Piped, only what lasts is written: a stage gets its line once it has run for
    `after_s` (stamped with the moment it started), then a reminder every
    HEARTBEAT_S while it runs; a transfer gets lines once it has taken `after_s`,
    every PIPED_TRANSFER_EVERY_S, and when it ends. A quick command's log stays
    its result alone; a slow or stuck one says where it is.
    """

    def __init__(
        self,
        console: Console | None = None,
        *,
        quiet: bool | None = None,
        after_s: float = PIPED_AFTER_S,
    ) -> None:
        self._console = console or err_console
        self._quiet = is_quiet() if quiet is None else quiet
        self._live = self._console.is_terminal and not self._quiet
        self._after_s = after_s
        self._started = time.monotonic()
        self._progress: Progress | None = None
        self._stage: TaskID | None = None
        self._bars: dict[str, TaskID] = {}
        # Piped: the stage being watched, and the timer that writes its line.
        self._lock = threading.Lock()
        self._stage_text = ""
        self._stage_began = (0.0, 0.0)  # monotonic, wall clock
        self._timer: threading.Timer | None = None
        self._closed = False
        # Piped: per transfer, when it began and when its last line was written (None: none yet).
        self._transfers: dict[str, tuple[float, float | None]] = {}

    def __enter__(self) -> Feedback:
        if self._live:
            # Imported here: a piped or quiet command never draws it (rich.progress is
            # ~3 ms of a warm run's start-up).
            from etdeploy.cli._live import live_progress

            self._progress = live_progress(self._console)
            self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    # -- stages --------------------------------------------------------------------

    def status(self, text: str) -> None:
        if self._quiet:
            return
        if self._progress is not None:
            if self._stage is not None:
                self._progress.remove_task(self._stage)
            # A new task per stage: its elapsed time is the stage's own.
            self._stage = self._progress.add_task(escape(text), total=None)
            return
        with self._lock:
            if self._closed:
                return
            if self._timer is not None:
                self._timer.cancel()
            self._stage_text = text
            self._stage_began = (time.monotonic(), time.time())
            self._schedule(self._after_s, first=True)

    def _schedule(self, delay: float, *, first: bool) -> None:
        """(under the lock) The stage's next line, `delay` seconds from now."""
        began, text = self._stage_began, self._stage_text
        timer = threading.Timer(delay, self._stage_line, args=(began, text, first))
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _stage_line(self, began: tuple[float, float], text: str, first: bool) -> None:
        with self._lock:
            if self._closed or self._stage_began != began:
                return  # the stage ended meanwhile
            if first:
                self._line(text, at=began)
            else:
                self._line(f"still {text} ({time.monotonic() - began[0]:.0f} s)")
            self._schedule(HEARTBEAT_S, first=False)

    # -- transfers -----------------------------------------------------------------

    def transfer(self, path: str, done: int, total: int) -> None:
        if self._quiet:
            return
        name = PurePosixPath(path).name
        if self._progress is not None:
            self._bar(path, name, done, total)
        else:
            with self._lock:
                self._transfer_line(path, name, done, total)

    def _bar(self, path: str, name: str, done: int, total: int) -> None:
        assert self._progress is not None
        task = self._bars.get(path)
        if task is None:
            if done >= total:
                return  # unchanged and skipped, or done in one piece: no bar worth drawing
            task = self._bars[path] = self._progress.add_task(escape(name), total=total)
        self._progress.update(task, completed=done)
        if done >= total:
            self._progress.remove_task(task)
            del self._bars[path]

    def _transfer_line(self, path: str, name: str, done: int, total: int) -> None:
        """(under the lock) A line for a transfer that has taken a while, and its end."""
        now = time.monotonic()
        known = self._transfers.get(path)
        if known is None:
            if done < total:
                self._transfers[path] = (now, None)
            return  # a skip, or done in one piece: nothing worth a line
        first, last = known
        if done >= total:
            del self._transfers[path]
            seconds = now - first
            if last is not None or seconds >= self._after_s:
                rate = f" ({format_bytes(int(total / seconds))}/s)" if seconds > 0 else ""
                self._line(f"sent {name}: {format_bytes(total)} in {seconds:.1f} s{rate}")
            return
        due = first + self._after_s if last is None else last + PIPED_TRANSFER_EVERY_S
        if now >= due:
            self._transfers[path] = (first, now)
            self._line(f"sending {name}: {format_bytes(done)} of {format_bytes(total)}")

    # -- plain lines ---------------------------------------------------------------

    def _line(self, text: str, *, at: tuple[float, float] | None = None) -> None:
        mono, wall = at or (time.monotonic(), time.time())
        stamp = time.strftime("%H:%M:%S", time.localtime(wall))
        self._console.print(
            f"[dim]{stamp} +{mono - self._started:.1f}s[/] {escape(text)}",
            highlight=False,
            soft_wrap=True,
        )
