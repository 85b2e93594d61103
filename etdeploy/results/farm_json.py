"""The farm document (etdeploy.farm/1, farm.json) built from typed results, and
the counts by status every farm report shows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import etdeploy
from etdeploy.jsonvalue import JsonArray, JsonObject
from etdeploy.results.jobs import JobKey, NotRun, job_key, summarize, unique
from etdeploy.results.result import RunResult
from etdeploy.results.schema import FARM_SCHEMA_ID


def farm_document(
    results: Sequence[RunResult],
    *,
    started_at: str,
    finished_at: str | None,
    matrix: Sequence[JobKey | Mapping[str, str | None]] | None = None,
    not_run: Sequence[NotRun] = (),
) -> JsonObject:
    """The etdeploy.farm/1 document of `results`, as written to farm.json.

    `matrix` is the planned jobs (JobKey, or mappings with model, backend,
    quantization and device); by default the keys of `results`. `not_run`: the
    jobs without a result, listed under "skipped" (cannot run, not planned) or
    "not_run" (planned, never reported)."""
    if matrix is None:
        matrix = unique(job_key(r) for r in results)
    planned: JsonArray = [m.to_json() if isinstance(m, JobKey) else {**m} for m in matrix]
    return {
        "schema": FARM_SCHEMA_ID,
        "etdeploy": etdeploy.__version__,
        "started_at": started_at,
        "finished_at": finished_at,
        "matrix": planned,
        "results": [r.to_json() for r in results],
        "skipped": [n.to_json() for n in not_run if n.skipped],
        "not_run": [n.to_json() for n in not_run if not n.skipped],
        "summary": {**summarize(results)},
    }
