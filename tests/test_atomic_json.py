"""etdeploy.atomic.json_text: a document's JSON text (json's own writer, indented) reads
back as the document; what JSON cannot hold is written as its text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etdeploy.atomic import json_text, write_json

RESULTS = sorted((Path(__file__).parent / "data" / "results").glob("*.json"))


@pytest.mark.parametrize("path", RESULTS[:6], ids=lambda p: p.stem)
def test_a_stored_result_reads_back_as_the_same_document(path: Path, tmp_path: Path) -> None:
    document = json.loads(path.read_text())
    write_json(document, tmp_path / "out.json")
    text = (tmp_path / "out.json").read_text()
    assert json.loads(text) == document and text.endswith("}\n")


def test_values_json_cannot_hold_are_written_as_their_text() -> None:
    assert json.loads(json_text({"path": Path("/tmp/x")})) == {"path": "/tmp/x"}
