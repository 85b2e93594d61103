"""The CLI as a user runs it: a subprocess whose stdout and stderr are pipes (as
in a CI log), never a terminal, and the real filesystem limits a tmpfs gives."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.adb_server import free_port

# A progress line when piped: "14:03:04 +3.2s building digits for xnnpack".
PROGRESS_LINE = re.compile(r"^\d\d:\d\d:\d\d \+\d+\.\ds ")


@dataclass(frozen=True)
class Done:
    """A finished command: its exit code and what it wrote, as a log would hold it."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def errors(self) -> list[str]:
        """stderr without its progress lines: what a reader is told."""
        return [line for line in self.stderr.splitlines() if not PROGRESS_LINE.match(line)]

    @property
    def progress(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if PROGRESS_LINE.match(line)]


def etdeploy(*args: str | Path, cwd: Path, timeout: float = 900, **env: str) -> Done:
    """`etdeploy ARGS` in a fresh process, its output piped. No adb server is
    reachable unless the test names one: anything that falls through to the
    environment meets a closed port on a host etdeploy treats as remote."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ANDROID_")}
    environ.update({
        "ANDROID_ADB_SERVER_HOST": "127.0.0.2", "ANDROID_ADB_SERVER_PORT": str(free_port()),
        # An 80-column terminal's COLUMNS must not cut a piped log either.
        "COLUMNS": "80", **env,
    })  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "etdeploy", *map(str, args)],
        cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return Done(done.returncode, done.stdout, done.stderr)


def assert_one_line_error(done: Done, code: int, message: str) -> None:
    """The contract for bad input and faults: the documented exit code, one
    `error:` line and one `hint:` line, last on screen, and no traceback."""
    assert done.returncode == code, (done.stdout, done.stderr)
    told = done.errors
    assert len(told) == 2, done.stderr  # no blank line before, between or after
    assert told[0].startswith("error: ") and message in told[0], done.stderr
    assert told[1].startswith("hint: ") and len(told[1]) > len("hint: "), done.stderr
    assert done.stderr.rstrip().splitlines()[-1] == told[1]
    assert "Traceback" not in done.stderr + done.stdout


def _mount_tmpfs(path: Path, options: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): needs root")


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 8 MB filesystem, filled to the last byte."""
    mount = tmp_path / "full"
    _mount_tmpfs(mount, "size=8m")
    try:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            for size in (1 << 20, 1):  # megabytes, then the last bytes
                with contextlib.suppress(OSError):
                    while os.write(fd, b"\0" * size):
                        pass
        finally:
            os.close(fd)
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A real read-only filesystem: nothing can be created in it, not even by root."""
    mount = tmp_path / "ro"
    _mount_tmpfs(mount, "ro,size=1m")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
