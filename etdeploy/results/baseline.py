"""Compare a run with a baseline run of the same matrix: what got slower, what
drifted numerically, what stopped passing.

Jobs are matched on (model, backend, quantization, device name). A job in only
one of the two runs is not compared. Where a key appears more than once (a
retried job), the last result counts, as the last attempt is the one reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from etdeploy.jsonvalue import JsonObject
from etdeploy.results.baseline_memory import DEFAULT_MEMORY_GROWTH
from etdeploy.results.baseline_memory import memory_growth as memory_growth_of
from etdeploy.results.jobs import JobKey, error_type, failure_message, job_key
from etdeploy.results.record import finite_or_none
from etdeploy.results.result import OutputMetrics, RunResult
from etdeploy.units import format_ms

# Above this, SQNR differences are float32 rounding (an fp32 lowering lands at
# 120-140 dB against eager), not drift: both sides are capped here before the
# drop is measured, so 134 -> 124 dB is not a regression but 60 -> 50 dB is.
SQNR_CEILING_DB = 100.0

# Max-abs growth below this is rounding whatever its ratio: the fp32 pass line is
# atol 1e-4 (etdeploy.numerics.FP32_ATOL), and an exact baseline (0.0) would
# otherwise flag the first 1e-7 as infinite growth.
ABS_ERROR_FLOOR = 1e-5

# A task metric (top-1) lower than the baseline's by more than this, on the same
# labelled samples, is a regression; below it, thread scheduling can flip a tie.
ACCURACY_DROP = 0.005

KINDS = ("status", "latency", "sqnr", "max_abs", "memory", "accuracy")

# Latency growth below this is not judged from one pair of runs, whatever its
# share: back-to-back farms of an unchanged program on this busy 2-core machine
# moved a median by up to 195 µs (29 µs -> 224 µs, +675%; and +56% of digits'
# ~0.3 ms; issue 38, measured 2026-12). A history (etdeploy.history) sees a
# smaller shift once it lasts; one pair of runs cannot tell it from a busy night.
LATENCY_FLOOR_MS = 0.25

# Where both runs measured their CPU time, a latency growth whose CPU time grew by
# less than half as much, and by no more than this share, is a busy host. Load alone
# moved memory-bound programs' CPU time by up to 1.6x on this 2-core machine
# (2026-12-05; docs/guides/farms.md, the busy-host experiment).
CPU_GROWTH = 0.50

# What raised an alarm, where a history judged (etdeploy.history.judge): a
# sustained shift (a regression) or tonight alone (reported, not a regression).
CHANGE_POINT = "change point"
OUTLIER = "outlier"
# A one-file baseline's latency growth that the CPU time does not share: the host
# was busy (other processes held the cores), the program did not get slower. Told,
# not failed.
BUSY_HOST = "busy host"
# What is told and not failed: a history's single-night outlier, a busy host.
NOT_FAILED = (OUTLIER, BUSY_HOST)


@dataclass(frozen=True)
class Regression:
    """One thing that is worse than in the baseline.

    kind: "status" (passed, now failed or error), "latency" (median up beyond
    noise), "sqnr" (an output's worst SQNR dropped), "max_abs" (an output's
    worst absolute error grew), "memory" (a phase's peak or a part of its
    account grew past the set share). `output` names the output for the numeric
    kinds, `part` the part of the memory account that grew. Values are
    milliseconds for latency, dB for sqnr, bytes for memory, the status for status.
    """

    key: JobKey
    kind: str
    baseline: float | str | None
    current: float | str | None
    message: str
    output: str | None = None
    part: str | None = None
    # None for a one-file baseline's regression, BUSY_HOST for its latency growth the
    # CPU time did not share; CHANGE_POINT or OUTLIER against a history.
    alarm: str | None = None

    @property
    def line(self) -> str:
        """One line that names the job, as a log shows it: the message alone
        says what got worse, not where."""
        return f"{self.key.label}: {self.message}"

    @property
    def is_regression(self) -> bool:
        """Whether it fails the job: everything but a single-night outlier or a
        busy host."""
        return self.alarm not in NOT_FAILED

    def to_json(self) -> JsonObject:
        def plain(value: float | str | None) -> float | str | None:
            # JSON has no Infinity; an exact match (inf dB) or a NaN output becomes null.
            return finite_or_none(value) if isinstance(value, float) else value

        return {
            "key": self.key.to_json(),
            "label": self.key.label,
            "kind": self.kind,
            "output": self.output,
            "part": self.part,
            "alarm": self.alarm,
            "baseline": plain(self.baseline),
            "current": plain(self.current),
            "message": self.message,
        }


def compare_to_baseline(
    results: Iterable[RunResult],
    baseline: Iterable[RunResult],
    *,
    latency_threshold: float = 0.10,
    sqnr_drop_db: float = 3.0,
    abs_error_factor: float = 2.0,
    abs_error_floor: float = ABS_ERROR_FLOOR,
    accuracy_drop: float = ACCURACY_DROP,
    memory_growth: float = DEFAULT_MEMORY_GROWTH,
    latency_floor_ms: float = LATENCY_FLOOR_MS,
    cpu_threshold: float = CPU_GROWTH,
) -> list[Regression]:
    """Regressions of `results` against `baseline`, in the order of `results`.

    Latency is flagged when the median grew by more than `latency_threshold`
    (a fraction), by more than `latency_floor_ms`, and beyond both runs' spread:
    above the baseline's p90 and its median plus the two runs' combined stdev
    (a busy night's own spread raises the bar). Where both runs carry their CPU
    time (our runner measures it), a latency growth whose CPU time grew by less than
    half as much, and by no more than `cpu_threshold`, is a busy host (a whole run
    slowed evenly has a tight spread, so spread alone cannot tell it): it comes
    back as alarm BUSY_HOST, told and not failed. A slower program grows both alike. So an unchanged
    program run twice on a busy machine does not regress.
    Numerics are compared per output over the samples both runs share: the
    worst SQNR dropping by more than `sqnr_drop_db`, the worst max-abs error
    growing by more than `abs_error_factor` (and past `abs_error_floor`, with
    the SQNR below SQNR_CEILING_DB: under float rounding no growth counts).
    Memory is flagged when a phase's peak or a part of its account grew by more
    than `memory_growth` (a share; etdeploy.results.baseline_memory), naming the part.
    An exact match's SQNR is +inf and a non-finite output's max abs +inf
    (OutputMetrics reads the document's nulls back as those).
    """
    before = {job_key(r): r for r in baseline}
    now = {job_key(r): r for r in results}
    found: list[Regression] = []
    for key, current in now.items():
        old = before.get(key)
        if old is None:
            continue
        found.extend(_status(key, old, current))
        if current.status == "error" or old.status == "error":
            continue  # an error has no latency or outputs to compare
        found.extend(
            _latency(key, old, current, latency_threshold, latency_floor_ms, cpu_threshold)
        )
        found.extend(_numerics(key, old, current, sqnr_drop_db, abs_error_factor, abs_error_floor))
        found.extend(_memory(key, old, current, memory_growth))
        found.extend(_accuracy(key, old, current, accuracy_drop))
    return found


def _accuracy(key: JobKey, old: RunResult, current: RunResult, allowed: float) -> list[Regression]:
    """The device's task metric against the baseline's, on the same labelled samples."""
    a, b = old.accuracy, current.accuracy
    if a is None or b is None or a.samples != b.samples or a.labels != b.labels:
        return []
    before, now = a.primary, b.primary
    if before.metric != now.metric or a.task != "classification":
        return []
    if before.device - now.device <= allowed:
        return []
    message = (
        f"device {now.metric} {before.device:.2%} -> {now.device:.2%} on the same "
        f"{b.samples} labelled samples ({(now.device - before.device) * 100:+.2f} pp; "
        f"eager {now.eager:.2%})"
    )
    return [Regression(key, "accuracy", before.device, now.device, message, output=b.output)]


def _memory(key: JobKey, old: RunResult, current: RunResult, growth: float) -> list[Regression]:
    grown = memory_growth_of(old, current, growth)
    if grown is None:
        return []
    return [
        Regression(key, "memory", float(grown.before), float(grown.now), grown.message(growth),
                   part=grown.part)
    ]  # fmt: skip


def _status(key: JobKey, old: RunResult, current: RunResult) -> list[Regression]:
    was, now = old.status, current.status
    if was != "passed" or now == "passed":
        return []
    if now == "failed":
        why = failure_message(current)
    else:
        message = current.error.message if current.error is not None else ""
        why = f"{error_type(current)}: {message}"
    return [Regression(key, "status", was, now, f"passed in the baseline, now {now}: {why}")]


def _latency(
    key: JobKey,
    old: RunResult,
    current: RunResult,
    threshold: float,
    floor_ms: float,
    cpu_threshold: float,
) -> list[Regression]:
    a, b = old.latency_ms, current.latency_ms
    if a is None or b is None or not a.n or not b.n or a.median is None or b.median is None:
        return []
    base, now = a.median, b.median
    stdev, stdev_now = a.stdev or 0.0, b.stdev or 0.0
    p90 = a.p90 if a.p90 is not None else base
    combined = math.hypot(stdev, stdev_now)
    # A median the baseline would have counted among its slowest tenth, or more
    # than both runs' spread off, is not noise; below both it may be, whatever
    # the threshold; and below the floor one pair of runs cannot tell.
    limit = max(base * (1 + threshold), p90, base + combined, base + floor_ms)
    if now <= limit:
        return []
    growth = f"+{(now / base - 1) * 100:.0f}%" if base > 0 else "up"
    message = (
        f"median latency {format_ms(base)} -> {format_ms(now)} ({growth}); over the "
        f"{threshold:.0%} threshold and the {format_ms(floor_ms)} floor, beyond both runs' "
        f"spread (baseline p90 {format_ms(p90)}, stdev {format_ms(stdev)}; now stdev "
        f"{format_ms(stdev_now)})"
    )
    cpu_base, cpu_now = a.cpu_median, b.cpu_median
    if cpu_base is None or cpu_now is None or cpu_base <= 0:
        return [Regression(key, "latency", base, now, message)]  # a run without CPU times
    cpu_share, wall_share = cpu_now / cpu_base - 1, now / base - 1
    cpu = f"CPU time {format_ms(cpu_base)} -> {format_ms(cpu_now)} ({cpu_share * 100:+.0f}%)"
    # Waiting, not working: the wall time grew more than twice as much as the CPU time,
    # and the CPU time by no more than load alone moved it here. A program that got
    # slower grows both alike, whatever the load.
    if cpu_share <= cpu_threshold and cpu_share < wall_share / 2:
        busy = (
            f"median latency {format_ms(base)} -> {format_ms(now)} ({growth}) but {cpu}: "
            "the host was busy (the run waited more than it worked); a change of the "
            f"program under {cpu_threshold:.0%} of CPU time cannot be told from the load "
            "by one pair of runs; not failed"
        )
        return [Regression(key, "latency", base, now, busy, alarm=BUSY_HOST)]
    return [Regression(key, "latency", base, now, f"{message}; {cpu}")]


def _numerics(
    key: JobKey,
    old: RunResult,
    current: RunResult,
    sqnr_drop_db: float,
    abs_error_factor: float,
    abs_error_floor: float,
) -> list[Regression]:
    was, now = by_output(old), by_output(current)
    found: list[Regression] = []
    for output, old_rows in was.items():
        new_rows = now.get(output)
        if not new_rows:
            continue
        shared = old_rows.keys() & new_rows.keys()
        # Only like with like: the samples both runs saw, unless they share none.
        olds = [old_rows[s] for s in shared] if shared else list(old_rows.values())
        news = [new_rows[s] for s in shared] if shared else list(new_rows.values())
        name = output[1]

        sqnr_before = min(m.sqnr_db for m in olds)
        sqnr_now = min(m.sqnr_db for m in news)
        drop = min(sqnr_before, SQNR_CEILING_DB) - min(sqnr_now, SQNR_CEILING_DB)
        if drop > sqnr_drop_db:
            found.append(
                Regression(
                    key,
                    "sqnr",
                    sqnr_before,
                    sqnr_now,
                    f"{name}: worst SQNR {_db(sqnr_before)} -> {_db(sqnr_now)} "
                    f"(down {_db(drop) if math.isfinite(drop) else 'to a non-finite output'}, "
                    f"more than {sqnr_drop_db:g} dB)",
                    output=name,
                )
            )

        abs_before = max(m.max_abs for m in olds)
        abs_now = max(m.max_abs for m in news)
        # Growth while the output still sits at float rounding (SQNR over the
        # ceiling) is not drift: an exact baseline against 1e-5 of fp32 rounding.
        rounding = sqnr_now >= SQNR_CEILING_DB
        if abs_now > abs_before * abs_error_factor and abs_now > abs_error_floor and not rounding:
            grew = (
                f"x{abs_now / abs_before:.1f}"
                if abs_before > 0 and math.isfinite(abs_now)
                else "up"
            )
            found.append(
                Regression(
                    key,
                    "max_abs",
                    abs_before,
                    abs_now,
                    f"{name}: worst max abs error {_num(abs_before)} -> {_num(abs_now)} "
                    f"({grew}, more than x{abs_error_factor:g})",
                    output=name,
                )
            )
    return found


def by_output(result: RunResult) -> dict[tuple[int, str], dict[str, OutputMetrics]]:
    """The verdict's metrics keyed by (output index, name), then by sample."""
    table: dict[tuple[int, str], dict[str, OutputMetrics]] = {}
    for row in result.verdict.metrics if result.verdict is not None else ():
        table.setdefault((row.output, row.name), {})[row.sample] = row
    return table


def _db(value: float) -> str:
    if math.isinf(value):
        return "exact" if value > 0 else "-inf dB"
    return f"{value:.1f} dB"


def _num(value: float) -> str:
    return "non-finite" if math.isinf(value) else f"{value:.3g}"
