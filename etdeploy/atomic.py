"""Every file etdeploy writes goes through here: a temporary name in the same
folder, fsync, then rename, so a killed process never leaves half a file under
the real name."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_COPY_CHUNK = 1 << 20


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


def json_text(doc: object) -> str:
    """`doc` as indented JSON text ending with a newline; a value JSON cannot hold (a
    Path) is written as its str()."""
    import json

    return json.dumps(doc, indent=2, default=str) + "\n"


def write_json(doc: object, path: Path) -> None:
    """`doc` as indented JSON (json_text), written atomically."""
    atomic_write(Path(path), json_text(doc).encode("utf-8"))


def atomic_copy_all(pairs: Sequence[tuple[Path, Path]]) -> None:
    """Copy each (source, target), all or nothing: every copy goes to a temporary
    name beside its target and is fsynced, and only when all of them are whole are
    they renamed into place. A failure on the way (a full disk) removes every
    temporary file and leaves the targets as they were."""
    staged: list[tuple[str, Path]] = []
    try:
        for source, target in pairs:
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
            staged.append((tmp, target))
            with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
                shutil.copyfileobj(src, out, _COPY_CHUNK)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o644)
        for tmp, target in staged:
            os.replace(tmp, target)
    except BaseException:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
        raise


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object stored at `path`; None when it is missing, unreadable, cut short,
    not JSON or not an object (a cache entry to work out again). Its values are Any
    still: the cache readers of pipeline/llm/lm_export.py (being reworked on another
    branch) index it directly; typing it JsonObject is the next step."""
    import json

    try:
        document = json.loads(Path(path).read_bytes())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def keep_json(path: Path, document: Mapping[str, object]) -> None:
    """`document` written atomically as a cache entry: one that cannot be written (a
    read-only or full disk, a value JSON cannot hold) costs the next run the work, never
    this one's result."""
    import contextlib
    import json

    with contextlib.suppress(OSError, TypeError, ValueError):
        atomic_write(Path(path), json.dumps(document).encode("utf-8"))
