"""The records of a run: the typed result (RunResult, etdeploy.results.result) and its
parts, their versioned JSON documents (etdeploy.result/2 and the farm's etdeploy.farm/1)
with the schema and validator that check them, the key that matches a job across runs,
and the comparison with a baseline run.

Every stage adds to a RunResult and every report format (etdeploy.report) reads one;
nothing here runs a job, renders or prints. Cheap to import: the CLI imports this
package at start-up.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from etdeploy.errors import UsageError
from etdeploy.lazy import lazy_exports

if TYPE_CHECKING:
    from etdeploy.jsonvalue import JsonObject
    from etdeploy.results.baseline import Regression, compare_to_baseline
    from etdeploy.results.farm_json import farm_document
    from etdeploy.results.jobs import JobKey, NotRun, job_key, summarize
    from etdeploy.results.result import RESULT_SCHEMA_ID, RunResult
    from etdeploy.results.schema import (
        FARM_SCHEMA,
        FARM_SCHEMA_ID,
        RESULT_SCHEMA,
        validate_farm,
        validate_result,
    )

# What this package exports, from the module that defines it: loaded on first use
# (etdeploy.lazy), so a run that only builds a result (etdeploy.results.result, on every
# warm run) does not import the schema and its validator, or the baseline.
_AT = "etdeploy.results."
_EXPORTS = {
    "Regression": _AT + "baseline", "compare_to_baseline": _AT + "baseline",
    "JobKey": _AT + "jobs", "NotRun": _AT + "jobs", "job_key": _AT + "jobs",
    "summarize": _AT + "jobs",
    "RESULT_SCHEMA_ID": _AT + "result", "RunResult": _AT + "result",
    "FARM_SCHEMA": _AT + "schema", "FARM_SCHEMA_ID": _AT + "schema", "RESULT_SCHEMA": _AT + "schema",
    "farm_document": _AT + "farm_json",
    "validate_farm": _AT + "schema", "validate_result": _AT + "schema",
}  # fmt: skip
__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "FARM_SCHEMA",
    "FARM_SCHEMA_ID",
    "RESULT_SCHEMA",
    "RESULT_SCHEMA_ID",
    "JobKey",
    "NotRun",
    "Regression",
    "RunResult",
    "compare_to_baseline",
    "farm_document",
    "job_key",
    "load_results",
    "summarize",
    "validate_farm",
    "validate_result",
]

_JSONL_SUFFIXES = (".jsonl", ".ndjson")


def load_results(path: Path, *, on_warning: Callable[[str], None] | None = None) -> list[RunResult]:
    """The results in `path`, each document validated, then read as a RunResult.

    `path` is a farm's JSON-lines stream (.jsonl/.ndjson: one result per line;
    a line holding a farm document adds its results), a farm document
    (etdeploy.farm/1), a single result (etdeploy.result/2) or a JSON list of
    results. A last JSON-lines line that does not parse is what a killed farm
    leaves behind: it is skipped and reported through `on_warning` (default:
    warnings.warn); a bad line anywhere else is an error.

    Raises UsageError (exit 2) naming the file, the line where it applies, and
    the first bad key.
    """
    path = Path(path)
    warn = on_warning or (lambda text: warnings.warn(text, stacklevel=3))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"cannot read results {path}: {exc}", "pass a file written by etdeploy"
        ) from None
    if path.suffix.lower() in _JSONL_SUFFIXES:
        return _load_lines(path, text, warn)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        # A farm stream saved under another name still reads, line by line; an
        # indented document cut short does not (its first line is not JSON).
        if _first_line_is_json(text):
            return _load_lines(path, text, warn)
        raise UsageError(
            f"{path}: not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            "a result file cut short by a killed run cannot be read; run the job again",
        ) from None
    return _results_of(doc, str(path))


def _first_line_is_json(text: str) -> bool:
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        return isinstance(json.loads(first), dict)
    except json.JSONDecodeError:
        return False


def _load_lines(path: Path, text: str, warn: Callable[[str], None]) -> list[RunResult]:
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    results: list[RunResult] = []
    for position, (number, line) in enumerate(lines):
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            if position == len(lines) - 1:
                warn(
                    f"{path}:{number}: skipped a truncated last line ({len(line)} characters; "
                    f"{exc.msg}), as a killed run leaves it; {len(results)} result(s) read"
                )
                break
            raise UsageError(
                f"{path}:{number}: not JSON: {exc.msg} (column {exc.colno})",
                "only the last line of a results stream may be cut short; this file is damaged",
            ) from None
        results += _results_of(doc, f"{path}:{number}")
    return results


def _results_of(doc: object, where: str) -> list[RunResult]:
    """The results of one parsed document (a list, a farm document or a result),
    each validated; the schema requires what RunResult.from_json needs, so a
    document that validates reads."""
    from etdeploy.results.result import RunResult
    from etdeploy.results.schema import FARM_SCHEMA_ID, validate_farm, validate_result

    try:
        if isinstance(doc, list):
            for i, item in enumerate(doc):
                _validate_item(item, i)
            return [RunResult.from_json(cast("JsonObject", item)) for item in doc]
        if isinstance(doc, dict) and doc.get("schema") == FARM_SCHEMA_ID:
            validate_farm(doc)
            return [RunResult.from_json(item) for item in doc["results"]]
        validate_result(doc)
        return [RunResult.from_json(cast("JsonObject", doc))]
    except UsageError as exc:
        raise UsageError(f"{where}: {exc.message}", exc.hint) from None


def _validate_item(item: object, index: int) -> None:
    from etdeploy.results.schema import validate_result

    try:
        validate_result(item)
    except UsageError as exc:
        raise UsageError(f"item {index}: {exc.message}", exc.hint) from None
