"""The farm's reports and its exit code.

OUT/farm.json (etdeploy.farm/1) is always written; JSON, JUnit and HTML copies
where asked; a baseline's regressions go into them and into the exit code, and
the cells that cannot run are listed in each as skipped (never in the exit
code). This module decides what the reports say (the NightReport); the JUnit and
HTML formats are etdeploy.report's, written by the command line. write_night adds
the history (etdeploy.history.night): tonight judged against it with `--baseline
history`, then recorded into it, after results.jsonl and before the reports that
name its alarms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.atomic import write_json
from etdeploy.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_INFRA, EXIT_OK
from etdeploy.history.night import farm_history
from etdeploy.results import compare_to_baseline, farm_document, load_results
from etdeploy.results.baseline import Regression
from etdeploy.results.jobs import JobKey, NotRun
from etdeploy.results.result import RunResult

if TYPE_CHECKING:
    from etdeploy.farm.scheduler import FarmOutcome
    from etdeploy.farm.spec import SkippedJob
    from etdeploy.history.night import NightHistory

FARM_DOC_NAME = "farm.json"
# `--baseline history`: judge against the farm's history instead of one file.
HISTORY_BASELINE = "history"


@dataclass(frozen=True)
class NightReport:
    """What a night's reports said: the regressions (they fail the farm), what is
    told and not failed (the single-night outliers against the history, a one-file
    baseline's busy host), and the history's part (None when the farm keeps none)."""

    regressions: list[Regression]
    outliers: list[Regression]
    history: NightHistory | None
    # What the JUnit and HTML reports take beside the results: the baseline run read
    # from a file (None with none or with the history), the cells listed as
    # skipped, and the history's trend page (None when none was written).
    baseline: Sequence[RunResult] | None = None
    not_run: Sequence[NotRun] = ()
    trend_page: Path | None = None

    @property
    def alarms(self) -> list[Regression]:
        """Every alarm the reports name: the regressions, then the outliers."""
        return [*self.regressions, *self.outliers]


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


def trend_page_beside(html_path: Path | None) -> Path | None:
    """Where the history's trend page goes: beside the --html report, as REPORT-trend.html."""
    return html_path.with_name(f"{html_path.stem}-trend.html") if html_path else None


def write_night(
    outcome: FarmOutcome,
    *,
    json_path: Path | None = None,
    baseline: str | None = None,
    trend_page: Path | None = None,
) -> NightReport:
    """The night's history (judged with `baseline` "history", recorded unless
    $ETDEPLOY_HISTORY is off; its trend page at `trend_page`), then OUT/farm.json (and
    a copy at `json_path`) with every alarm in it. `baseline` otherwise names a results
    file. The JUnit and HTML reports are the command line's to write, from the
    NightReport returned."""
    judge = baseline == HISTORY_BASELINE
    old = load_results(Path(baseline)) if baseline is not None and not judge else None
    history = farm_history(outcome.results, out_dir=outcome.out_dir,
                           results_path=outcome.results_path, judge=judge,
                           trend_page=trend_page, spec_store=outcome.spec.history)  # fmt: skip
    regressions: list[Regression] = []
    outliers: list[Regression] = []
    if old is not None:
        found = compare_to_baseline(outcome.results, old, memory_growth=outcome.spec.memory_growth)
        # A busy host's latency is told beside the regressions, not failed.
        regressions = [r for r in found if r.is_regression]
        outliers = [r for r in found if not r.is_regression]
    if history.judgement is not None:
        regressions, outliers = (
            list(history.judgement.regressions),
            list(history.judgement.outliers),
        )
    night = NightReport(
        regressions, outliers, history, old, skipped_entries(outcome.skipped), history.trend_page
    )
    _write_documents(outcome, night, json_path)
    return night


def _write_documents(outcome: FarmOutcome, night: NightReport, json_path: Path | None) -> None:
    doc = farm_document(
        outcome.results,
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
        matrix=[job.key_json() for job in outcome.planned],
        not_run=night.not_run,
    )
    doc["shard"] = {"index": outcome.shard[0], "count": outcome.shard[1]}
    doc["spec"] = str(outcome.spec.path)
    if night.alarms:
        # Each alarm says what raised it: "change point", "outlier", or null (one file).
        doc["regressions"] = [r.to_json() for r in night.alarms]
    write_json(doc, outcome.out_dir / FARM_DOC_NAME)
    if json_path is not None:
        write_json(doc, json_path)
