"""What the tests make once per etdeploy cache and keep there (tests/conftest.py gives the
test run its own cache, kept between runs): a folder under `cache_dir(kind)` named by
the digest of everything it is made from, so a change to any of it makes a new one.

Made under a lock into a staging folder renamed into place: sessions that share the
cache make it once, and none sees half of it.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

COMPLETE = ".complete"


def digest_of(parts: Iterable[bytes | str]) -> str:
    """A short digest of what a kept folder is made from (file bytes, versions, options)."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()[:16]


def files_of(folder: Path) -> list[bytes | str]:
    """Each file of `folder` (names and bytes, in name order), as digest parts."""
    parts: list[bytes | str] = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        parts += [str(path.relative_to(folder)), path.read_bytes()]
    return parts


def kept(kind: str, key: str, make: Callable[[Path], object]) -> Path:
    """cache_dir(kind)/key, made by `make(folder)` the first time it is asked for."""
    import filelock

    from etdeploy.paths import cache_dir

    parent = cache_dir(kind)
    final = parent / key
    with filelock.FileLock(str(parent / f".{key}.lock")):
        if (final / COMPLETE).is_file():
            return final
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=parent))
        try:
            make(staging)
            (staging / COMPLETE).touch()
            shutil.rmtree(final, ignore_errors=True)  # a half-made one from an older run
            staging.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final
