"""Change points per series, the input that changed with each, and flaky jobs.

A series is one metric of one job (model x backend x quantization x device)
over the nights, oldest first. Finding where it shifts is two maintained
implementations, not statistics of our own:

- ruptures (Truong, Oudre, Vayatis, "Selective review of offline change point
  detection methods", Signal Processing 2020; ruptures 1.1.10, read 2026-12-05):
  binary segmentation with the L1 (median) cost places candidate change points.
  The median cost is why one night slowed tenfold by a busy machine does not
  pull a segment boundary, and a minimum segment of MIN_RUN nights is why one
  night can never be a segment of its own.
- scipy.stats.mannwhitneyu tests each candidate: the nights before it against
  the nights after it (up to WINDOW each side). A rank test, so an outlier
  counts as one rank, not as its size. This is the role the t-test plays after
  E-Divisive in Otava/Hunter (Fleming et al., ICPE 2023) and MongoDB's CI
  (Daly et al., ICPE 2020); neither installs beside numpy 2.4 (Otava 0.8.0 pins
  numpy 2.2, signal-processing-algorithms 2.1.6 numpy<2; their METADATA, read
  2026-12-05).

A shift is reported only when it is also larger than its metric's floor
(SHIFT_FLOORS): a significant 0.3% is not news. Each change point names the
recorded inputs that differ between the night before it and its night (or one
night either side, where the detector's placement is off by one).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from etdeploy.history.records import PASSED, SEP, JobKey, JobRecord, unit_of

MIN_RUN = 4  # nights: the shortest run that can be a level of its own
WINDOW = 30  # nights either side a candidate is tested on
P_VALUE = 1e-3
# A night further than this many MADs from both levels around a change is an
# outlier of both (a busy night), not a night of either level.
OUTLIER_MADS = 3.0
PENALTY = 1.0  # times log(n), in units of the nights' spread: the rank test confirms
# (relative, absolute) shifts below which no change is reported, by unit.
SHIFT_FLOORS: dict[str, tuple[float, float]] = {
    "ms": (0.05, 0.005),
    "bytes": (0.05, 4096.0),
    "dB": (0.0, 3.0),
    "share": (0.0, 0.005),
    "": (1.0, 1e-5),  # max abs error: doubled, and past float rounding
}
# Metrics that are not tracked: a night's spread and slowest iteration (a busy
# night's noise), and the memory parts that vary with what the machine did before
# (etdeploy.results.baseline_memory compares them only through the peak). The
# fastest iteration is tracked: a busy machine cannot make it faster, so it moves
# with the program where the median moves with the machine too.
UNTRACKED_SUFFIXES = (
    ".stdev_ms", ".max_ms", ".trimmed_mean_ms", ".runner_bytes",
    ".libraries_bytes", ".allocator_free_bytes", ".unexplained_bytes", ".eager_share",
)  # fmt: skip


@dataclass(frozen=True)
class Point:
    started_at: str
    value: float
    record: JobRecord


@dataclass(frozen=True)
class Series:
    key: JobKey
    metric: str
    points: tuple[Point, ...]

    @property
    def name(self) -> str:
        return f"{self.key.text}{SEP}{self.metric}"

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]


@dataclass(frozen=True)
class InputChange:
    name: str
    before: str | None
    after: str | None

    @property
    def text(self) -> str:
        return f"{self.name} {self.before or '-'} -> {self.after or '-'}"


@dataclass(frozen=True)
class ChangePoint:
    """A sustained shift: from its night on, the series sits at another level."""

    series: str
    metric: str
    index: int  # the first point at the new level
    night: str  # that point's started_at
    before: float  # medians of the windows either side
    after: float
    p_value: float
    changed: tuple[InputChange, ...]  # what was recorded differently that night

    @property
    def shift(self) -> float:
        """The relative shift (+0.2 is 20% up); inf from a level of zero."""
        if self.before == 0:
            return math.inf if self.after > 0 else -math.inf if self.after < 0 else 0.0
        return (self.after - self.before) / abs(self.before)

    @property
    def cause(self) -> str:
        if not self.changed:
            return "no recorded input changed"
        return "; ".join(c.text for c in self.changed)


@dataclass(frozen=True)
class Flaky:
    """A job that flips between pass and fail while nothing recorded changes."""

    key: JobKey
    flips: int
    nights: int


def tracked(metric: str) -> bool:
    return metric != PASSED and not metric.endswith(UNTRACKED_SUFFIXES)


def series_of(records: Iterable[JobRecord], *, all_metrics: bool = False) -> list[Series]:
    """Every series of the records, in name order; each ordered by night."""
    table: dict[tuple[JobKey, str], list[Point]] = {}
    for record in records:
        for name, value in record.metrics:
            if all_metrics or tracked(name):
                table.setdefault((record.key, name), []).append(
                    Point(record.started_at, value, record)
                )
    found = [
        Series(key, metric, tuple(sorted(points, key=lambda p: p.started_at)))
        for (key, metric), points in table.items()
    ]
    return sorted(found, key=lambda s: s.name)


def change_points(series: Series) -> list[ChangePoint]:
    """The series' sustained shifts, oldest first."""
    import numpy as np
    import ruptures

    values = np.asarray(series.values, dtype=float)
    n = len(values)
    if n < 2 * MIN_RUN:
        return []
    relative_floor, absolute_floor = SHIFT_FLOORS.get(unit_of(series.metric), SHIFT_FLOORS[""])
    noise = _night_noise(series.values)
    scale = max(noise, absolute_floor / 2, 1e-12 * float(np.max(np.abs(values))), 1e-300)
    standard = (values - float(np.median(values))) / scale
    detector = ruptures.Binseg(model="l1", min_size=MIN_RUN, jump=1).fit(standard.reshape(-1, 1))
    candidates = detector.predict(pen=PENALTY * math.log(n))[:-1]
    found: list[ChangePoint] = []
    for at, was, now, p_value in _confirmed(values, candidates):
        shift = abs(now - was)
        if shift < absolute_floor or shift < relative_floor * abs(was):
            continue
        found.append(
            ChangePoint(
                series=series.name, metric=series.metric, index=at,
                night=series.points[at].started_at, before=was, after=now, p_value=p_value,
                changed=changed_inputs(series.points, at),
            )
        )  # fmt: skip
    return found


