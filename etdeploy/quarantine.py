"""The cache is verified, never trusted: an entry that fails its check is moved aside.

Every cached thing a run reuses carries the sha256 of its bytes: a build's program
and data file in its manifest (etdeploy.builder), a reference table in the record
beside it (pipeline/references.py), a staged input in its own name
(pipeline/stage.py), a runner bundle's files in its bundle.json (runner_build).
Before one is used, each of its files must be a regular file (not a symbolic
link, which could point anywhere) inside the cache, holding those bytes. The
digest comes from etdeploy.digests, which recognises an unchanged file by its
stat record: a warm run reads no cached file again, while a file written to since
(a flipped byte changes its mtime and ctime) is read and found out.

An entry that fails is not deleted but moved to cache_dir("quarantine") (for a
look at what happened; `etdeploy clean` removes it), and is made again; the run
that found it says so in a warning. A run collects those warnings with
noticed_damage(); without one open they go to the "etdeploy" logger.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from etdeploy.digests import file_sha256
from etdeploy.errors import EtdeployError
from etdeploy.paths import cache_dir, cache_root

QUARANTINE_KIND = "quarantine"

_notices: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "etdeploy_cache_notices", default=None
)
_log = logging.getLogger("etdeploy")


def file_damage(path: Path, sha256: str | None) -> str | None:
    """Why `path` cannot serve as a cached file holding `sha256` (None: it can).
    With sha256 None only its kind and place are checked."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"{path.name} is missing"
    except OSError as exc:
        return f"{path.name} cannot be read ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return f"{path.name} is a symbolic link, not a file of the cache"
    if not stat.S_ISREG(st.st_mode):
        return f"{path.name} is not a regular file"
    if not _inside_cache(path):
        return f"{path.name} lies outside the cache (a folder on its path is a link)"
    if sha256 is None:
        return None
    try:
        found = file_sha256(path, os.stat(path))
    except EtdeployError:
        return f"{path.name} cannot be read"
    if found != sha256:
        return f"{path.name} does not hold the bytes recorded for it (sha256 {found[:12]}…, recorded {sha256[:12]}…)"
    return None


def _inside_cache(path: Path) -> bool:
    try:
        return path.resolve().is_relative_to(cache_root().resolve())
    except OSError:
        return False


def quarantine(entry: Path, what: str, reason: str) -> str:
    """Move `entry` (a file or a folder of the cache) into the quarantine; the warning
    that says so, also noted for the run (noticed_damage)."""
    target = (
        cache_dir(QUARANTINE_KIND) / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{entry.name}"
    )
    try:
        os.replace(entry, target)
        where = f"moved to {target}"
    except OSError:
        # Not movable (another filesystem, a permission): removed instead, so the
        # next use does not meet it again.
        with contextlib.suppress(OSError):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        where = "removed"
    text = f"the cached {what} failed its check ({reason}): {where}, and made again"
    notices = _notices.get()
    if notices is not None:
        notices.append(text)
    else:
        _log.warning(text)
    return text


@contextlib.contextmanager
def noticed_damage() -> Iterator[list[str]]:
    """Collect the warnings of every quarantine while the block runs (a run's)."""
    notices: list[str] = []
    token = _notices.set(notices)
    try:
        yield notices
    finally:
        _notices.reset(token)
