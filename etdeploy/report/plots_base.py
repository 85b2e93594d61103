"""What the report's plots share (plots.py, plots_memory.py): the job a plot
draws, the cap on its rows, its labels' length and the colour of a limit."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from etdeploy.results.jobs import JobKey
from etdeploy.results.result import RunResult

_PLOT_LABEL_CHARS = 48
# Rows per plot; past this a plot shows the worst rows (a PNG over 2**16 pixels
# tall cannot be drawn, and nobody reads 500 bars).
_MAX_PLOT_ROWS = 80
# A limit drawn on a plot (a tolerance, a floor).
LIMIT_COLOUR = "#b71c1c"

T = TypeVar("T")


class Job(NamedTuple):
    """One result of the report, with its place in the page (#job-<position>) and key."""

    position: int
    result: RunResult
    key: JobKey


if TYPE_CHECKING:
    from typing import TypeAlias

    from matplotlib.figure import Figure

    # A plot: the figure and a note (what a capped plot left out), or None
    # when no job has anything to show.
    Drawn: TypeAlias = tuple[Figure, str | None] | None


def _cap(rows: list[T], badness: Callable[[T], float], what: str) -> tuple[list[T], str | None]:
    """At most _MAX_PLOT_ROWS of `rows`: the worst by `badness` (higher is worse),
    in their original order, and a note saying what was left out."""
    if len(rows) <= _MAX_PLOT_ROWS:
        return rows, None
    ranked = sorted(range(len(rows)), key=lambda i: badness(rows[i]), reverse=True)
    keep = sorted(ranked[:_MAX_PLOT_ROWS])
    return [rows[i] for i in keep], f"showing the {_MAX_PLOT_ROWS} {what} of {len(rows)}"


def _short(text: str) -> str:
    return text if len(text) <= _PLOT_LABEL_CHARS else text[: _PLOT_LABEL_CHARS - 1] + "…"


def _height(rows: int) -> float:
    return 1.2 + 0.32 * rows
