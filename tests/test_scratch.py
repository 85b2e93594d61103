"""A run's scratch directory on this host goes when the run ends, and one that a
killed run left goes with the next run's; a live run's is never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from etdeploy.scratch import LOCK_NAME, scratch_dir

# A process that holds a scratch directory, writes a file into it, says where, and waits.
HOLDER = """
import sys, time
from etdeploy.scratch import scratch_dir
with scratch_dir("run") as here:
    (here / "outputs.bin.partial").write_bytes(b"x" * 4096)
    print(here, flush=True)
    time.sleep(600)
"""


@pytest.fixture
def temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's and its children's temporary folder, as TMPDIR sets it."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    return folder


def hold_scratch(folder: Path) -> tuple[subprocess.Popen[str], Path]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(folder)},
    )
    assert holder.stdout is not None
    return holder, Path(holder.stdout.readline().strip())


def test_the_directory_is_there_for_the_block_and_gone_after_even_on_an_exception(
    temporary_folder: Path,
) -> None:
    with scratch_dir("run") as kept:
        assert kept.parent == temporary_folder and kept.name.startswith("etdeploy-run-")
        assert (kept / LOCK_NAME).is_file()
    assert not kept.exists()
    with pytest.raises(KeyboardInterrupt), scratch_dir("run") as interrupted:
        (interrupted / "half").write_bytes(b"x")
        raise KeyboardInterrupt
    assert list(temporary_folder.iterdir()) == []


def test_a_killed_runs_directory_goes_with_the_next_run_and_a_live_runs_stays(
    temporary_folder: Path,
) -> None:
    killed, left = hold_scratch(temporary_folder)
    alive, living = hold_scratch(temporary_folder)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert (left / "outputs.bin.partial").exists()  # SIGKILL: no chance to remove it

        with scratch_dir("run") as mine:
            assert not left.exists()
            assert (living / "outputs.bin.partial").exists()
            assert sorted(temporary_folder.iterdir()) == sorted([living, mine])
    finally:
        for process in (killed, alive):
            process.kill()
            process.wait()


def test_a_folder_that_is_not_a_scratch_directory_is_left_alone(temporary_folder: Path) -> None:
    # An older etdeploy's directory (no lock file) and someone else's: not ours to judge.
    unlocked = temporary_folder / "etdeploy-run-olderversion"
    unlocked.mkdir()
    other = temporary_folder / "pip-unpack-1234"
    other.mkdir()
    with scratch_dir("lm"):
        pass
    assert sorted(temporary_folder.iterdir()) == [unlocked, other]
