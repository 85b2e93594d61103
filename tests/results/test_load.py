"""load_results: farm streams (JSON lines), farm documents, single results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etdeploy.atomic import write_json
from etdeploy.errors import UsageError
from etdeploy.results import farm_document, load_results
from tests.results.docs import RESULTS, Doc, as_results, on_device


def _jsonl(path: Path, docs: list[Doc]) -> str:
    text = "".join(json.dumps(d) + "\n" for d in docs)
    path.write_text(text)
    return text


def test_truncated_last_line_is_skipped_with_a_warning(
    tmp_path: Path, passed: Doc, infra_error: Doc
) -> None:
    stream = tmp_path / "farm.jsonl"
    text = _jsonl(stream, [passed, infra_error, on_device(passed, "pixel8")])
    # A farm killed while writing its third line.
    cut = text.rindex("\n", 0, len(text) - 1) + 1 + 300
    stream.write_text(text[:cut])
    seen: list[str] = []
    results = load_results(stream, on_warning=seen.append)
    assert [r.status for r in results] == ["passed", "error"]
    assert len(seen) == 1 and "farm.jsonl:3: skipped a truncated last line" in seen[0]
    # Without a callback it is a Python warning, not an exception.
    with pytest.warns(UserWarning, match="truncated last line"):
        assert len(load_results(stream)) == 2


def test_a_bad_line_in_the_middle_is_an_error(tmp_path: Path, passed: Doc) -> None:
    stream = tmp_path / "farm.jsonl"
    text = _jsonl(stream, [passed, passed, passed])
    lines = text.splitlines(keepends=True)
    stream.write_text(lines[0] + lines[1][:100] + "\n" + lines[2])
    with pytest.raises(UsageError, match=r"farm.jsonl:2: not JSON"):
        load_results(stream)


def test_an_invalid_result_names_its_line_and_key(tmp_path: Path, passed: Doc) -> None:
    broken = json.loads(json.dumps(passed))
    broken["latency_ms"]["median"] = None
    stream = tmp_path / "farm.jsonl"
    _jsonl(stream, [passed, broken])
    with pytest.raises(
        UsageError, match=r"farm.jsonl:2: .*latency_ms.median: expected number, got null"
    ):
        load_results(stream)


def test_blank_lines_and_complete_stream(tmp_path: Path, passed: Doc, infra_error: Doc) -> None:
    stream = tmp_path / "farm.ndjson"
    stream.write_text(json.dumps(passed) + "\n\n" + json.dumps(infra_error) + "\n")
    assert [r.status for r in load_results(stream)] == ["passed", "error"]
    # A stream under a .json name is still read line by line.
    renamed = tmp_path / "farm.json"
    renamed.write_text(stream.read_text() + json.dumps(passed)[:200])
    with pytest.warns(UserWarning, match="truncated"):
        assert len(load_results(renamed)) == 2


def test_farm_document_and_single_result(tmp_path: Path, passed: Doc, infra_error: Doc) -> None:
    farm = tmp_path / "farm.json"
    write_json(
        farm_document(
            as_results([passed, infra_error]), started_at="2026-12-03T08:05:00Z", finished_at=None
        ),
        farm,
    )
    assert [r.status for r in load_results(farm)] == ["passed", "error"]
    assert farm.read_text().startswith("{\n  ")  # indented
    single = RESULTS / "passed_xnnpack.json"
    (result,) = load_results(single)
    assert result.job.id == passed["job"]["id"]
    listed = tmp_path / "list.json"
    write_json([passed, infra_error], listed)
    assert len(load_results(listed)) == 2


def test_a_truncated_json_file_is_an_error(tmp_path: Path) -> None:
    single = tmp_path / "result.json"
    single.write_text((RESULTS / "passed_xnnpack.json").read_text()[:500])
    with pytest.raises(UsageError, match=r"result.json: not JSON: .* \(line 24, column 12\)"):
        load_results(single)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read results"):
        load_results(tmp_path / "nope.jsonl")
