"""The farm's reports and its exit code.

OUT/farm.json (etdeploy.farm/1) is always written; JSON, JUnit and HTML copies
where asked; a baseline's regressions go into them and into the exit code, and
the cells that cannot run are listed in each as skipped (never in the exit
code). The formats themselves are etdeploy.report's: this module only chooses
what to write.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_INFRA, EXIT_OK
from etdeploy.report.baseline import Regression
from etdeploy.report.common import JobKey, NotRun
from etdeploy.report.result import RunResult

if TYPE_CHECKING:
    from etdeploy.farm.scheduler import FarmOutcome
    from etdeploy.farm.spec import SkippedJob

FARM_DOC_NAME = "farm.json"


def exit_code(results: Sequence[RunResult], regressions: Sequence[Regression] = ()) -> int:
    """0 every job passed; 1 a job failed a check (numerics, size, or a regression
    against the baseline); else 2 a job had bad input; else 3 only infrastructure
    errors. A failed check outranks errors: it is the news a nightly run exists for.
    Skipped cells (combinations that cannot run) have no result and do not count."""
    statuses = [r.status for r in results]
    if "failed" in statuses or regressions:
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
    from etdeploy.report import (
        compare_to_baseline,
        farm_document,
        load_results,
        write_html,
        write_json,
        write_junit,
    )

    baseline = load_results(baseline_path) if baseline_path is not None else None
    regressions = (
        compare_to_baseline(outcome.results, baseline, memory_growth=outcome.spec.memory_growth)
        if baseline is not None
        else []
    )
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
    write_json(doc, outcome.out_dir / FARM_DOC_NAME)
    if json_path is not None:
        write_json(doc, json_path)
    if junit_path is not None:
        write_junit(outcome.results, junit_path, regressions=regressions, not_run=skipped)
    if html_path is not None:
        write_html(
            outcome.results, html_path, baseline=baseline, regressions=regressions, not_run=skipped
        )
    return regressions
