"""The farm's reports and its exit code.

OUT/farm.json (etdeploy.farm/1) is always written; JSON, JUnit and HTML copies
where asked; a baseline's regressions go into them and into the exit code, and
the cells that cannot run are listed in each as skipped (never in the exit
code). The formats themselves are etdeploy.report's: this module only chooses
what to write. write_night adds the history (etdeploy.history.night): tonight
judged against it with `--baseline history`, then recorded into it, after
results.jsonl and before the reports that name its alarms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_INFRA, EXIT_OK
from etdeploy.report.baseline import Regression
from etdeploy.report.common import JobKey, NotRun
from etdeploy.report.result import RunResult

if TYPE_CHECKING:
    from etdeploy.farm.scheduler import FarmOutcome
    from etdeploy.farm.spec import SkippedJob
    from etdeploy.history.night import NightHistory

FARM_DOC_NAME = "farm.json"
# `--baseline history`: judge against the farm's history instead of one file.
HISTORY_BASELINE = "history"


@dataclass(frozen=True)
class NightReport:
    """What a night's reports said: the regressions (they fail the farm), the
    single-night outliers against the history (reported only), and the history's
    part (None when the farm keeps none)."""

    regressions: list[Regression]
    outliers: list[Regression]
    history: NightHistory | None


def exit_code(results: Sequence[RunResult], regressions: Sequence[Regression] = ()) -> int:
    """0 every job passed; 1 a job failed a check (numerics, size, or a regression
    against the baseline); else 2 a job had bad input; else 3 only infrastructure
    errors. A failed check outranks errors: it is the news a nightly run exists for.
    Skipped cells (combinations that cannot run) have no result and do not count."""
    statuses = [r.status for r in results]
    if "failed" in statuses or any(r.is_regression for r in regressions):
        return EXIT_CHECK_FAILED
    errors = [r for r in results if r.status == "error"]
    if any(not r.is_infrastructure for r in errors):
        return EXIT_BAD_INPUT
    if errors:
        return EXIT_INFRA
    return EXIT_OK


def skipped_entries(skipped: Sequence[SkippedJob]) -> list[NotRun]:
    """Skipped cells as the report package lists them."""
    return [
        NotRun(JobKey(c.model, c.backend, c.quantize, c.device), c.reason, skipped=True)
        for c in skipped
    ]


def write_reports(
    outcome: FarmOutcome,
    *,
    json_path: Path | None = None,
    junit_path: Path | None = None,
    html_path: Path | None = None,
    baseline_path: Path | None = None,
) -> list[Regression]:
    """OUT/farm.json always, and the reports asked for; returns the regressions
    against the baseline (empty without one)."""
    from etdeploy.report import compare_to_baseline, load_results

    baseline = load_results(baseline_path) if baseline_path is not None else None
    regressions = (
        compare_to_baseline(outcome.results, baseline, memory_growth=outcome.spec.memory_growth)
        if baseline is not None
        else []
    )
    return _write(outcome, regressions, [], json_path, junit_path, html_path, baseline, None)


def write_night(
    outcome: FarmOutcome,
    *,
    json_path: Path | None = None,
    junit_path: Path | None = None,
    html_path: Path | None = None,
    baseline: str | None = None,
) -> NightReport:
    """The night's history (judged with `baseline` "history", recorded unless
    $ETDEPLOY_HISTORY is off; its trend page beside --html), then write_reports'
    reports with every alarm in them. `baseline` otherwise names a results file."""
    from etdeploy.history.night import farm_history
    from etdeploy.report import compare_to_baseline, load_results

    judge = baseline == HISTORY_BASELINE
    old = load_results(Path(baseline)) if baseline is not None and not judge else None
    trend_page = html_path.with_name(f"{html_path.stem}-trend.html") if html_path else None
    history = farm_history(outcome.results, out_dir=outcome.out_dir,
                           results_path=outcome.results_path, judge=judge,
                           trend_page=trend_page, spec_store=outcome.spec.history)  # fmt: skip
    regressions: list[Regression] = []
    outliers: list[Regression] = []
    if old is not None:
        regressions = compare_to_baseline(
            outcome.results, old, memory_growth=outcome.spec.memory_growth
        )
    if history.judgement is not None:
        regressions, outliers = (
            list(history.judgement.regressions),
            list(history.judgement.outliers),
        )
    page = history.trend_page
    _write(outcome, regressions, outliers, json_path, junit_path, html_path, old, page)
    return NightReport(regressions, outliers, history)


def _write(
    outcome: FarmOutcome,
    regressions: list[Regression],
    outliers: list[Regression],
    json_path: Path | None,
    junit_path: Path | None,
    html_path: Path | None,
    baseline: Sequence[RunResult] | None,
    trend_page: Path | None,
) -> list[Regression]:
    from etdeploy.report import farm_document, write_html, write_json, write_junit

    skipped = skipped_entries(outcome.skipped)
    doc = farm_document(
        outcome.results,
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
        matrix=[job.key_json() for job in outcome.planned],
        not_run=skipped,
    )
    doc["shard"] = {"index": outcome.shard[0], "count": outcome.shard[1]}
    doc["spec"] = str(outcome.spec.path)
    if regressions or outliers:
        # Each alarm says what raised it: "change point", "outlier", or null (one file).
        doc["regressions"] = [r.to_json() for r in [*regressions, *outliers]]
    write_json(doc, outcome.out_dir / FARM_DOC_NAME)
    if json_path is not None:
        write_json(doc, json_path)
    alarms = [*regressions, *outliers]
    if junit_path is not None:
        write_junit(outcome.results, junit_path, regressions=alarms, not_run=skipped)
    if html_path is not None:
        links = [("Trends over the nights", trend_page.name)] if trend_page is not None else []
        write_html(outcome.results, html_path, baseline=baseline, regressions=alarms,
                   not_run=skipped, links=links)  # fmt: skip
    return regressions
