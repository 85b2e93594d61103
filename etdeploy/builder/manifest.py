"""model.pte.json: what was built, from what, and what the backend did with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from etdeploy.atomic import write_json

SCHEMA = "etdeploy.manifest/1"


def manifest_path(pte: Path) -> Path:
    return pte.with_name(pte.name + ".json")


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    write_json(data, path)


def read_manifest(pte: Path) -> dict[str, Any] | None:
    path = manifest_path(pte)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    return data
