"""Every file etdeploy writes goes through here: a temporary name in the same
folder, fsync, then rename, so a killed process never leaves half a file under
the real name."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp makes 0600; results and reports are for sharing (CI artefacts).
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(doc: Any, path: Path) -> None:
    """`doc` as indented JSON, written atomically."""
    atomic_write(Path(path), (json.dumps(doc, indent=2, default=str) + "\n").encode("utf-8"))
