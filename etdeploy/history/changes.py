"""Change points per series, the input that changed with each, and flaky jobs.

A series is one metric of one job (model x backend x quantization x device)
over the nights, oldest first. Finding where it shifts is two maintained
implementations, not statistics of our own:

- ruptures (Truong, Oudre, Vayatis, "Selective review of offline change point
  detection methods", Signal Processing 2020; ruptures 1.1.10, read 2026-12-05):
  KernelCPD with the linear kernel, solved exactly by Pelt in ruptures' C code,
  places candidate change points on the series' ranks (scipy.stats.rankdata).
  On ranks, the cost a split saves is the squared difference of the mean ranks
  either side (the statistic of the rank test below), so the split is placed
  where that two-sample statistic peaks, and one night slowed tenfold by a busy
  machine weighs one rank, not its size. A minimum segment of MIN_RUN nights is
  why one night can never be a segment of its own. (Binary segmentation with the
  L1 cost, before: its cost is a median per candidate segment in Python, 50 ms a
  series of 365 nights, and its greedy split could land nights off the change.)
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
from functools import cache
from operator import itemgetter
from typing import Any, NamedTuple

from etdeploy.history.records import PASSED, SEP, JobKey, JobRecord, unit_of

MIN_RUN = 4  # nights: the shortest run that can be a level of its own
WINDOW = 30  # nights either side a candidate is tested on
P_VALUE = 1e-3
# A night further than this many MADs from both levels around a change is an
# outlier of both (a busy night), not a night of either level.
OUTLIER_MADS = 3.0
# Pelt's penalty per change point: this many times log(n) times the ranks' variance
# (the chi-square scale of a split's saving under no change). Low, because the rank
# test confirms: the penalty only keeps the candidates few.
PENALTY = 2.0
# (relative, absolute) shifts below which no change is reported, by unit.
SHIFT_FLOORS: dict[str, tuple[float, float]] = {
    "ms": (0.05, 0.005),
    "bytes": (0.05, 4096.0),
    "dB": (0.0, 3.0),
    "share": (0.0, 0.005),
    "": (1.0, 1e-5),  # max abs error: doubled, and past float rounding
}
# Metrics that are not tracked: a night's spread, its slowest iteration and its p90
# (of a farm's 15 iterations, the second slowest: a busy night's noise; tracked, it
# raised a false change point in 1 of 40 draws of the sixty nights' test), and the
# memory parts that vary with what the machine did before
# (etdeploy.results.baseline_memory compares them only through the peak). The
# fastest iteration is tracked: a busy machine cannot make it faster, so it moves
# with the program where the median moves with the machine too.
UNTRACKED_SUFFIXES = (
    ".stdev_ms", ".max_ms", ".p90_ms", ".trimmed_mean_ms", ".runner_bytes",
    ".libraries_bytes", ".allocator_free_bytes", ".unexplained_bytes", ".eager_share",
)  # fmt: skip


class Point(NamedTuple):
    """One night of a series, as a listing shows it."""

    started_at: str
    value: float
    record: JobRecord


@dataclass(frozen=True)
class Series:
    """One metric of one job over the nights, oldest first, as two columns: each
    night's job and the metric's value that night (a year of a thousand series is
    365,000 values; no object per value)."""

    key: JobKey
    metric: str
    records: tuple[JobRecord, ...]
    values: tuple[float, ...]

    @property
    def name(self) -> str:
        return f"{self.key.text}{SEP}{self.metric}"

    @property
    def points(self) -> tuple[Point, ...]:
        return tuple(
            Point(r.started_at, v, r) for r, v in zip(self.records, self.values, strict=True)
        )

    def joined(self, later: Series) -> Series:
        """This series with the nights of `later` (the same job and metric) after it,
        in night order."""
        pairs = [
            *zip(self.records, self.values, strict=True),
            *zip(later.records, later.values, strict=True),
        ]
        if (
            self.records
            and later.records
            and later.records[0].started_at < self.records[-1].started_at
        ):
            pairs.sort(key=lambda pair: pair[0].started_at)
        return Series(self.key, self.metric, tuple(r for r, _ in pairs), tuple(v for _, v in pairs))


@dataclass(frozen=True)
class History:
    """The nights read from a store: every job (what ran, its status; its metrics
    are in the series) and every tracked series, in name order."""

    jobs: tuple[JobRecord, ...]
    series: tuple[Series, ...]

    def adding(self, records: Sequence[JobRecord]) -> History:
        """This history with `records` (tonight's jobs, with their metrics) added."""
        tonight = {(s.key, s.metric): s for s in series_of(records)}
        merged = [
            s if (later := tonight.pop((s.key, s.metric), None)) is None else s.joined(later)
            for s in self.series
        ]
        merged += tonight.values()
        return History((*self.jobs, *records), tuple(sorted(merged, key=lambda s: s.name)))


def history_of(records: Sequence[JobRecord]) -> History:
    """A history of records that carry their metrics (tonight's, or a results file's)."""
    return History(tuple(records), tuple(series_of(records)))


def series_from_columns(
    jobs: Sequence[JobRecord],
    job_ids: Sequence[int],
    columns: dict[str, tuple[Sequence[int], Sequence[float]]],
) -> list[Series]:
    """Every series of a store's columns: `jobs` in night order with their row ids
    `job_ids`, and per tracked metric the (job ids, values) arrays of its rows.
    Grouped and ordered with numpy: one sort per metric, no object per value."""
    import numpy as np

    codes: dict[JobKey, int] = {}
    key_code = np.fromiter((codes.setdefault(r.key, len(codes)) for r in jobs), np.int64, len(jobs))
    keys = list(codes)
    ids = np.asarray(job_ids, dtype=np.int64)
    position = np.full(int(ids.max()) + 1 if len(ids) else 1, -1, dtype=np.int64)
    position[ids] = np.arange(len(ids))
    found: list[Series] = []
    for metric, (job_column, value_column) in columns.items():
        row_jobs = np.asarray(job_column, dtype=np.int64)
        inside = row_jobs < len(position)
        at = np.full(len(row_jobs), -1, dtype=np.int64)
        at[inside] = position[row_jobs[inside]]
        kept = at >= 0  # rows of jobs before `since` are not read
        at, row_values = at[kept], np.asarray(value_column, dtype=float)[kept]
        order = np.lexsort((at, key_code[at]))
        at, row_values = at[order], row_values[order]
        series_code = key_code[at]
        bounds = (np.flatnonzero(np.diff(series_code)) + 1).tolist()
        for start, end in zip([0, *bounds], [*bounds, len(at)], strict=True):
            if end > start:
                found.append(
                    Series(
                        keys[int(series_code[start])], metric,
                        _picked(jobs, at[start:end].tolist()),
                        tuple(row_values[start:end].tolist()),
                    )
                )  # fmt: skip
    return sorted(found, key=lambda s: s.name)


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


@cache
def tracked(metric: str) -> bool:
    return metric != PASSED and not metric.endswith(UNTRACKED_SUFFIXES)


def _picked(jobs: Sequence[JobRecord], indices: list[int]) -> tuple[JobRecord, ...]:
    # itemgetter picks in C; with one index it returns the item, not a tuple.
    picked = itemgetter(*indices)(jobs)
    return picked if len(indices) > 1 else (picked,)


def series_of(records: Iterable[JobRecord], *, all_metrics: bool = False) -> list[Series]:
    """Every series of the records (with their metrics), in name order; each ordered
    by night."""
    table: dict[JobKey, dict[str, tuple[list[JobRecord], list[float]]]] = {}
    for record in sorted(records, key=lambda r: r.started_at):
        job = table.setdefault(record.key, {})
        for name, value in record.metrics:
            if all_metrics or tracked(name):
                nights, values = job.setdefault(name, ([], []))
                nights.append(record)
                values.append(value)
    found = [
        Series(key, metric, tuple(nights), tuple(values))
        for key, job in table.items()
        for metric, (nights, values) in job.items()
    ]
    return sorted(found, key=lambda s: s.name)


def change_points(series: Series) -> list[ChangePoint]:
    """The series' sustained shifts, oldest first."""
    import numpy as np

    values = np.asarray(series.values, dtype=float)
    n = len(values)
    if n < 2 * MIN_RUN:
        return []
    relative_floor, absolute_floor = SHIFT_FLOORS.get(unit_of(series.metric), SHIFT_FLOORS[""])
    candidates = _candidates(values)
    found: list[ChangePoint] = []
    for at, was, now, p_value in _confirmed(values, candidates):
        shift = abs(now - was)
        if shift < absolute_floor or shift < relative_floor * abs(was):
            continue
        found.append(
            ChangePoint(
                series=series.name, metric=series.metric, index=at,
                night=series.records[at].started_at, before=was, after=now, p_value=p_value,
                changed=changed_inputs(series.records, at),
            )
        )  # fmt: skip
    return found


def _candidates(values: Any) -> list[int]:
    """Where Pelt splits the series' ranks (see the module's docstring)."""
    import numpy as np
    import ruptures
    from scipy.stats import rankdata

    if float(np.min(values)) == float(np.max(values)):
        return []  # every night the same value (its ranks' variance is a rounding error)
    ranks = rankdata(values) / len(values)
    spread = float(np.var(ranks))
    detector = ruptures.KernelCPD(kernel="linear", min_size=MIN_RUN).fit(ranks.reshape(-1, 1))
    return list(detector.predict(pen=PENALTY * spread * math.log(len(values)))[:-1])


def _confirmed(values: Any, candidates: list[int]) -> list[tuple[int, float, float, float]]:
    """The candidates that the rank test confirms, each placed at its night, as
    (index, median before, median after, p-value). The weakest candidate that fails
    is dropped and the rest tested again, its neighbours' windows now reaching across
    it (as Hunter prunes E-Divisive's candidates): a spurious split must not starve a
    real one of nights."""
    kept = [int(at) for at in candidates]
    while True:
        bounds = [0, *kept, len(values)]
        tested = [_tested(values, left, at, right)
                  for left, at, right in zip(bounds, bounds[1:], bounds[2:], strict=False)]  # fmt: skip
        weakest = max(tested, key=lambda t: t[3], default=None)
        if weakest is None or weakest[3] < P_VALUE:
            placed = [_placed(values, bounds[i], t[0], bounds[i + 2]) for i, t in enumerate(tested)]
            return [_tested(values, bounds[i], at, bounds[i + 2]) for i, at in enumerate(placed)]
        kept.remove(weakest[0])


def _tested(values: Any, left: int, at: int, right: int) -> tuple[int, float, float, float]:
    """The split at `at` of the segment [left, right): (at, median of the WINDOW
    nights before, of the WINDOW nights after, the rank test's p-value)."""
    import numpy as np
    from scipy.stats import mannwhitneyu

    before = values[max(left, at - WINDOW) : at]
    after = values[at : min(right, at + WINDOW)]
    p_value = float(mannwhitneyu(before, after, alternative="two-sided").pvalue)
    return at, float(np.median(before)), float(np.median(after)), p_value


def _placed(values: Any, left: int, at: int, right: int) -> int:
    """The change's night, within MIN_RUN nights of where Pelt split the ranks.

    Ranks cannot tell a busy night from the higher level: a busy night just
    before a change ranks with the nights after it and pulls the split early.
    So the nights that are outliers of both levels (further than OUTLIER_MADS
    from each side's median, scipy's normal-consistent MAD) are set aside, and
    the split is the one that minimises ruptures' L1 (median) cost of the two
    sides over the rest: each remaining night goes with the level it is nearer."""
    import numpy as np
    from ruptures.costs import CostL1
    from scipy.stats import median_abs_deviation

    low, high = max(left, at - WINDOW), min(right, at + WINDOW)
    window = values[low:high]

    def far_from(side: Any) -> Any:
        spread = float(median_abs_deviation(side, scale="normal"))
        return np.abs(window - float(np.median(side))) > OUTLIER_MADS * spread

    kept = np.flatnonzero(~(far_from(values[low:at]) & far_from(values[at:high]))) + low
    cost = CostL1().fit(values[kept].reshape(-1, 1))
    splits = [
        j
        for j in range(cost.min_size, len(kept) - cost.min_size + 1)
        if abs(int(kept[j]) - at) <= MIN_RUN
        and int(kept[j]) - left >= MIN_RUN
        and right - int(kept[j]) >= MIN_RUN
    ]
    if not splits:
        return at
    best = min(
        splits, key=lambda j: (cost.error(0, j) + cost.error(j, len(kept)), abs(kept[j] - at))
    )
    return int(kept[best])


def changed_inputs(records: Sequence[JobRecord], at: int) -> tuple[InputChange, ...]:
    """The inputs recorded differently between the night before `at` and `at`;
    if none, between the neighbouring pairs (the detector may be one night off)."""
    for index in (at, at + 1, at - 1):
        if 1 <= index < len(records):
            diff = diff_inputs(records[index - 1], records[index])
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
