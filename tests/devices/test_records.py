"""Digest records on a device (etdeploy.devices.records): the shell they run is run
here by this machine's /bin/sh with its GNU stat, as a phone's toybox or a Linux
host would run it; what a record is trusted for is checked line by line."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from etdeploy.devices.records import (
    RECORD_FORMAT,
    identity_command,
    parse_probe,
    probe_script,
    record_command,
    record_path,
)


def sh(script: str) -> str:
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def pushed(tmp_path: Path) -> tuple[str, str, str]:
    """A work dir, a file in it (a path with a space), and its recorded digest."""
    workdir = str(tmp_path / "work dir")
    target = f"{workdir}/programs/model.pte"
    os.makedirs(os.path.dirname(target))
    Path(target).write_bytes(b"weights" * 1000)
    digest = hashlib.sha256(Path(target).read_bytes()).hexdigest()
    sh(record_command(workdir, target, digest, "gnu"))
    return workdir, target, digest


def test_a_whole_record_of_an_unchanged_file_is_trusted(pushed: tuple[str, str, str]) -> None:
    workdir, target, digest = pushed
    found = parse_probe(sh(probe_script(workdir, target, "gnu", with_mode=True)), with_mode=True)
    assert found is not None
    assert (found.size, found.mode, found.recorded) == (7000, 0o644, digest)
    record = Path(record_path(workdir, target)).read_text().splitlines()
    assert record[:3] == [RECORD_FORMAT, target, digest]


def test_a_missing_file_probes_as_absent_and_its_directory_is_made(tmp_path: Path) -> None:
    target = str(tmp_path / "new" / "dir" / "x.bin")
    assert parse_probe(sh(probe_script(str(tmp_path), target, "gnu", with_mode=False)),
                       with_mode=False) is None  # fmt: skip
    assert Path(target).parent.is_dir()


def test_any_change_to_the_file_makes_its_record_untrusted(
    pushed: tuple[str, str, str],
) -> None:
    workdir, target, _ = pushed
    st = os.stat(target)
    Path(target).write_bytes(b"WEIGHTS" * 1000)  # same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back
    found = parse_probe(sh(probe_script(workdir, target, "gnu", with_mode=False)), with_mode=False)
    assert found is not None and found.recorded is None


def test_a_damaged_record_is_not_trusted(pushed: tuple[str, str, str]) -> None:
    workdir, target, _ = pushed
    record = Path(record_path(workdir, target))
    lines = record.read_text().splitlines()
    for damaged in (
        lines[:3],
        ["etdeploy-digest/0", *lines[1:]],
        [*lines[:2], "0" * 63, *lines[3:]],
    ):
        record.write_text("\n".join(damaged) + "\n")
        found = parse_probe(
            sh(probe_script(workdir, target, "gnu", with_mode=False)), with_mode=False
        )
        assert found is not None and found.recorded is None, damaged


def test_a_probe_touches_the_record_so_its_mtime_says_when_the_file_was_last_wanted(
    pushed: tuple[str, str, str],
) -> None:
    workdir, target, _ = pushed
    record = record_path(workdir, target)
    os.utime(record, (1_000_000_000, 1_000_000_000))
    sh(probe_script(workdir, target, "gnu", with_mode=False))
    assert os.stat(record).st_mtime > 1_000_000_000


def test_on_a_filesystem_of_whole_seconds_a_fresh_record_is_not_trusted() -> None:
    # The probe's stat line as a filesystem stamping whole seconds prints it: the
    # record written in the file's own second might miss a rewrite of the same size.
    digest = "ab" * 32
    stat_line = "7000 1700000000 2023-11-14 22:13:20.000000000 +0000 1700000000 x"

    def probe(recorded_at: int) -> str:
        return "\n".join(["present", stat_line, "--etdeploy-record--", RECORD_FORMAT, "/w/x",
                          digest, str(recorded_at), stat_line])  # fmt: skip

    assert parse_probe(probe(1_700_000_001), with_mode=False).recorded is None  # type: ignore[union-attr]
    assert parse_probe(probe(1_700_000_002), with_mode=False).recorded == digest  # type: ignore[union-attr]
    # BSD stat's form: seconds with nine decimals.
    bsd = "7000 1700000000 1700000000.000000000 1700000000 1700000000.000000000"
    assert "stat -f" in identity_command("/w/x", "bsd")
    lines = [
        "present",
        bsd,
        "--etdeploy-record--",
        RECORD_FORMAT,
        "/w/x",
        digest,
        "1700000001",
        bsd,
    ]
    assert parse_probe("\n".join(lines), with_mode=False).recorded is None  # type: ignore[union-attr]


def test_a_path_a_one_line_record_cannot_hold_is_never_recorded() -> None:
    assert record_command("/w", "/w/a\nb", "ab" * 32, "gnu") == ""
