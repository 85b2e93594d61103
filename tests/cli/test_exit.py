"""How the etdeploy process ends: with its documented status, the way Python ends (no
teardown skipped, a thread that is not a daemon waited for), and quietly when the
reader of its output has gone (`etdeploy ... | head -2`), with a status that does not
say a check failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from etdeploy.cli._exit import EXIT_OUTPUT_CLOSED
from etdeploy.errors import EXIT_CHECK_FAILED


def test_the_command_line_ends_with_its_documented_status() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "etdeploy", "--version"], capture_output=True, text=True, timeout=60
    )
    bad = subprocess.run(
        [sys.executable, "-m", "etdeploy", "run", "digits", "--iterations", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    unknown = subprocess.run(
        [sys.executable, "-m", "etdeploy", "run", "--no-such-flag"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0 and ok.stdout.strip()
    assert bad.returncode == 2 and "error:" in bad.stderr
    assert unknown.returncode == 2
    assert unknown.stderr.splitlines()[0].startswith("error: No such option: --no-such-flag")


def _piped_into_a_reader_that_leaves(argv: list[str], tmp_path: Path) -> tuple[int, str]:
    """Run etdeploy with its stdout a pipe whose reader takes one line and closes it
    (as `| head -1` does), and wait until the reader has gone before etdeploy writes
    the rest: its status and its stderr."""
    read, write = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-m", "etdeploy", *argv],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write)
    with os.fdopen(read, "rb") as reader:
        reader.readline()
    _, err = process.communicate(timeout=300)
    return process.returncode, err


def test_a_passing_command_whose_reader_leaves_ends_quietly_with_its_own_status(
    tmp_path: Path,
) -> None:
    # sizecheck of a file well under every limit: a passing command that writes a
    # table of several lines, more than the pipe holds once its reader has gone.
    model = tmp_path / "small.bin"
    model.write_bytes(b"\0" * 4096)
    files = []
    for i in range(800):
        copy = tmp_path / f"small-{i:03d}.bin"
        copy.write_bytes(model.read_bytes())
        files.append(str(copy))
    done = subprocess.run(
        [sys.executable, "-m", "etdeploy", "sizecheck", "--any-file", *files],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(done.stdout) > 1 << 16  # more than a pipe's buffer: the write must fail
    status, err = _piped_into_a_reader_that_leaves(
        ["sizecheck", "-q", "--any-file", *files], tmp_path
    )
    assert status == EXIT_OUTPUT_CLOSED != EXIT_CHECK_FAILED
    assert err == ""  # (-q: no progress) no traceback, no "Exception ignored", no error line


def test_the_status_of_a_closed_output_is_128_plus_sigpipe() -> None:
    # What a shell reports for a program a closed pipe ended (signal(7): SIGPIPE is 13).
    assert EXIT_OUTPUT_CLOSED == 141
