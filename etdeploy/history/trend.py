"""The trend page: one small plot per series, its change points marked and the
input that changed that night named. One self-contained HTML file (inline SVG
and CSS, no script, no network asset), written atomically.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from etdeploy.atomic import atomic_write
from etdeploy.history.changes import ChangePoint, Flaky, Series
from etdeploy.history.judge import shown, worse

WIDTH, HEIGHT, PAD = 420, 120, 6
_CSS = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
.grid { display: flex; flex-wrap: wrap; gap: 1em; }
figure.series { margin: 0; border: 1px solid #ddd; padding: .5em; width: 440px; }
figure.series.shifted { border-color: #b71c1c; }
figcaption { font-size: 12px; word-break: break-all; }
svg { display: block; background: #fafafa; }
polyline { fill: none; stroke: #1565c0; stroke-width: 1.2; }
line.change-point { stroke: #b71c1c; stroke-width: 1.5; stroke-dasharray: 3 2; }
line.change-point.better { stroke: #2e7d32; }
ul.changes { margin: .3em 0 0 1em; padding: 0; font-size: 12px; }
.muted { color: #666; }
"""


@dataclass(frozen=True)
class TrendSeries:
    series: Series
    changes: tuple[ChangePoint, ...]


def write_trend_page(
    path: Path, trends: Sequence[TrendSeries], flaky: Sequence[Flaky], *, title: str
) -> None:
    shifted = sum(1 for t in trends if t.changes)
    nights = {p.started_at for t in trends for p in t.series.points}
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p id="summary">{len(trends)} series over {len(nights)} job night(s); '
        f"{shifted} with a change point.</p>",
    ]
    if flaky:
        parts.append('<h2>Flaky jobs</h2><ul id="flaky">')
        parts += [
            f"<li>{_e(f.key.text)}: pass/fail flipped {f.flips} times in {f.nights} nights "
            "with no recorded input changed</li>"
            for f in flaky
        ]
        parts.append("</ul>")
    # Series with a change point first: they are what the page is read for.
    ordered = sorted(trends, key=lambda t: (not t.changes, t.series.name))
    parts.append('<div class="grid">')
    parts += [_figure(t) for t in ordered]
    parts.append("</div></body></html>\n")
    atomic_write(path, "\n".join(parts).encode("utf-8"))


def _figure(trend: TrendSeries) -> str:
    series = trend.series
    values = series.values
    low, high = min(values), max(values)
    span = (high - low) or abs(high) or 1.0
    count = len(values)

    def x(i: int) -> float:
        return PAD + (WIDTH - 2 * PAD) * (i / (count - 1) if count > 1 else 0.5)

    def y(v: float) -> float:
        return HEIGHT - PAD - (HEIGHT - 2 * PAD) * (v - low) / span

    points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
    marks = []
    notes = []
    for change in trend.changes:
        better = "" if worse(change.metric, change.before, change.after) else " better"
        left = x(change.index) - (x(1) - x(0)) / 2 if count > 1 else x(change.index)
        label = (
            f"{change.night[:10]}: {shown(change.metric, change.before)} -> "
            f"{shown(change.metric, change.after)} ({change.shift:+.0%}); {change.cause}"
        )
        marks.append(
            f'<line class="change-point{better}" x1="{left:.1f}" x2="{left:.1f}" y1="0" '
            f'y2="{HEIGHT}" data-night="{_e(change.night)}"><title>{_e(label)}</title></line>'
        )
        notes.append(f'<li class="change">{_e(label)}</li>')
    first, last = series.points[0].started_at[:10], series.points[-1].started_at[:10]
    svg = (
        f'<svg width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">'
        f'<polyline points="{points}"/>{"".join(marks)}</svg>'
    )
    caption = (
        f"<figcaption><b>{_e(series.name)}</b> <span class=muted>{count} nights, {first} to "
        f"{last}; {_e(shown(series.metric, low))} to {_e(shown(series.metric, high))}</span>"
        "</figcaption>"
    )
    listed = f'<ul class="changes">{"".join(notes)}</ul>' if notes else ""
    klass = "series shifted" if trend.changes else "series"
    return (
        f'<figure class="{klass}" data-series="{_e(series.name)}">{caption}{svg}{listed}</figure>'
    )


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)
