"""Tonight against the history (`etdeploy farm ... --baseline history`).

Two kinds of alarm, told apart in every report:
- a change point: the series shifted for the worse, lastly within the last
  RECENT_NIGHTS nights, tonight included, and stayed (etdeploy.history.changes).
  A regression: the job reads REGRESSED and the farm exits 1.
- an outlier: tonight alone is worse than every one of the last WINDOW nights,
  past the metric's floor. Reported, not a regression: one noisy night on a busy
  machine is not news until the nights after it agree.
- a busy host: a latency change point that the CPU time of the same nights does
  not share (where the runner measured it): a run of busy nights, reported, not a
  regression.
A series with fewer than 2 x MIN_RUN nights of history is not judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from etdeploy.history.changes import (
    MIN_RUN,
    SHIFT_FLOORS,
    WINDOW,
    ChangePoint,
    Flaky,
    History,
    Series,
    change_points,
    flaky_jobs,
    tracked,
)
from etdeploy.history.records import PASSED, JobRecord, record_of, unit_of
from etdeploy.results.baseline import BUSY_HOST, CHANGE_POINT, OUTLIER, Regression
from etdeploy.results.jobs import JobKey as ReportKey
from etdeploy.results.jobs import job_key
from etdeploy.results.result import RunResult
from etdeploy.units import format_bytes, format_ms

# A change point is tonight's news for this many nights after it.
RECENT_NIGHTS = 7
# The CPU time's series (etdeploy's runner measures it): a latency shift it does not
# share is a busy period of the host, told and not failed.
CPU_METRIC = "latency.cpu_median_ms"
_UP_IS_WORSE = ("ms", "bytes", "")


@dataclass(frozen=True)
class HistoryJudgement:
    regressions: tuple[Regression, ...]  # alarm "change point"
    outliers: tuple[Regression, ...]  # alarm "outlier"
    flaky: tuple[Flaky, ...]
    judged_series: int
    short_series: int  # series with too little history to judge


def worse(metric: str, before: float, after: float) -> bool:
    """Whether moving from `before` to `after` is worse for this metric."""
    if metric == PASSED:
        return after < before
    return after > before if unit_of(metric) in _UP_IS_WORSE else after < before


def regression_kind(metric: str) -> str:
    """The Regression kind a metric's alarm is filed under."""
    if metric == PASSED:
        return "status"
    head = metric.split(".", 1)[0]
    if head == "numerics":
        return "sqnr" if metric.endswith("sqnr_db") else "max_abs"
    return head  # latency, memory, size, accuracy, or a new block's own name


def shown(metric: str, value: float) -> str:
    unit = unit_of(metric)
    if unit == "ms":
        return format_ms(value)
    if unit == "bytes":
        return format_bytes(int(value))
    if unit == "dB":
        return f"{value:.1f} dB"
    if unit == "share":
        return f"{value:.2%}"
    return f"{value:.4g}"


def judge_tonight(results: Sequence[RunResult], history: History) -> HistoryJudgement:
    """Tonight's results against the nights before them."""
    tonight = [(result, record_of(result)) for result in results]
    uids = {record.job_uid for _, record in tonight}
    earlier = {(s.key, s.metric): s for s in history.series}
    regressions: list[Regression] = []
    outliers: list[Regression] = []
    judged = short = 0
    for result, record in tonight:
        if result.status == "error":
            continue  # nothing measured
        for metric, value in record.metrics:
            if not tracked(metric):
                continue
            series = _with_tonight(earlier.get((record.key, metric)), record, metric, value, uids)
            if len(series.values) - 1 < 2 * MIN_RUN:
                short += 1
                continue
            judged += 1
            key = job_key(result)
            shift = _recent_shift(series)
            cpu = record.metric(CPU_METRIC)
            if shift is not None and cpu is not None and metric.startswith("latency."):
                cpu_series = _with_tonight(
                    earlier.get((record.key, CPU_METRIC)), record, CPU_METRIC, cpu, uids
                )
                if (busy := _busy_period(series, shift, cpu_series)) is not None:
                    outliers.append(_busy_regression(key, shift, *busy))
                    continue
            if shift is not None:
                regressions.append(_change_regression(key, shift))
            elif (outlier := _outlier(series)) is not None:
                outliers.append(_outlier_regression(key, metric, *outlier))
    return HistoryJudgement(
        tuple(regressions), tuple(outliers),
        tuple(flaky_jobs([*(j for j in history.jobs if j.job_uid not in uids),
                          *(r for _, r in tonight)])), judged, short,
    )  # fmt: skip


