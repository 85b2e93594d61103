"""The etdeploy.result/1 and etdeploy.farm/1 schemas against real documents and
documents broken one key at a time."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from etdeploy.errors import UsageError
from etdeploy.results import (
    FARM_SCHEMA,
    RESULT_SCHEMA,
    JobKey,
    NotRun,
    farm_document,
    job_key,
    summarize,
    validate_farm,
    validate_result,
)
from tests.results.docs import (
    Doc,
    as_result,
    as_results,
    input_error,
    numeric_failure,
    on_device,
    size_failure,
)


def test_real_results_are_valid(passed: Doc, passed_portable: Doc, infra_error: Doc) -> None:
    for doc in (passed, passed_portable, infra_error):
        validate_result(doc)


def test_derived_statuses_are_valid(passed: Doc, infra_error: Doc) -> None:
    for doc in (numeric_failure(passed), size_failure(passed), input_error(infra_error)):
        validate_result(doc)


def test_schemas_are_json() -> None:
    # The dicts are published as JSON Schema; they must survive a round trip.
    for schema in (RESULT_SCHEMA, FARM_SCHEMA):
        assert json.loads(json.dumps(schema)) == schema
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def _set(path: str, value: Any) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        *parents, last = path.split(".")
        for part in parents:
            doc = doc[int(part)] if part.isdigit() else doc[part]
        doc[int(last) if last.isdigit() else last] = value

    return change


def _delete(path: str) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        *parents, last = path.split(".")
        for part in parents:
            doc = doc[int(part)] if part.isdigit() else doc[part]
        del doc[last]

    return change


BROKEN_PASSED = [
    (_set("latency_ms.median", "fast"), "latency_ms.median: expected number, got string"),
    (_set("latency_ms.iterations", [0.1, -1.0]), "latency_ms.iterations[1]: must be >= 0"),
    (_delete("verdict"), "verdict: is missing (status is passed)"),
    (_set("exit_code", 1), "exit_code: must be 0, got 1 (status is passed)"),
    (_set("verdict.passed", False), "verdict.passed: must be true, got false (status is passed)"),
    (_set("status", "ok"), 'status: must be one of "passed", "failed", "error", got "ok"'),
    (_set("schema", "etdeploy.result/3"), 'schema is "etdeploy.result/3"'),
    (_delete("verdict.metrics.3.sqnr_db"), "verdict.metrics[3].sqnr_db: is missing"),
    (
        _set("verdict.metrics.2.allclose", 1),
        "verdict.metrics[2].allclose: expected boolean, got integer",
    ),
    (_set("job.iterations", True), "job.iterations: expected integer, got boolean"),
    (_set("artifact.sha256", "abc"), 'artifact.sha256: "abc" does not match'),
    (_set("artifact.delegation.share", 1.5), "artifact.delegation.share: must be <= 1"),
    (_set("size.verdicts.1.status", "big"), "size.verdicts[1].status: must be one of"),
    (_set("started_at", "yesterday"), 'started_at: "yesterday" does not match'),
    (_set("device", "local"), "device: expected object, got string"),
    (_set("error", {"kind": "X"}), "error.message: is missing"),
]


@pytest.mark.parametrize(("change", "expected"), BROKEN_PASSED, ids=[e for _, e in BROKEN_PASSED])
def test_a_broken_key_is_named(passed: Doc, change: Callable[[Doc], None], expected: str) -> None:
    change(passed)
    with pytest.raises(UsageError) as caught:
        validate_result(passed)
    assert expected in str(caught.value)
    assert caught.value.exit_code == 2
    assert caught.value.hint


def test_error_results_must_say_who_is_at_fault(infra_error: Doc) -> None:
    infra_error["error"]["infrastructure"] = False
    with pytest.raises(UsageError, match=r"error.infrastructure: must be true.*exit code 3"):
        validate_result(infra_error)
    bad_input = input_error(infra_error)
    bad_input["error"]["infrastructure"] = True
    with pytest.raises(UsageError, match=r"error.infrastructure: must be false.*exit code 2"):
        validate_result(bad_input)
    no_error = copy.deepcopy(infra_error)
    del no_error["error"]
    with pytest.raises(UsageError, match=r"error: is missing \(status is error\)"):
        validate_result(no_error)


def test_not_an_object() -> None:
    with pytest.raises(UsageError, match=r"\(top level\): expected object, got array"):
        validate_result([1, 2])


def test_summarize_counts_errors_by_fault(passed: Doc, infra_error: Doc) -> None:
    results = [
        passed,
        numeric_failure(passed),
        size_failure(passed),
        infra_error,
        input_error(infra_error),
    ]
    assert summarize(as_results(results)) == {
        "total": 5, "passed": 1, "failed": 2, "errors": 2, "infrastructure_errors": 1,
    }  # fmt: skip
    assert summarize([]) == {
        "total": 0,
        "passed": 0,
        "failed": 0,
        "errors": 0,
        "infrastructure_errors": 0,
    }


def test_farm_document_round_trip(passed: Doc, passed_portable: Doc, infra_error: Doc) -> None:
    results = [passed, on_device(passed, "pixel8"), passed_portable, infra_error]
    doc = farm_document(
        as_results(results), started_at="2026-12-03T08:05:00Z", finished_at="2026-12-03T08:06:00Z"
    )
    validate_farm(json.loads(json.dumps(doc)))
    assert doc["summary"]["passed"] == 3 and doc["summary"]["infrastructure_errors"] == 1
    assert [m["device"] for m in doc["matrix"]] == ["local", "pixel8", "local", "local"]
    assert doc["matrix"][0] == job_key(as_result(passed)).to_json()
    assert doc["matrix"][2]["backend"] == "portable"


def test_farm_summary_must_match_results(passed: Doc, infra_error: Doc) -> None:
    doc = farm_document(
        as_results([passed, infra_error]), started_at="2026-12-03T08:05:00Z", finished_at=None
    )
    doc["summary"]["errors"] = 0
    with pytest.raises(UsageError, match=r"summary.errors: is 0, but the results count 1"):
        validate_farm(doc)


def test_farm_results_are_checked_as_results(passed: Doc) -> None:
    doc = farm_document([as_result(passed)], started_at="2026-12-03T08:05:00Z", finished_at=None)
    doc["results"][0] = copy.deepcopy(passed)
    doc["results"][0]["latency_ms"]["n"] = -1
    with pytest.raises(UsageError, match=r"results\[0\].latency_ms.n: must be >= 0"):
        validate_farm(doc)
    doc = farm_document([as_result(passed)], started_at="2026-12-03T08:05:00Z", finished_at=None)
    del doc["matrix"][0]["device"]
    with pytest.raises(UsageError, match=r"matrix\[0\].device: is missing"):
        validate_farm(doc)


def test_jobs_without_a_result_are_listed_with_their_reason(passed: Doc) -> None:
    cannot = NotRun(JobKey("digits", "portable", "int8", "local"), "no quantizer", skipped=True)
    lost = NotRun(JobKey("digits", "xnnpack", None, "pixel8"), "no result: shard 1 of 2")
    doc = farm_document([as_result(passed)], started_at="2026-12-03T08:05:00Z", finished_at=None,
                        not_run=[cannot, lost])  # fmt: skip
    validate_farm(json.loads(json.dumps(doc)))
    assert doc["skipped"] == [{"model": "digits", "backend": "portable", "quantization": "int8",
                               "device": "local", "reason": "no quantizer"}]  # fmt: skip
    assert doc["not_run"] == [{**lost.key.to_json(), "reason": "no result: shard 1 of 2"}]
    assert [NotRun.from_json(d, skipped=True) for d in doc["skipped"]] == [cannot]
    # Additions to /1: a document without them is still valid; a listed job needs its reason.
    del doc["skipped"], doc["not_run"]
    validate_farm(doc)
    doc["skipped"] = [{**cannot.key.to_json()}]
    with pytest.raises(UsageError, match=r"skipped\[0\].reason: is missing"):
        validate_farm(doc)


def test_a_result_written_before_cpu_times_reads_and_writes_back_unchanged() -> None:
    """tests/data/results were written by a runner that measured no CPU time: such a
    result still validates, reads with no CPU median, and writes back the same bytes;
    one with CPU times validates too (an addition to result/2, no new version)."""
    from etdeploy.pipeline.execute import latency_of
    from etdeploy.results.result import RunResult
    from tests.results.docs import load_sample

    old = load_sample("passed_xnnpack")
    assert "cpu_median" not in old["latency_ms"]
    validate_result(old)
    result = RunResult.from_json(old)
    assert result.latency_ms is not None and result.latency_ms.cpu_median is None
    assert result.to_json()["latency_ms"] == old["latency_ms"]  # the same block back
    newer = copy.deepcopy(old)
    times = old["latency_ms"]["iterations"]
    cpu = [t * 0.9 for t in times]
    newer["latency_ms"] = latency_of(old["latency_ms"]["load"], times, cpu).to_json()
    validate_result(newer)
    assert RunResult.from_json(newer).latency_ms.cpu_median == pytest.approx(  # type: ignore[union-attr]
        0.9 * RunResult.from_json(old).latency_ms.median  # type: ignore[union-attr]
    )
    broken = copy.deepcopy(newer)
    broken["latency_ms"]["cpu_median"] = -1.0
    with pytest.raises(UsageError, match="cpu_median"):
        validate_result(broken)
