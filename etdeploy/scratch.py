"""A run's scratch directory on this host, and the sweep of those a killed run left.

A run pulls its outputs (a language model's generations, a localization's taps)
into a directory under the system's temporary folder, removed when the run ends
however it ends in Python: an exception, SIGINT, SIGTERM (etdeploy.interrupts
makes the signals exceptions). SIGKILL (the OOM killer, a CI job killed after its
grace period) gives the process no chance to remove it, and pulled outputs can be
large. So each scratch directory holds a lock file, flock(2)-ed for as long as
the directory is used. The kernel drops the locks of a process that ended however
it ended (flock(2), Linux man-pages 6.9: locks go with the last descriptor of the
open file, closed at exit), so a scratch directory whose lock can be taken belongs
to nobody: the next one made on this host removes it.

The lock file is locked before it takes its name, so a sweep never sees a
directory's lock unheld while its owner lives.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Every scratch directory's name starts so; the sweep looks at no other.
PREFIX = "etdeploy-"
LOCK_NAME = ".etdeploy-scratch.lock"


@contextlib.contextmanager
def scratch_dir(kind: str) -> Iterator[Path]:
    """A new directory `etdeploy-<kind>-…` under the temporary folder for the block,
    removed after it; directories that killed runs left there go first."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): a plain temporary directory, no sweep
        with tempfile.TemporaryDirectory(prefix=f"{PREFIX}{kind}-") as plain:
            yield Path(plain)
        return
    root = Path(tempfile.gettempdir())
    sweep_abandoned(root)
    directory = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-", dir=root))
    descriptor = -1
    try:
        unnamed = directory / f"{LOCK_NAME}.{os.getpid()}"
        descriptor = os.open(unnamed, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        os.rename(unnamed, directory / LOCK_NAME)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        if descriptor >= 0:
            os.close(descriptor)


def sweep_abandoned(root: Path) -> list[Path]:
    """Remove the scratch directories under `root` whose lock nobody holds; returns
    them. A directory without a lock file (being made, or not ours) is left alone."""
    return _abandoned(root, remove=True)


def abandoned_scratch(root: Path) -> list[Path]:
    """The scratch directories under `root` whose lock nobody holds, left as they are."""
    return _abandoned(root, remove=False)


def _abandoned(root: Path, *, remove: bool) -> list[Path]:
    import fcntl

    found: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return found
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        directory = Path(entry.path)
        try:
            descriptor = os.open(directory / LOCK_NAME, os.O_RDONLY)
        except OSError:  # no lock file, not ours to read, or removed meanwhile
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its run is alive
            os.close(descriptor)
            continue
        try:
            if remove:
                shutil.rmtree(directory, ignore_errors=True)
            found.append(directory)
        finally:
            os.close(descriptor)
    return found