def _busy_period(series: Series, change: ChangePoint, cpu: Series) -> tuple[float, float] | None:
    """(CPU time's median before, after) when a wall-time latency shift is not shared
    by the CPU time of the same nights (it grew by less than half as much): a busy
    period of the host, not a slower program. None when it is shared, or when the
    CPU time was not measured on enough of those nights."""
    import numpy as np

    by_job = dict(zip((r.job_uid for r in cpu.records), cpu.values, strict=True))
    at = change.index
    sides = [
        [by_job[r.job_uid] for r in records if r.job_uid in by_job]
        for records in (series.records[max(0, at - WINDOW) : at], series.records[at : at + WINDOW])
    ]
    if min(len(side) for side in sides) < MIN_RUN or change.before <= 0:
        return None
    before, after = (float(np.median(side)) for side in sides)
    if before > 0 and after / before - 1 >= change.shift / 2:
        return None
    return before, after


def _busy_regression(
    key: object, change: ChangePoint, cpu_before: float, cpu_after: float
) -> Regression:
    assert isinstance(key, ReportKey)
    message = (
        f"{change.metric} {shown(change.metric, change.before)} -> "
        f"{shown(change.metric, change.after)} ({change.shift:+.0%}) since "
        f"{change.night[:10]}, but the CPU time of the same nights "
        f"{format_ms(cpu_before)} -> {format_ms(cpu_after)}: the host was busy, the "
        "program no slower; not a regression"
    )
    return Regression(key, regression_kind(change.metric), change.before, change.after,
                      message, part=change.metric, alarm=BUSY_HOST)  # fmt: skip


def _with_tonight(
    before: Series | None, record: JobRecord, metric: str, value: float, uids: set[str]
) -> Series:
    """The series of the nights before tonight (without tonight's own jobs, when they
    were recorded already: a rerun of the judgement), then tonight."""
    if before is None:
        return Series(record.key, metric, (record,), (value,))
    pairs = [(r, v) for r, v in zip(before.records, before.values, strict=True)
             if r.job_uid not in uids]  # fmt: skip
    return Series(record.key, metric, (*(r for r, _ in pairs), record),
                  (*(v for _, v in pairs), value))  # fmt: skip


def _recent_shift(series: Series) -> ChangePoint | None:
    found = [
        c
        for c in change_points(series)
        if c.index >= len(series.values) - RECENT_NIGHTS and worse(c.metric, c.before, c.after)
    ]
    return found[-1] if found else None


def _outlier(series: Series) -> tuple[float, float] | None:
    """(the window's median, tonight) when tonight is worse than every night of the
    window before it and past the metric's floors."""
    import numpy as np

    values = series.values
    window, now = values[-1 - WINDOW : -1], values[-1]
    median = float(np.median(window))
    relative, absolute = SHIFT_FLOORS.get(unit_of(series.metric), SHIFT_FLOORS[""])
    if abs(now - median) < max(absolute, relative * abs(median)):
        return None
    beyond = now > max(window) if worse(series.metric, 0.0, 1.0) else now < min(window)
    return (median, now) if beyond else None


def _change_regression(key: object, change: ChangePoint) -> Regression:
    assert isinstance(key, ReportKey)
    nights = f"{change.night[:10]}"
    message = (
        f"{change.metric} {shown(change.metric, change.before)} -> "
        f"{shown(change.metric, change.after)} ({change.shift:+.0%}) since {nights}, "
        f"a change point (p={change.p_value:.1g}); that night: {change.cause}"
    )
    return Regression(key, regression_kind(change.metric), change.before, change.after,
                      message, part=change.metric, alarm=CHANGE_POINT)  # fmt: skip


def _outlier_regression(key: object, metric: str, median: float, now: float) -> Regression:
    assert isinstance(key, ReportKey)
    message = (
        f"{metric} {shown(metric, now)} tonight against {shown(metric, median)} "
        f"(median of the last {WINDOW} nights): a single-night outlier, not a regression "
        f"unless the next nights agree"
    )
    return Regression(key, regression_kind(metric), median, now, message, part=metric,
                      alarm=OUTLIER)  # fmt: skip
