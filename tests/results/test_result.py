"""RunResult and the etdeploy.result/1 document: what a run writes reads back as
the same typed result, and what the schema accepts the typed reader reads."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etdeploy.atomic import write_json
from etdeploy.errors import RunnerError, UsageError
from etdeploy.numerics import Tolerance, verify
from etdeploy.pipeline import RunJob
from etdeploy.pipeline.run import error_result
from etdeploy.results import RunResult, compare_to_baseline, load_results, validate_result
from tests.results.docs import RESULTS, Doc, as_result

FIXTURES = sorted(path.stem for path in RESULTS.glob("*.json"))

# Optional blocks the fixtures hold as null, which to_json now leaves out
# (absent says "not known", as null did): every other key survives a round trip.
NULL_BLOCKS_OMITTED = {"etdump", "host_check"}


def _leaves(node: object, path: str = "") -> Iterator[tuple[str, object]]:
    """(dotted path, value) of every scalar and empty container in a document."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, f"{path}.{key}" if path else key)
    elif isinstance(node, list) and node:
        for index, value in enumerate(node):
            yield from _leaves(value, f"{path}[{index}]")
    else:
        yield path, node


def _strict_json(doc: dict[str, Any]) -> dict[str, Any]:
    # allow_nan=False: a NaN or Infinity that leaked into a document fails here.
    loaded: dict[str, Any] = json.loads(json.dumps(doc, allow_nan=False))
    return loaded


@pytest.mark.parametrize("name", FIXTURES)
def test_fixtures_round_trip(name: str) -> None:
    doc = json.loads((RESULTS / f"{name}.json").read_text())
    result = RunResult.from_json(doc)
    written = _strict_json(result.to_json())
    validate_result(written)

    before, after = dict(_leaves(doc)), dict(_leaves(written))
    lost = {path for path in before if path not in after}
    assert lost == {p for p in NULL_BLOCKS_OMITTED if p in doc}
    assert all(doc[p] is None for p in lost)
    changed = {
        p: (before[p], after[p]) for p in before.keys() & after.keys() if before[p] != after[p]
    }
    assert changed == {}
    # What is added is the job's backend and quantization where the fixture
    # (written before the job block carried them) has none: null, not invented;
    # an empty error budget and kinds list for a verdict written before them; and
    # no amplifiers, no reasons for untapped values, for a localization before them.
    added = {p: after[p] for p in after.keys() - before.keys()}
    assert set(added) <= {
        "job.backend", "job.quantization", "verdict.budget", "verdict.kinds",
        "localization.amplifiers", "localization.program.why_untapped",
    }  # fmt: skip
    assert all(value in (None, [], {}) for value in added.values())
    # And the document reads back as the same result.
    assert RunResult.from_json(written) == result


def test_unknown_keys_are_tolerated(tmp_path: Path, passed: Doc) -> None:
    # A /1 reader must accept additions: a newer etdeploy's blocks and fields.
    newer = copy.deepcopy(passed)
    newer["energy"] = {"joules": 1.5}
    newer["device"]["thermal_state"] = "nominal"
    newer["verdict"]["metrics"][0]["psnr_db"] = 48.0
    newer["latency_ms"]["p99"] = 2.0
    validate_result(newer)
    stream = tmp_path / "farm.jsonl"
    stream.write_text(json.dumps(newer) + "\n" + json.dumps(passed) + "\n")
    read, same = load_results(stream)
    assert read == same == RunResult.from_json(passed)
    assert "energy" not in read.to_json()  # what this version does not know, it does not write


def _verdict_of(outputs: np.ndarray, reference: np.ndarray) -> Any:
    # The real comparison a run makes (etdeploy.numerics), on one [1, 10] logits output.
    return verify([[outputs]], [[reference]], ["digit_7.png"], ["logits"], Tolerance())


# A fixed [1, 10] classifier output: what is tested is how its metrics are
# written, so the values need only be finite, varied and with one clear argmax.
_LOGITS = np.array([[-4.1, -2.7, 1.9, 3.3, -6.0, -1.2, -8.4, 11.7, -2.2, 2.5]], dtype=np.float32)


def test_an_exact_match_reads_back_as_infinite_sqnr(tmp_path: Path, passed: Doc) -> None:
    verdict = _verdict_of(_LOGITS.copy(), _LOGITS)
    (row,) = verdict.metrics
    assert row.max_abs == 0.0 and row.sqnr_db == math.inf  # in memory: infinite
    exact = dataclasses.replace(as_result(passed), verdict=verdict)
    doc = _strict_json(exact.to_json())
    assert doc["verdict"]["metrics"][0]["sqnr_db"] is None  # JSON has no Infinity
    validate_result(doc)
    write_json(doc, tmp_path / "exact.json")
    (read,) = load_results(tmp_path / "exact.json")
    assert read.verdict is not None and read.verdict.worst is not None
    assert read.verdict.metrics[0].sqnr_db == math.inf
    assert read.verdict.worst.sqnr_db == math.inf
    assert read.verdict.metrics[0].max_abs == 0.0


