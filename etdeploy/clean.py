"""`etdeploy clean`: free what etdeploy keeps, on this machine or on a device.

Everything etdeploy keeps can be made again: this machine's cache holds builds,
runner bundles, references, staged inputs, measurements and digest records
(etdeploy.paths); a device's work dir holds content-addressed runners, programs
and inputs that later runs reuse, their digest records, and job directories a run
could not remove (etdeploy.devices.workdir). Nothing prunes them on its own.

What goes, per item (a build, a runner bundle, one program, one input file, a job
directory; the least recently used first):
- with no cap, everything;
- with `older_than_s`, what was last used longer ago than that;
- with `max_bytes`, then the least recently used until the rest fits;
- always, what nothing will read again: the partial of a cut push, a stale pid
  file, a digest record whose file is gone, a cache entry that failed its check
  (etdeploy.quarantine).

"Last used" is the newest of the mtimes and access times of a cache item's files
(a build's manifest is read on every cache hit), and, on a device, the mtime of the file's digest record, which every push of it touches
(devices/digest_records.py), else the file's own. A device is cleaned holding its lock,
so no run of this machine uses it meanwhile; an item of this machine's cache is
skipped while another process holds its lock (a build being written). The core
returns a CleanReport (what went, what stays, what was skipped) and raises
EtdeployError; the command renders it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.devices.digest_records import RECORD_DIR, record_path
from etdeploy.devices.lock import device_lock, held_lock
from etdeploy.devices.workdir import SHARED_DIRS, is_garbage
from etdeploy.errors import UsageError
from etdeploy.paths import cache_root
from etdeploy.quarantine import QUARANTINE_KIND
from etdeploy.units import parse_size

if TYPE_CHECKING:
    from etdeploy.devices.base import Device
    from etdeploy.devices.digest_records import Listing

# Cache kinds that are not items to prune: the device locks (held across
# processes), the local device's work dir (`etdeploy clean --device local`), and
# the notes of job dirs a run could not remove (devices/workdir.py: the next run
# on that device removes them; without the note they would stay there).
CACHE_SKIPPED = ("locks", "local-device", "device-jobs")
# Cache kinds whose items sit one folder deeper (sizecheck/measurements/X.json).
CACHE_NESTED = ("sizecheck",)
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class CleanItem:
    """One thing that can go: a file or a directory, with what it holds."""

    path: str  # the cache's or the work dir's relative path
    kind: str  # builds, runners, programs, inputs, job, partial, record, ...
    size_bytes: int
    last_used: float  # epoch seconds (the device's clock for a device)
    # Why it goes (or, for a skipped one, why it stays).
    reason: str = ""


@dataclass(frozen=True)
class CleanReport:
    """What clean removed (or, with dry_run, would remove), kept and skipped."""

    where: str  # "this machine's cache (PATH)" or "DEVICE: WORKDIR"
    dry_run: bool
    removed: tuple[CleanItem, ...]
    kept: tuple[CleanItem, ...]
    skipped: tuple[CleanItem, ...] = ()

    @property
    def freed_bytes(self) -> int:
        return sum(item.size_bytes for item in self.removed)

    @property
    def kept_bytes(self) -> int:
        return sum(item.size_bytes for item in (*self.kept, *self.skipped))

    def to_json(self) -> dict[str, object]:
        def items(group: Sequence[CleanItem]) -> list[dict[str, object]]:
            return [
                {"path": i.path, "kind": i.kind, "size_bytes": i.size_bytes,
                 "last_used": round(i.last_used, 3), "reason": i.reason}
                for i in group
            ]  # fmt: skip

        return {
            "schema": "etdeploy.clean/1",
            "where": self.where,
            "dry_run": self.dry_run,
            "freed_bytes": self.freed_bytes,
            "kept_bytes": self.kept_bytes,
            "removed": items(self.removed),
            "kept": items(self.kept),
            "skipped": items(self.skipped),
        }


def parse_age(text: str) -> float:
    """Seconds from "30d", "12h", "90m", "45s", "2w" or a plain number of seconds."""
    match = _AGE.match(text)
    if match is None:
        raise UsageError(
            f"--older-than: cannot read {text!r} as an age",
            "write a number with s, m, h, d or w, e.g. --older-than 7d",
        )
    return float(match.group(1)) * _AGE_UNITS[match.group(2)]


def parse_max_size(text: str) -> int:
    """Bytes from "2GB", "500MiB", "1.5GB" or a plain number of bytes."""
    return parse_size(text, what="--max-size")


def choose(
    items: Sequence[CleanItem],
    *,
    now: float,
    older_than_s: float | None = None,
    max_bytes: int | None = None,
    garbage: Sequence[CleanItem] = (),
) -> tuple[list[CleanItem], list[CleanItem]]:
    """(what goes, what stays) under the caps; `garbage` always goes."""
    if older_than_s is not None and older_than_s < 0:
        raise UsageError("--older-than cannot be negative", "e.g. --older-than 7d")
    if max_bytes is not None and max_bytes < 0:
        raise UsageError("--max-size cannot be negative", "e.g. --max-size 2GB")
    gone = [_because(i, "nothing reads it again") for i in garbage]
    ordered = sorted(items, key=lambda i: (i.last_used, i.path))
    if older_than_s is None and max_bytes is None:
        return gone + [_because(i, "no cap given: everything goes") for i in ordered], []
    stays: list[CleanItem] = []
    for item in ordered:
        if older_than_s is not None and now - item.last_used > older_than_s:
            gone.append(_because(item, f"unused for {_age_text(now - item.last_used)}"))
        else:
            stays.append(item)
    if max_bytes is not None:
        total = sum(i.size_bytes for i in stays)
        while stays and total > max_bytes:
            oldest = stays.pop(0)
            total -= oldest.size_bytes
            gone.append(_because(oldest, "least recently used over --max-size"))
    return gone, stays


def _because(item: CleanItem, reason: str) -> CleanItem:
    return CleanItem(item.path, item.kind, item.size_bytes, item.last_used, reason)


def _age_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


# -- this machine's cache -------------------------------------------------------------


def clean_cache(
    *,
    older_than_s: float | None = None,
    max_bytes: int | None = None,
    dry_run: bool = False,
    now: float | None = None,
) -> CleanReport:
    """Prune this machine's cache (etdeploy.paths.cache_root) under the caps."""
    root = cache_root()
    now = time.time() if now is None else now
    items = list(_cache_items(root))
    # What failed its check (etdeploy.quarantine) is kept only for a look: it goes.
    garbage = [item for item in items if item.kind == QUARANTINE_KIND]
    items = [item for item in items if item.kind != QUARANTINE_KIND]
    gone, stays = choose(
        items, now=now, older_than_s=older_than_s, max_bytes=max_bytes, garbage=garbage
    )
    removed: list[CleanItem] = []
    skipped: list[CleanItem] = []
    for item in gone:
        if dry_run:
            removed.append(item)
            continue
        with _unless_busy(root / item.path) as free:
            if not free:
                skipped.append(_because(item, "in use by another etdeploy process"))
                continue
            _remove_local(root / item.path)
            removed.append(item)
    return CleanReport(
        f"this machine's cache ({root})", dry_run, tuple(removed), tuple(stays), tuple(skipped)
    )


