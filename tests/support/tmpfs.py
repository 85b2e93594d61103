"""A small tmpfs for the tests where a full disk matters: a real ENOSPC from the
kernel, not an injected one. Mounting needs root (CI runs the suite as root); a
test skips without it. The mount is undone at the end, whatever the test did."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(path: Path, size_bytes: int) -> Iterator[Path]:
    """`path` (made if missing, and empty) as a tmpfs of size_bytes."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    if any(path.iterdir()):
        raise RuntimeError(f"{path} is not empty: a mount would hide what is there")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        # Lazily: a process the test started may still hold a file open there.
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
