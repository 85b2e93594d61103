"""A local file etdeploy is given, checked before it is opened: opening a FIFO blocks until
a writer appears, and a directory or a broken link deserves its own message."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from etdeploy.errors import UsageError


def _unreadable(path: Path, message: str, hint: str) -> UsageError:
    return UsageError(f"{path}: {message}", hint)


def check_readable_file(path: Path) -> os.stat_result:
    """Stat `path` without opening it; raise UsageError unless it is a readable regular file.

    Checked before open() because opening a FIFO blocks until a writer appears.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            target = os.readlink(path)
            raise _unreadable(
                path, f"broken symbolic link (points to {target})", "check the link's target"
            ) from None
        raise _unreadable(path, "no such file", "check the path") from None
    except OSError as exc:
        raise _unreadable(path, f"cannot be read: {exc.strerror}", "check the path") from None
    if stat.S_ISDIR(st.st_mode):
        raise _unreadable(path, "is a directory", "pass a file, not a directory")
    if not stat.S_ISREG(st.st_mode):
        raise _unreadable(path, "is not a regular file (a FIFO, socket or device)", "pass a file")
    if not os.access(path, os.R_OK):
        raise _unreadable(path, "cannot be read: permission denied", "check the file's permissions")
    return st
