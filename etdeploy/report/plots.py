"""The plots of the HTML report (etdeploy.report.html): latency per iteration
(with the baseline's median in a baseline report), error per output (with each
job's tolerance and SQNR floor), delegation coverage, size against store
limits and memory per phase (plots_memory.py), each a PNG in a data: URI.

matplotlib is imported inside plots_html only, and drawn with its Agg canvas
(no pyplot, so a caller's own backend is left alone): the CLI imports the
report package on every start and must not pay for matplotlib there.
"""

from __future__ import annotations

import base64
import html
import io
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from etdeploy.report.plots_base import LIMIT_COLOUR, Job, _cap, _height, _short
from etdeploy.report.plots_memory import plot_memory
from etdeploy.report.text import metrics_by_output
from etdeploy.results.jobs import JobKey, short_model
from etdeploy.results.result import Delegation, Latency, RunResult, SizeSummary, Verdict

# The colours of the report's matrix (its CSS), reused here so a reader maps one
# to the other.
COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "infra": "#e65100", "input": "#6a1b9a"}
# The baseline's median drawn on a plot (a limit: plots_base.LIMIT_COLOUR).
BASELINE_COLOUR = "#1565c0"

if TYPE_CHECKING:
    from typing import TypeAlias

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from etdeploy.report.plots_base import Drawn

    Drawing: TypeAlias = Callable[[Sequence[Job], type[Figure]], Drawn]


def plots_html(jobs: Sequence[Job], *, baseline: Mapping[JobKey, Latency] | None = None) -> str:
    """The plots, each a figure under its title ("no data" where nothing
    applies), side by side where the page is wide enough; the error plot, the
    widest, on its own row. `baseline`: the baseline's latency of each job."""
    out = ['<div class="plots">']
    for title, draw, wide in (
        ("Latency per iteration", partial(plot_latency, baseline=baseline or {}), False),
        ("Delegation coverage", _plot_delegation, False),
        ("Error against the reference, per output", plot_errors, True),
        ("Size against store limits", _plot_size, True),
        ("Memory per phase, by part of the account", plot_memory, True),
    ):
        drawn = _render(draw, jobs)
        css = ' class="wide"' if wide else ""
        out.append(f"<figure{css}><figcaption>{_e(title)}</figcaption>")
        if drawn is None:
            out.append('<p class="muted">no data</p></figure>')
            continue
        uri, note = drawn
        if note:
            out.append(f'<p class="muted">{_e(note)}</p>')
        out.append(f'<img class="plot" alt="{_e(title)}" src="{uri}"></figure>')
    out.append("</div>")
    return "\n".join(out)


