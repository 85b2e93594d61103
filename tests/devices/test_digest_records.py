"""Digest records on a device (etdeploy.devices.digest_records): the shell they run is run
here by this machine's /bin/sh with its GNU stat, as a phone's toybox or a Linux
host would run it; what a record is trusted for is checked line by line."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from etdeploy.devices.digest_records import (
    _IDENTITY_MARK,
    _RECORDS_MARK,
    PROBE_SCRIPT_MAX,
    RECORD_FORMAT,
    Probe,
    identity_command,
    probe_batches,
    probes_script,
    read_probes,
    record_command,
    record_path,
)
from etdeploy.devices.transfer import PARTIAL_MARKER


def sh(script: str) -> str:
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=True)
    return done.stdout


def probe(workdir: str, target: str, *, with_mode: bool = False) -> Probe | None:
    """One target probed the way a push probes it (a batch of one)."""
    script = probes_script(workdir, [target], "gnu", with_mode=with_mode)
    return read_probes(sh(script), [target], with_mode=with_mode)[0]


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
    found = probe(workdir, target, with_mode=True)
    assert found is not None
    assert (found.size, found.mode, found.recorded) == (7000, 0o644, digest)
    record = Path(record_path(workdir, target)).read_text().splitlines()
    assert record[:3] == [RECORD_FORMAT, target, digest]


def test_a_missing_file_probes_as_absent_and_its_directory_is_made(tmp_path: Path) -> None:
    target = str(tmp_path / "new" / "dir" / "x.bin")
    assert probe(str(tmp_path), target) is None
    assert Path(target).parent.is_dir()


def test_any_change_to_the_file_makes_its_record_untrusted(
    pushed: tuple[str, str, str],
) -> None:
    workdir, target, _ = pushed
    st = os.stat(target)
    Path(target).write_bytes(b"WEIGHTS" * 1000)  # same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back
    found = probe(workdir, target)
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
        found = probe(workdir, target)
        assert found is not None and found.recorded is None, damaged


def test_a_probe_touches_the_record_so_its_mtime_says_when_the_file_was_last_wanted(
    pushed: tuple[str, str, str],
) -> None:
    workdir, target, _ = pushed
    record = record_path(workdir, target)
    os.utime(record, (1_000_000_000, 1_000_000_000))
    probe(workdir, target)
    assert os.stat(record).st_mtime > 1_000_000_000


def test_on_a_filesystem_of_whole_seconds_a_fresh_record_is_not_trusted() -> None:
    # The probe's stat line as a filesystem stamping whole seconds prints it: the
    # record written in the file's own second might miss a rewrite of the same size.
    digest = "ab" * 32
    stat_line = "7000 1700000000 2023-11-14 22:13:20.000000000 +0000 1700000000 x"

    def answer(recorded_at: int, line: str = stat_line) -> str | None:
        output = "\n".join(["present", _IDENTITY_MARK, line, _RECORDS_MARK, RECORD_FORMAT, "/w/x",
                             digest, str(recorded_at), line])  # fmt: skip
        (found,) = read_probes(output, ["/w/x"], with_mode=False)
        assert found is not None
        return found.recorded

    assert answer(1_700_000_001) is None
    assert answer(1_700_000_002) == digest
    # BSD stat's form: seconds with nine decimals.
    bsd = "7000 1700000000 1700000000.000000000 1700000000 1700000000.000000000"
    assert "stat -f" in identity_command("/w/x", "bsd")
    assert answer(1_700_000_001, bsd) is None


def test_a_path_a_one_line_record_cannot_hold_is_never_recorded() -> None:
    assert record_command("/w", "/w/a\nb", "ab" * 32, "gnu") == ""


def test_one_probe_answers_for_every_file_of_a_push(
    pushed: tuple[str, str, str], tmp_path: Path
) -> None:
    """A batch: each file's own record, absent files, the job's directory made, and
    what a cut push of one file left dropped (the other's partial is another file's)."""
    workdir, target, digest = pushed
    other = f"{workdir}/inputs/b.bin"
    os.makedirs(os.path.dirname(other))
    Path(other).write_bytes(b"b" * 10)
    sh(record_command(workdir, other, hashlib.sha256(b"b" * 10).hexdigest(), "gnu"))
    missing = f"{workdir}/inputs/new.bin"
    cut = Path(f"{workdir}/programs/.model.pte{PARTIAL_MARKER}0badc0de-1")
    cut.write_bytes(b"half")
    job = f"{workdir}/20261204-000000-abcdef"
    targets = [missing, target, other]
    script = probes_script(workdir, targets, "gnu", with_mode=False, directories=[job])
    found = read_probes(sh(script), targets, with_mode=False)
    assert found[0] is None
    assert found[1] is not None and (found[1].size, found[1].recorded) == (7000, digest)
    assert found[2] is not None and found[2].recorded == hashlib.sha256(b"b" * 10).hexdigest()
    assert Path(job).is_dir() and not cut.exists()


def test_a_probe_of_more_files_than_one_request_may_name_is_split(tmp_path: Path) -> None:
    """adb takes a request of at most 65535 bytes: a push of a thousand inputs (one
    file each, for upstream's runner) probes them in several scripts, each one short
    enough, and together they answer for every file."""
    workdir = str(tmp_path / "work")
    targets = [f"{workdir}/inputs/{i:064x}.bin" for i in range(1000)]
    batches = probe_batches(workdir, targets)
    assert len(batches) > 1 and [t for b in batches for t in b] == targets
    for batch in batches:
        script = probes_script(workdir, batch, "gnu", with_mode=False)
        assert len(script.encode()) < PROBE_SCRIPT_MAX
    found = read_probes(sh(probes_script(workdir, batches[0], "gnu", with_mode=False)),
                        batches[0], with_mode=False)  # fmt: skip
    assert found == [None] * len(batches[0])
