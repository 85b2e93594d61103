"""The live display Feedback draws in a terminal: a spinner line for the stage, a bar
per transfer. Only a command in a terminal, not --quiet, imports it."""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TransferSpeedColumn,
)
from rich.table import Column, Table
from rich.text import Text


class _StageOrTransfer(ProgressColumn):
    """A stage shows its elapsed time; a transfer its bar, bytes and speed. One
    column for both, so a stage never reads "0/? bytes"."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=True))
        self._bar = BarColumn(bar_width=24)
        self._bytes = DownloadColumn()
        self._speed = TransferSpeedColumn()

    def render(self, task: Task) -> RenderableType:
        if task.total is None:
            return Text(f"{task.elapsed or 0.0:.1f} s", style="progress.elapsed")
        grid = Table.grid(padding=(0, 1))
        grid.add_row(self._bar.render(task), self._bytes.render(task), self._speed.render(task))
        return grid


def live_progress(console: Console) -> Progress:
    """The display, not yet started: spinner, the stage or file, its time or bar."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        _StageOrTransfer(),
        console=console,
        transient=True,
    )