def test_a_nan_output_reads_back_as_the_worst(tmp_path: Path, passed: Doc) -> None:
    broken_outputs = _LOGITS.copy()
    broken_outputs[0, 3] = np.nan
    verdict = _verdict_of(broken_outputs, _LOGITS)
    (row,) = verdict.metrics
    assert math.isnan(row.max_abs) and math.isnan(row.sqnr_db)  # in memory: NaN
    assert not verdict.passed
    broken = dataclasses.replace(as_result(passed), status="failed", exit_code=1, verdict=verdict)
    doc = _strict_json(broken.to_json())
    metrics = doc["verdict"]["metrics"][0]
    assert metrics["max_abs"] is metrics["sqnr_db"] is metrics["tightest_atol"] is None
    validate_result(doc)
    write_json(doc, tmp_path / "nan.json")
    (read,) = load_results(tmp_path / "nan.json")
    assert read.verdict is not None
    (back,) = read.verdict.metrics
    # Not NaN, which compares false with everything: the worst values there are.
    assert back.sqnr_db == -math.inf and back.max_abs == math.inf
    # So against a run that matched exactly, both numerics regressions show.
    exact = dataclasses.replace(as_result(passed), verdict=_verdict_of(_LOGITS.copy(), _LOGITS))
    assert sorted(r.kind for r in compare_to_baseline([read], [exact])) == [
        "max_abs",
        "sqnr",
        "status",
    ]


def test_an_error_result_has_no_artifact_block(infra_error: Doc) -> None:
    result = RunResult.from_json(infra_error)
    assert result.artifact is None and result.verdict is None and result.latency_ms is None
    assert result.status == "error" and result.is_infrastructure and result.error is not None
    doc = result.to_json()
    for block in ("artifact", "runner", "inputs", "deploy", "latency_ms", "memory", "verdict"):
        assert block not in doc, block
    # The same from the pipeline's own writer, for a runner killed at its deadline.
    written = error_result(
        RunJob(model="digits", backend="xnnpack"),
        "pixel8",
        RunnerError(
            "runner timed out after 30 s", "raise the deadline", device="pixel8", command="run"
        ),
        time.time(),
        job_id="j1",
    )
    assert written.artifact is None
    fresh = _strict_json(written.to_json())
    validate_result(fresh)
    assert "artifact" not in fresh and fresh["job"]["backend"] == "xnnpack"
    assert RunResult.from_json(fresh) == written


def _without_one_key(doc: Doc) -> Iterator[tuple[str, Doc]]:
    """`doc` with one key removed, for every key at every depth (first list item only)."""

    def walk(node: object, path: tuple[str | int, ...]) -> Iterator[tuple[str | int, ...]]:
        if isinstance(node, dict):
            for key, value in node.items():
                yield (*path, key)
                yield from walk(value, (*path, key))
        elif isinstance(node, list) and node:
            yield from walk(node[0], (*path, 0))

    for path in walk(doc, ()):
        changed = copy.deepcopy(doc)
        parent: Any = changed
        for part in path[:-1]:
            parent = parent[part]
        del parent[path[-1]]
        yield ".".join(str(p) for p in path), changed


def _with_every_block(passed: Doc) -> Doc:
    """The passed fixture with the blocks a run adds on request or in a farm:
    a host check, a profile, farm attempts and placement."""
    doc = copy.deepcopy(passed)
    doc["host_check"] = {
        "device_vs_host": copy.deepcopy(passed["verdict"]),
        "host_vs_reference": copy.deepcopy(passed["verdict"]),
    }
    event = {
        "name": "DELEGATE_CALL", "delegated": True, "backend": "XnnpackBackend",
        "op_types": ["aten.linear.default"], "module": "fc1", "count": 20,
        "p50_ms": 0.002, "avg_ms": 0.0021, "max_ms": 0.004, "share": 0.6,
    }  # fmt: skip
    doc["profile"] = {
        "executions_ms": {"count": 20, "median": 0.0033},
        "events": [event],
        "delegate_calls": [event],
        "etrecord": True,
    }
    # As etdeploy.farm records them: a dropped link, retried after a backoff.
    doc["attempts"] = [
        {"attempt": 1, "job_id": "a1", "status": "error", "started_at": passed["started_at"],
         "seconds": 3.2, "error": {"kind": "TransportError", "message": "adb: device offline",
         "infrastructure": True, "retryable": True, "device": "local"}, "backoff_s": 1.0},
        {"attempt": 2, "job_id": passed["job"]["id"], "status": "passed",
         "started_at": passed["started_at"], "seconds": 2.9},
    ]  # fmt: skip
    doc["farm"] = {
        "key": "digits|xnnpack||local",
        "shard": {"index": 0, "count": 1},
        "spec": "/srv/nightly.toml",
    }
    return doc


def test_what_the_schema_accepts_reads(passed: Doc, infra_error: Doc) -> None:
    """validate_result is the gate of load_results: each key the typed reader needs
    is one the schema requires, so no valid document fails to read."""
    full = _with_every_block(passed)
    validate_result(full)
    assert RunResult.from_json(full).to_json()["attempts"] == full["attempts"]
    unreadable = []
    for doc in (full, infra_error):
        for path, changed in _without_one_key(doc):
            try:
                validate_result(changed)
            except UsageError:
                continue
            try:
                RunResult.from_json(changed)
            except (TypeError, ValueError) as exc:
                unreadable.append(f"{path}: {exc}")
    assert unreadable == []


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("deploy",), {"bytes_sent": 1}, "deploy.files_sent: is missing"),
        (("profile",), {"events": []}, "profile.executions_ms: is missing"),
        (("attempts",), [{"attempt": 1}], "attempts[0].job_id: is missing"),
        (("farm",), {"key": "k", "shard": 1, "spec": "s"}, "farm.shard: expected object"),
    ],
)
def test_blocks_the_reader_needs_are_checked(
    passed: Doc, path: tuple[str, ...], value: object, expected: str
) -> None:
    doc = copy.deepcopy(passed)
    doc[path[0]] = value
    with pytest.raises(UsageError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        validate_result(doc)
