"""What every device does to move a file: digests, temporary names, progress.

- A file is written under a temporary name beside its real one, then renamed, so
  a cut transfer never leaves half a file under the real name. Every temporary
  name of a file starts with partial_prefix(); a push first drops whatever an
  earlier cut push of the same file left there (any process).
- A push is skipped when the file at the destination has the local file's sha256.
  The local digest comes from etdeploy.digests (an unchanged file is recognised by
  its stat, across processes) on a thread while the device looks at its end; the
  device's side is its digest record (devices/digest_records.py) or its own hash.
- Progress is (path, bytes done, bytes total); a skipped push reports once, done.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import shlex
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from etdeploy.ahead import Ahead
from etdeploy.digests import file_sha256

# Called with (path being transferred, bytes done, bytes total).
ProgressCallback = Callable[[str, int, int], None]

HASH_CHUNK = 1 << 20
# What every partial file's name carries, so a later transfer can find and drop
# the leftovers of a cut one.
PARTIAL_MARKER = ".etdeploy-partial-"
# Exit status of the remote sha256 helper when the file does not exist.
NO_SUCH_FILE = 44


# -- temporary names -------------------------------------------------------------------


def _machine_tag() -> str:
    """A short name for this machine: a run's leftovers on a device say whose they are."""
    try:
        identity = Path("/etc/machine-id").read_text().strip()
    except OSError:
        identity = ""
    return hashlib.sha256((identity or socket.gethostname()).encode()).hexdigest()[:8]


MACHINE_TAG = _machine_tag()
_OWNER = re.compile(r"^([0-9a-f]{8})-(\d+)$")


def owner_tag() -> str:
    """This machine and process, as the names of temporary files and pid files on a
    device carry them: a later run removes what its dead runs left, never what a live
    process, or another machine, is writing (devices/workdir.py, the sweep)."""
    return f"{MACHINE_TAG}-{os.getpid()}"


def parse_owner(text: str) -> tuple[str, int] | None:
    """(machine tag, pid) of an owner tag; None for anything else (a name from an
    etdeploy that did not tag its files)."""
    match = _OWNER.match(text)
    return (match.group(1), int(match.group(2))) if match else None


def partial_prefix(path: str) -> str:
    """The start of every temporary name for `path` (any process)."""
    head, _, tail = path.rpartition("/")
    prefix = f".{tail}{PARTIAL_MARKER}"
    return f"{head}/{prefix}" if head else prefix


def temporary_name(remote: str) -> str:
    """The name a file is written under before its rename into place."""
    return f"{partial_prefix(remote)}{owner_tag()}"


def temporary_path(local: Path) -> Path:
    """temporary_name for a local file: the same directory, so the rename is atomic."""
    return Path(temporary_name(str(local)))


def prepare_command(remote: str) -> str:
    """A POSIX shell prefix for a push: make the file's directory and drop what cut
    pushes of it left; exits 1 when either fails."""
    head = remote.rpartition("/")[0]
    stale = shlex.quote(partial_prefix(remote)) + "*"
    return f"mkdir -p {shlex.quote(head or '/')} && rm -f {stale} || exit 1; "


def drop_local_partials(path: Path) -> None:
    """prepare_command's cleanup for a file on this machine."""
    for stale in glob.glob(glob.escape(partial_prefix(str(path))) + "*"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)


@contextlib.contextmanager
def local_partial(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write; renamed onto `path` when the block
    ends cleanly, removed when it raises. The directory is made first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = temporary_path(path)
    try:
        yield partial
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


# -- remote digests --------------------------------------------------------------------


def sha256_command(path: str, tool: str = "sha256sum") -> str:
    """A POSIX shell command printing `path`'s digest; exits NO_SUCH_FILE without it."""
    quoted = shlex.quote(path)
    return f"[ -f {quoted} ] || exit {NO_SUCH_FILE}; {tool} {quoted}"


def parse_sha256_line(output: str) -> str:
    """The digest in a sha256sum (or shasum -a 256) line, lower case; '' when none."""
    words = output.split()
    # GNU sha256sum prefixes a backslash when the name needed escaping.
    return words[0].lstrip("\\").lower() if words else ""


# -- the push decision -----------------------------------------------------------------


@dataclass(frozen=True)
class Push:
    """One file of a push_many(): where it goes on the device, and its mode there."""

    local: Path
    remote: str
    mode: int = 0o644


@dataclass(frozen=True)
class RemoteFile:
    """What a push finds at its destination."""

    # None: not read (the digest decides alone).
    size: int | None
    mode: int | None
    # The digest of a trusted record (devices/digest_records.py): the file is known to hold
    # these bytes without hashing it. None: it must be hashed to know.
    sha256: str | None = None


class BackgroundDigest(Ahead[str]):
    """A local file's sha256, computed on a thread (hashlib releases the GIL) while
    the caller looks at the remote end; result() waits for it. An unchanged file is
    recognised by its stat record (etdeploy.digests) and not read at all."""

    def __init__(self, path: Path) -> None:
        super().__init__(file_sha256, path, name="etdeploy-sha256")


@dataclass
class TransferProgress:
    """Reports one transfer's progress to the caller's callback, if any."""

    callback: ProgressCallback | None
    path: str
    total: int
    done: int = 0

    def update(self, done: int) -> None:
        self.done = done
        if self.callback is not None:
            self.callback(self.path, done, self.total)


@dataclass
class Upload:
    """One file on its way to a device: written under `partial`, then renamed to
    `target` once it is whole."""

    local: Path
    target: str
    size: int
    mode: int
    progress: TransferProgress
    digest: BackgroundDigest
    partial: str = field(init=False)

    def __post_init__(self) -> None:
        self.partial = temporary_name(self.target)


@dataclass
class Download:
    """One file on its way back: written to `partial`, which pull renames to `local`."""

    source: str
    local: Path
    partial: Path
    callback: ProgressCallback | None

    def progress(self, total: int) -> TransferProgress:
        return TransferProgress(self.callback, self.source, total)


class Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


class Writable(Protocol):
    def write(self, data: bytes, /) -> object: ...


def copy_stream(source: Readable, sink: Writable, progress: TransferProgress, chunk: int) -> int:
    """Copy until source ends, reporting each chunk; the bytes copied."""
    done = 0
    while data := source.read(chunk):
        sink.write(data)
        done += len(data)
        progress.update(done)
    return done
