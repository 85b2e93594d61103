"""etdeploy.jsontext: a document's JSON text is the document, its outer levels are
indented for a reader, and what lies deeper is one line per item."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etdeploy.jsontext import LEVELS, dumps

RESULTS = sorted((Path(__file__).parent / "data" / "results").glob("*.json"))


@pytest.mark.parametrize("path", RESULTS[:6], ids=lambda p: p.stem)
def test_a_stored_result_reads_back_as_the_same_document(path: Path) -> None:
    document = json.loads(path.read_text())
    text = dumps(document)
    assert json.loads(text) == document
    assert text.endswith("}\n")


def test_outer_keys_have_a_line_each_and_a_per_sample_list_a_line_a_sample() -> None:
    document = {
        "status": "passed",
        "verdict": {"metrics": [{"sample": f"s{i}", "error": i / 10} for i in range(3)]},
        "names": ["a", "b"],
        "empty": {},
    }
    lines = dumps(document).splitlines()
    assert lines[1] == '  "status": "passed",'
    assert '      {"sample": "s1", "error": 0.1},' in lines
    assert '  "names": ["a", "b"],' in lines
    assert '  "empty": {}' in lines
    assert len(lines) == 12


def test_values_json_cannot_hold_are_written_as_their_text() -> None:
    assert json.loads(dumps({"path": Path("/tmp/x")})) == {"path": "/tmp/x"}


def test_deep_values_are_one_line() -> None:
    deep: dict[str, object] = {"leaf": 1}
    for _ in range(LEVELS + 2):
        deep = {"k": deep}
    assert len(dumps(deep).splitlines()) == 2 * LEVELS + 1