def _cache_items(root: Path) -> Iterator[CleanItem]:
    for kind_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        kind = kind_dir.name
        if kind in CACHE_SKIPPED:
            continue
        folders = [kind_dir]
        if kind in CACHE_NESTED:
            folders = sorted(p for p in kind_dir.iterdir() if p.is_dir())
        for folder in folders:
            for entry in sorted(folder.iterdir()):
                # A lock file stays: another process may hold it (filelock).
                if entry.name.endswith(".lock"):
                    continue
                size, last = _usage(entry)
                yield CleanItem(str(entry.relative_to(root)), kind, size, last)


def _usage(path: Path) -> tuple[int, float]:
    """Bytes and the newest mtime or atime of the files at or below path. A folder's
    own times do not count (listing it, as this does, moves its atime); an empty
    one has its mtime."""
    files = [path]
    if path.is_dir() and not path.is_symlink():
        files = [Path(d) / f for d, _, names in os.walk(path) for f in names]
        if not files:
            return 0, path.stat().st_mtime
    size, last = 0, 0.0
    for p in files:
        try:
            st = p.lstat()
        except OSError:
            continue
        size += st.st_size
        last = max(last, st.st_mtime, st.st_atime)
    return size, last


@contextlib.contextmanager
def _unless_busy(path: Path) -> Iterator[bool]:
    """Hold the lock a writer of `path` holds (PATH.lock beside it, or .lock inside
    it), if there is one; yields False when another process has it."""
    candidates = [path.with_name(path.name + ".lock"), path / ".lock"]
    held = next((c for c in candidates if c.is_file()), None)
    if held is None:
        yield True
        return
    with held_lock(held, 0) as free:
        yield free


