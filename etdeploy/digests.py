"""sha256 of a file on this machine, recognised by its stat instead of read again.

A multi-GB program pushed, measured or checked on every run must not be read on every
run. A record under cache_dir("file-digests") maps a file's path to (device, inode,
size, mtime_ns, ctime_ns) -> sha256, and only a file whose stat differs is hashed
again. ctime is there because a process can set mtime back (`cp --preserve`,
`touch -r`) but not ctime. As git does with its index ("racy git": read-cache.c,
is_racy_timestamp, read 2026-12-03 via the search tool), a record is trusted only
when the file's last change is older than the hash by more than a timestamp tick,
taken as 2 s (FAT's mtime granularity; Linux filesystems stamp with the coarse
clock, a few ms): a file rewritten in the same tick it was hashed in would otherwise
keep its stat and its stale digest.

Records are written with etdeploy.atomic (temporary name, fsync, rename), so a
killed run leaves an old record or a whole new one, never half of one; a record
that cannot be written (read-only cache, full disk) costs a hash next time, nothing
else. Shared by the size check (etdeploy.sizecheck.cache) and the devices (the
local side of every push, and the local device's own files).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path

from etdeploy.atomic import atomic_write
from etdeploy.errors import UsageError
from etdeploy.files import check_readable_file
from etdeploy.jsonvalue import JsonObject
from etdeploy.paths import cache_dir

CACHE_KIND = "file-digests"
# Bump when a record's meaning or layout changes: old records are then never read.
FORMAT = 1
RACY_MARGIN_NS = 2_000_000_000
_HASH_BLOCK = 4 * 1024 * 1024


def stat_identity(st: os.stat_result) -> list[int]:
    """What a record remembers of a file's stat: changes whenever its bytes may have."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def record_path(path: Path) -> Path:
    """Where the record for `path` (by its resolved name) lives."""
    name = hashlib.sha256(str(path.resolve()).encode("utf-8", "surrogateescape")).hexdigest()
    return cache_dir(CACHE_KIND) / f"{name[:40]}.json"


def _read_record(path: Path) -> JsonObject | None:
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):  # missing, unreadable, truncated or not JSON
        return None
    return doc if isinstance(doc, dict) else None


def known_sha256(path: str | os.PathLike[str], st: os.stat_result | None = None) -> str | None:
    """The sha256 recorded for `path` when the file has not changed since, else None.
    Reads no byte of the file."""
    p = Path(path)
    st = st or os.stat(p)
    record = _read_record(record_path(p))
    if record is None or record.get("format") != FORMAT:
        return None
    digest = record.get("sha256")
    hashed_at = record.get("hashed_at_ns")
    if not isinstance(digest, str) or len(digest) != 64 or not isinstance(hashed_at, int):
        return None
    if record.get("identity") != stat_identity(st):
        return None
    if max(st.st_mtime_ns, st.st_ctime_ns) + RACY_MARGIN_NS > hashed_at:
        return None  # changed too close to its hash to tell a rewrite in the same tick
    return digest


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a local file, streamed in constant memory (OSError if it cannot be
    read): the one place a local file is hashed."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _hash(path: Path) -> str:
    try:
        return sha256_file(path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read: {exc.strerror}", "check the path") from None


def file_sha256(
    path: str | os.PathLike[str], st: os.stat_result | None = None, *, trust_record: bool = True
) -> str:
    """sha256 of the file at `path`; an unchanged file (same device, inode, size, mtime and
    ctime as when it was hashed) is not read again unless trust_record is False. `st` is
    the file's stat when the caller has it (it checked the file already)."""
    p = Path(path)
    before = st or check_readable_file(p)
    if trust_record:
        known = known_sha256(p, before)
        if known is not None:
            return known
    started = time.time_ns()
    digest = _hash(p)
    after = os.stat(p)
    if stat_identity(after) == stat_identity(before):  # not written to while it was read
        record = {
            "format": FORMAT,
            "path": str(p.resolve()),
            "identity": stat_identity(after),
            "sha256": digest,
            "hashed_at_ns": started,
        }
        # A record that cannot be written costs a hash next time, never the digest.
        with contextlib.suppress(OSError):
            atomic_write(record_path(p), (json.dumps(record, sort_keys=True) + "\n").encode())
    return digest
