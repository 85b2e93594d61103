"""What every device does to move a file (etdeploy.devices.transfer)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from etdeploy.devices.transfer import (
    PARTIAL_MARKER,
    BackgroundDigest,
    drop_local_partials,
    local_partial,
    parse_sha256_line,
    prepare_command,
    temporary_name,
)
from etdeploy.digests import sha256_file


def test_a_local_partial_becomes_the_file_only_when_written_whole(tmp_path: Path) -> None:
    target = tmp_path / "out" / "result.bin"
    with local_partial(target) as partial:
        assert PARTIAL_MARKER in partial.name and partial.parent == target.parent
        partial.write_bytes(b"whole")
    assert target.read_bytes() == b"whole"
    with pytest.raises(RuntimeError), local_partial(target) as partial:
        partial.write_bytes(b"half")
        raise RuntimeError("cut")
    assert target.read_bytes() == b"whole"
    assert sorted(p.name for p in target.parent.iterdir()) == ["result.bin"]


def test_the_push_prefix_makes_the_directory_and_drops_only_that_files_partials(
    tmp_path: Path,
) -> None:
    remote = tmp_path / "job" / "model.pte"
    remote.parent.mkdir()
    stale = Path(temporary_name(str(remote)) + "123")  # another process's cut push
    stale.write_bytes(b"half")
    other = Path(temporary_name(str(remote.parent / "inputs.bin")))
    other.write_bytes(b"someone else's")
    nested = tmp_path / "new" / "dir" / "runner"
    for target in (remote, nested):
        subprocess.run(["sh", "-c", prepare_command(str(target)) + "true"], check=True)
    assert not stale.exists() and other.exists() and nested.parent.is_dir()


def test_local_partials_are_dropped_the_same_way(tmp_path: Path) -> None:
    target = tmp_path / "a [weird] name*.bin"
    stale = Path(temporary_name(str(target)) + "9")
    stale.write_bytes(b"half")
    other = Path(temporary_name(str(tmp_path / "a.bin")))
    other.write_bytes(b"keep")
    drop_local_partials(target)
    assert not stale.exists() and other.exists()


def test_sha256sum_and_shasum_lines_give_the_digest() -> None:
    digest = "ab" * 32
    assert parse_sha256_line(f"{digest}  /tmp/x\n") == digest
    assert parse_sha256_line(f"\\{digest.upper()}  /tmp/a\\nb\n") == digest
    assert parse_sha256_line("") == ""


def test_a_local_digest_is_read_again_only_when_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(b"one")
    first = BackgroundDigest(path).result()
    assert first == sha256_file(path)
    path.write_bytes(b"two")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert BackgroundDigest(path).result() == sha256_file(path) != first