def _remove_local(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:
        raise UsageError(
            f"cannot remove {path}: {exc.strerror}", "check the cache's permissions"
        ) from None


# -- a device's work dir ---------------------------------------------------------------


def clean_device(
    device: Device,
    *,
    older_than_s: float | None = None,
    max_bytes: int | None = None,
    dry_run: bool = False,
    lock_timeout_s: float | None = None,
) -> CleanReport:
    """Prune a device's work dir under the caps, holding the device's lock."""
    with device_lock(device, lock_timeout_s):
        listing = device.listing()
        items, garbage, records = device_items(listing)
        gone, stays = choose(
            items, now=listing.now, older_than_s=older_than_s, max_bytes=max_bytes,
            garbage=garbage,
        )  # fmt: skip
        # A removed file's digest record goes with it.
        removed_files = _files_of(gone, listing)
        paths = [item.path for item in gone]
        paths += [record for record, owner in records.items() if owner in removed_files]
        if paths and not dry_run:
            device.remove(*paths, recursive=True)
    return CleanReport(f"{device.name}: {listing.workdir}", dry_run, tuple(gone), tuple(stays))


def _files_of(gone: Sequence[CleanItem], listing: Listing) -> set[str]:
    """The files of the listing inside the items that go."""
    units = {item.path for item in gone}
    found = set()
    for f in listing.files:
        parts = f.path.split("/")
        if any("/".join(parts[:n]) in units for n in range(1, len(parts) + 1)):
            found.add(f.path)
    return found


def device_items(
    listing: Listing,
) -> tuple[list[CleanItem], list[CleanItem], dict[str, str]]:
    """The work dir as items (a runner bundle, one program, one input, one job dir),
    the garbage (a record whose file is gone among it), and each other digest record
    with the file it describes."""
    base = listing.workdir
    record_names = {
        record_path(base, f"{base}/{f.path}").rpartition("/")[2]: f.path for f in listing.files
    }
    records: dict[str, str] = {}
    mtimes = {f.path: f.mtime for f in listing.files}
    units: dict[str, tuple[str, int, float]] = {}
    garbage: list[CleanItem] = []
    for f in listing.files:
        top, _, rest = f.path.partition("/")
        if top == RECORD_DIR:
            owner = record_names.get(rest)
            if owner is None or is_garbage(f.path):
                garbage.append(CleanItem(f.path, "record", f.size, f.mtime))
            else:
                records[f.path] = owner
            continue
        if is_garbage(f.path):
            garbage.append(CleanItem(f.path, "partial", f.size, f.mtime))
            continue
        record = record_path(base, f"{base}/{f.path}")
        used = mtimes.get(record[len(base) + 1 :], f.mtime)
        if top in SHARED_DIRS and rest:
            # A runner bundle goes whole; a program or an input file by itself.
            unit = "/".join(f.path.split("/")[:2]) if top == "runners" else f.path
            kind = top
        elif rest:
            unit, kind = top, "job"
        else:
            unit, kind = f.path, "other"
        size, last = units.get(unit, (kind, 0, 0.0))[1:]
        units[unit] = (kind, size + f.size, max(last, used))
    items = [CleanItem(path, kind, size, last) for path, (kind, size, last) in units.items()]
    return items, garbage, records