def _confirmed(values: Any, candidates: list[int]) -> list[tuple[int, float, float, float]]:
    """The candidates that the rank test confirms, as (index, median before, median
    after, p-value). The weakest candidate that fails is dropped and the rest tested
    again, its neighbours' windows now reaching across it (as Hunter prunes
    E-Divisive's candidates): a spurious split must not starve a real one of nights."""
    import numpy as np
    from scipy.stats import mannwhitneyu

    kept = list(candidates)
    while True:
        bounds = [0, *kept, len(values)]
        tested = []
        for left, at, right in zip(bounds, bounds[1:], bounds[2:], strict=False):
            before = values[max(left, at - WINDOW) : at]
            after = values[at : min(right, at + WINDOW)]
            p_value = float(mannwhitneyu(before, after, alternative="two-sided").pvalue)
            tested.append((at, float(np.median(before)), float(np.median(after)), p_value))
        weakest = max(tested, key=lambda t: t[3], default=None)
        if weakest is None or weakest[3] < P_VALUE:
            return [(_first_inlier(values, bounds[i], t[0], bounds[i + 2]), *t[1:])
                    for i, t in enumerate(tested)]  # fmt: skip
        kept.remove(weakest[0])


def _first_inlier(values: Any, left: int, at: int, right: int) -> int:
    """The change's night: the first night at the new level that is not an outlier
    of both levels. A busy night beside a change belongs to neither side, and the
    median cost may place the boundary before it; it is moved past such nights."""
    import numpy as np
    from scipy.stats import median_abs_deviation

    before = values[max(left, at - WINDOW) : at]
    after = values[at : min(right, at + WINDOW)]

    def outlier(value: float) -> bool:
        return all(
            abs(value - float(np.median(side)))
            > OUTLIER_MADS * float(median_abs_deviation(side, scale="normal"))
            for side in (before, after)
        )

    while at + 1 <= right - MIN_RUN and outlier(values[at]):
        at += 1
    return at


def _night_noise(values: Sequence[float]) -> float:
    """The spread of the nights, robustly: the normal-consistent median absolute
    deviation (scipy), which busy nights (up to half of them) do not inflate, as
    they inflate a standard deviation or the differences between neighbours."""
    import numpy as np
    from scipy.stats import median_abs_deviation

    return float(median_abs_deviation(np.asarray(values, dtype=float), scale="normal"))


def changed_inputs(points: Sequence[Point], at: int) -> tuple[InputChange, ...]:
    """The inputs recorded differently between the night before `at` and `at`;
    if none, between the neighbouring pairs (the detector may be one night off)."""
    for index in (at, at + 1, at - 1):
        if 1 <= index < len(points):
            diff = diff_inputs(points[index - 1].record, points[index].record)
            if diff:
                return diff
    return ()


def diff_inputs(before: JobRecord, after: JobRecord) -> tuple[InputChange, ...]:
    was, now = before.input_map, after.input_map
    return tuple(
        InputChange(name, was.get(name), now.get(name))
        for name in sorted(was.keys() | now.keys())
        if was.get(name) != now.get(name)
    )


def flaky_jobs(records: Iterable[JobRecord], *, min_flips: int = 2) -> list[Flaky]:
    """Jobs whose pass/fail flipped at least `min_flips` times between nights
    that recorded the same inputs (a flip with an input change is a change)."""
    by_job: dict[JobKey, list[JobRecord]] = {}
    for record in records:
        by_job.setdefault(record.key, []).append(record)
    found: list[Flaky] = []
    for key, nights in sorted(by_job.items(), key=lambda item: item[0].text):
        nights.sort(key=lambda r: r.started_at)
        flips = sum(
            1
            for a, b in itertools.pairwise(nights)
            if (a.status == "passed") != (b.status == "passed") and not diff_inputs(a, b)
        )
        if flips >= min_flips:
            found.append(Flaky(key, flips, len(nights)))
    return found
