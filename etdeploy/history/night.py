"""What a farm does with its history after a night: judge tonight against it
(with `--baseline history`), record tonight into it, and draw the trend page.

results.jsonl is written before any of this and stays the source of truth: a
history that cannot be reached or written costs the night's history entry, never
a job's result (`etdeploy history record OUT/results.jsonl` adds it later).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from etdeploy.errors import EtdeployError, UsageError
from etdeploy.history.changes import History, change_points, flaky_jobs
from etdeploy.history.judge import HistoryJudgement, judge_tonight
from etdeploy.history.records import record_of
from etdeploy.history.select import matching
from etdeploy.history.store import RecordOutcome, default_store, open_store
from etdeploy.history.trend import TrendSeries, write_trend_page
from etdeploy.results.result import RunResult

# $ETDEPLOY_HISTORY=off: a farm keeps no history.
OFF = "off"


@dataclass(frozen=True)
class NightHistory:
    store: str | None  # where (shown without a password); None when off
    recorded: RecordOutcome | None
    judgement: HistoryJudgement | None
    trend_page: Path | None
    problem: str | None  # why the night was not recorded, and how to add it later


def history_available() -> bool:
    """Whether the `history` extra (SQLAlchemy, Alembic, ruptures, scipy) is installed."""
    import importlib.util

    return all(
        importlib.util.find_spec(name) is not None
        for name in ("sqlalchemy", "alembic", "ruptures", "scipy")
    )


def farm_history(
    results: Sequence[RunResult],
    *,
    out_dir: Path,
    results_path: Path,
    judge: bool,
    trend_page: Path | None,
    spec_store: str | None = None,
) -> NightHistory:
    """Judge (if asked), record and draw one farm night's results, in the store
    $ETDEPLOY_HISTORY names, else the spec's farm.history (`spec_store`), else the
    default beside OUT."""
    where = default_store(out_dir, spec_store)
    if where == OFF:
        if judge:
            raise UsageError(
                "--baseline history with ETDEPLOY_HISTORY=off",
                "unset ETDEPLOY_HISTORY, or give it the history's path or URL",
            )
        return NightHistory(None, None, None, None, None)
    if not history_available():
        if judge:
            raise UsageError(
                "--baseline history needs the history extra",
                "pip install 'etdeploy[history]'",
            )
        return NightHistory(where, None, None, None, "not recorded: the history extra is "
                            "not installed (pip install 'etdeploy[history]')")  # fmt: skip
    replay = f"add it later with: etdeploy history record {results_path} --store {where}"
    judgement = None
    try:
        with open_store(where) as store:
            history = store.read()
            if judge:
                judgement = judge_tonight(results, history)
            records = [record_of(r) for r in results]
            recorded = store.record(records, source=str(results_path))
            page = None
            if trend_page is not None:
                tonight = [r for r in records if r.job_uid not in {j.job_uid for j in history.jobs}]
                page = draw_trends(history.adding(tonight), trend_page, title="etdeploy trends")
            return NightHistory(store.shown, recorded, judgement, page, None)
    except EtdeployError as exc:
        if judge and judgement is None:
            raise  # asked to judge against a history that cannot be read: bad input
        return NightHistory(where, None, judgement, None, f"not recorded: {exc.message}; {replay}")


def draw_trends(history: History, path: Path, *, title: str) -> Path:
    trends = analyse(history)
    write_trend_page(path, trends, flaky_jobs(history.jobs), title=title)
    return path


def analyse(history: History, match: str | None = None) -> list[TrendSeries]:
    """Every tracked series of the history (those whose name matches `match`),
    with its change points."""
    return [
        TrendSeries(series, tuple(change_points(series)))
        for series in matching(history.series, match)
    ]


def store_location(given: str | None, out_dir: Path | None = None) -> str:
    """The store a command uses: the one given, else $ETDEPLOY_HISTORY, else the
    default beside a farm's OUT (or the current folder)."""
    if given:
        return given
    return default_store(out_dir if out_dir is not None else Path(os.getcwd()) / "_")