def _render(draw: Drawing, jobs: Sequence[Job]) -> tuple[str, str | None] | None:
    """Draw with `draw(jobs, Figure)` -> (figure, note) or None when it has
    nothing to show; the figure as a PNG data: URI, and the note."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with warnings.catch_warnings():
        # A model name with a glyph DejaVu lacks draws as a box; not worth a warning.
        warnings.filterwarnings("ignore", message="Glyph .* missing")
        drawn = draw(jobs, Figure)
        if drawn is None:
            return None
        fig, note = drawn
        FigureCanvasAgg(fig)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii"), note


def plot_latency(
    jobs: Sequence[Job], figure: type[Figure], *, baseline: Mapping[JobKey, Latency]
) -> Drawn:
    """Every iteration of each job as a strip, its median as a bar, and where a
    baseline report has one, the baseline's median as a diamond."""
    timed: list[tuple[Latency, Job]] = [
        (latency, job)
        for job in jobs
        if (latency := job.result.latency_ms) is not None and latency.iterations
    ]
    if not timed:
        return None
    timed, note = _cap(timed, lambda row: row[0].median or 0.0, "slowest jobs")
    # Half the page wide (beside the delegation plot), drawn at the size it is shown.
    fig = figure(figsize=(6.2, _height(len(timed))))
    ax = fig.add_subplot()
    everything: list[float] = []
    for y, (latency, job) in enumerate(timed):
        times = list(latency.iterations)
        # A strip of every iteration shows outliers and bimodality a box hides;
        # thinned evenly past 400 points so a long run stays readable.
        step = max(1, len(times) // 400)
        shown = times[::step]
        jitter = [((i * 0.618) % 1 - 0.5) * 0.5 for i in range(len(shown))]
        ax.scatter(
            shown,
            [y + j for j in jitter],
            s=14,
            alpha=0.6,
            color=status_colour(job.result),
            linewidths=0,
        )
        if latency.median is not None:
            ax.plot([latency.median] * 2, [y - 0.35, y + 0.35], color="black", linewidth=2,
                    label="median" if y == 0 else None)  # fmt: skip
        everything += times
        base = baseline.get(job.key)
        if base is not None and base.median is not None:
            # Where the baseline's median was: a slowdown reads as the distance to it.
            ax.plot([base.median], [y], marker="D", markersize=7, markerfacecolor="none",
                    markeredgecolor=BASELINE_COLOUR, markeredgewidth=1.6, linestyle="none",
                    label="baseline median" if not any(
                        h.get_label() == "baseline median" for h in ax.lines) else None)  # fmt: skip
            everything.append(base.median)
    positive = [t for t in everything if t > 0]
    if positive and max(positive) / min(positive) > 30:
        ax.set_xscale("log")  # jobs from microseconds to seconds on one axis
    ax.set_yticks(range(len(timed)), [_short(job.key.short_label) for _, job in timed])
    ax.set_ylim(len(timed) - 0.5, -0.5)
    ax.set_xlabel("ms per iteration")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    return fig, note


def error_limits(verdict: Verdict | None) -> tuple[float | None, float | None]:
    """(tolerance on max abs, floor on SQNR) that decided this verdict, where its
    end-to-end metrics are judged against one: the allclose atol of a float build;
    the accuracy budget's minimum SQNR of a quantized one (the device is then held
    to quantization steps of the quantized program, which this plot does not show)."""
    if verdict is None or verdict.thresholds is None:
        return None, None
    rules = {stage.rule for stage in verdict.budget}
    atol = verdict.thresholds.atol if "allclose" in rules else None
    floor = verdict.thresholds.min_sqnr_db if "accuracy" in rules else None
    return atol, floor


def plot_errors(jobs: Sequence[Job], figure: type[Figure]) -> Drawn:
    """Each output's worst max abs error and worst SQNR, with a dashed mark at the
    limit that judged its job (error_limits)."""
    # label, worst max abs, worst SQNR, colour, tolerance, SQNR floor
    rows: list[tuple[str, float, float, str, float | None, float | None]] = []
    for job in jobs:
        verdict = job.result.verdict
        # Coloured by the numerics verdict: a job failed on size had fine outputs.
        good = verdict is not None and verdict.passed
        colour = COLOURS["passed"] if good else COLOURS["failed"]
        atol, floor = error_limits(verdict)
        for (_, name), metrics in metrics_by_output(verdict).items():
            worst_abs = max(m.max_abs for m in metrics)
            worst_sqnr = min(m.sqnr_db for m in metrics)
            rows.append(
                (
                    _short(f"{job.key.short_label}: {name}"),
                    worst_abs,
                    worst_sqnr,
                    colour,
                    atol,
                    floor,
                )
            )
    if not rows:
        return None
    rows, note = _cap(rows, lambda row: -row[2], "outputs with the lowest SQNR")
    fig = figure(figsize=(11, _height(len(rows))))
    left, right = fig.subplots(1, 2, sharey=True)
    ys = list(range(len(rows)))
    finite_abs = [a for _, a, *_ in rows if 0 < a < math.inf]
    finite_abs += [t for *_, t, _ in rows if t is not None and t > 0]
    floor = min(finite_abs) / 10 if finite_abs else 1e-9
    top = max(finite_abs) if finite_abs else 1.0
    for y, (_, err, _, colour, _, _) in zip(ys, rows, strict=True):
        if err == 0:
            left.text(floor, y, " exact (0)", va="center", fontsize=8)
        elif math.isinf(err):
            left.barh(y, top * 10, color="#b71c1c", left=floor)
            left.text(floor, y, " non-finite", va="center", fontsize=8, color="white")
        else:
            left.barh(y, err - floor, left=floor, color=colour)
    _limit_marks(left, [row[4] for row in rows], "tolerance (atol)")
    left.set_xscale("log")
    left.set_xlabel("worst max abs error (log)")
    finite_sqnr = [s for _, _, s, *_ in rows if math.isfinite(s)]
    finite_sqnr += [f for *_, f in rows if f is not None]
    cap = max([*finite_sqnr, 0.0]) + 10
    for y, (_, _, sqnr, colour, _, _) in zip(ys, rows, strict=True):
        if math.isinf(sqnr) and sqnr > 0:
            right.text(0, y, " exact (∞ dB)", va="center", fontsize=8)
        elif not math.isfinite(sqnr):
            right.text(0, y, " non-finite output", va="center", fontsize=8, color="#b71c1c")
        else:
            right.barh(y, sqnr, color=colour)
    _limit_marks(right, [row[5] for row in rows], "SQNR floor (int8 accuracy budget)")
    right.set_xlim(min([*finite_sqnr, 0.0]), cap)
    right.set_xlabel("worst SQNR (dB, higher is better)")
    left.set_yticks(ys, [row[0] for row in rows])
    left.set_ylim(len(rows) - 0.5, -0.5)
    for ax in (left, right):
        ax.grid(axis="x", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            # Above the axes: inside, it would cover the bars of the last rows.
            ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return fig, note


def _limit_marks(ax: Axes, limits: Sequence[float | None], label: str) -> None:
    """A dashed mark across each row at its own limit: rows of one limit join into
    one line, and a row judged otherwise has none."""
    first = True
    for y, limit in enumerate(limits):
        if limit is None:
            continue
        ax.plot([limit, limit], [y - 0.5, y + 0.5], color=LIMIT_COLOUR, linestyle="--",
                linewidth=1.4, label=label if first else None)  # fmt: skip
        first = False


def _plot_delegation(jobs: Sequence[Job], figure: type[Figure]) -> Drawn:
    # One bar per program, not per device: the same .pte has the same coverage everywhere.
    seen: dict[tuple[str, str], Delegation] = {}
    for job in jobs:
        artifact = job.result.artifact
        if artifact is not None and artifact.delegation is not None:
            seen[(job.key.model, job.key.variant)] = artifact.delegation
    if not seen:
        return None
    shown, note = _cap(list(seen.items()), lambda item: -item[1].share, "programs least delegated")
    fig = figure(figsize=(6.2, _height(len(shown))))
    ax = fig.add_subplot()
    for y, (_, d) in enumerate(shown):
        share = d.share * 100
        ax.barh(y, 100, color="#eeeeee")
        ax.barh(y, share, color="#1565c0")
        total = d.delegated_nodes + d.non_delegated_nodes
        label = f"{share:.0f}% ({d.delegated_nodes}/{total} nodes)"
        ax.text(101, y, label, va="center", fontsize=8)
    ax.set_yticks(range(len(shown)), [_short(f"{short_model(m)}[{v}]") for (m, v), _ in shown])
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_xlim(0, 130)
    ax.set_xticks([0, 25, 50, 75, 100])
    ax.set_xlabel("share of graph nodes the backend claimed (%)")
    return fig, note


def _plot_size(jobs: Sequence[Job], figure: type[Figure]) -> Drawn:
    # One program's size is the same on every device.
    programs: dict[tuple[str, str], SizeSummary] = {}
    for job in jobs:
        if job.result.size is not None:
            programs[(job.key.model, job.key.variant)] = job.result.size
    rows: list[tuple[str, float, str]] = []
    for (model, variant), size in programs.items():
        for v in size.verdicts:
            if v.limit_bytes > 0:
                share = 100.0 * v.measured_bytes / v.limit_bytes
                colour = {"fits": COLOURS["passed"], "over": COLOURS["failed"]}.get(
                    v.status, COLOURS["infra"]
                )
                rows.append((_short(f"{short_model(model)}[{variant}]: {v.label}"), share, colour))
    if not rows:
        return None
    rows, note = _cap(rows, lambda row: row[1], "limits closest to full")
    fig = figure(figsize=(9, _height(len(rows))))
    ax = fig.add_subplot()
    smallest = min([s for _, s, _ in rows if s > 0] or [1.0])
    base = 10 ** math.floor(math.log10(smallest) - 1)
    for y, (_, share, colour) in enumerate(rows):
        ax.barh(y, max(share, base) - base, left=base, color=colour)
        ax.text(max(share, base), y, f" {share:.3g}%", va="center", fontsize=8)
    ax.axvline(100, color="#b71c1c", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(base, max(1000.0, max(s for _, s, _ in rows) * 3))
    ax.set_yticks(range(len(rows)), [label for label, _, _ in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("measured size as % of the limit (log; dashed: the limit)")
    return fig, note


def status_colour(result: RunResult) -> str:
    if result.status == "error":
        return COLOURS["infra" if result.is_infrastructure else "input"]
    return COLOURS.get(result.status, "#555")


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)
