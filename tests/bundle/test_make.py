"""`etdeploy bundle MODEL -o DIR`: what a bundle holds, and where it may be written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etdeploy.bundle.job_bundle import BUNDLE_FILE, read_bundle_manifest
from etdeploy.digests import sha256_file
from etdeploy.settings import MACHINE, declared
from tests.cli.conftest import assert_one_line_error, etdeploy

pytestmark = pytest.mark.slow


def test_a_bundle_lists_every_file_it_holds_with_its_digest(digits_bundle: Path) -> None:
    manifest = read_bundle_manifest(digits_bundle)
    on_disk = {
        str(p.relative_to(digits_bundle))
        for p in digits_bundle.rglob("*")
        if p.is_file() and p != digits_bundle / BUNDLE_FILE
    }
    assert set(manifest.files) == on_disk
    for relative, entry in manifest.files.items():
        assert sha256_file(digits_bundle / relative) == entry.sha256
    assert manifest.model == "digits" and len(manifest.samples) == 360
    assert manifest.labels == "labels.npz"
    assert manifest.references.float == "references/float.npz"
    assert [(r.abi, r.kind) for r in manifest.runners] == [("x86_64", "host")]
    # The runner keeps its executable bit; the machine's own settings never travel.
    runner = digits_bundle / manifest.runners[0].directory / "etdeploy_runner"
    assert runner.stat().st_mode & 0o111
    machine = {e.name for e in declared() if e.option.scope == MACHINE}
    assert not machine & set(manifest.settings) and manifest.settings["iterations"] == 10


def test_a_folder_of_other_files_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    done = etdeploy("bundle", "digits", "-o", tmp_path / "mine", cwd=tmp_path)
    assert_one_line_error(done, 2, "holds other files and is not a job bundle")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


def test_an_old_bundle_is_replaced_whole(digits_bundle: Path, tmp_path: Path) -> None:
    first = etdeploy("bundle", "digits", "-o", tmp_path / "job", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (tmp_path / "job" / "stale.txt").write_text("from before")
    again = etdeploy("bundle", "digits", "-n", "5", "-o", tmp_path / "job", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert not (tmp_path / "job" / "stale.txt").exists()
    assert json.loads((tmp_path / "job" / BUNDLE_FILE).read_text())["settings"]["iterations"] == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job"]  # no partial or old folder


def test_a_bundle_that_fails_half_way_leaves_nothing_behind(tmp_path: Path) -> None:
    """A runner file that vanished while the bundle was being written (a cache cleaned
    meanwhile): the error surfaces, and neither the bundle nor its partial folder stays."""
    from etdeploy.pipeline.job import RunJob
    from etdeploy.pipeline.make_bundle import make_bundle, runners_for
    from etdeploy.runner_build import RunnerBundle

    (host,) = runners_for(("host",))
    gone = RunnerBundle(
        abi=host.abi, directory=host.directory, executable=host.executable,
        files=(*host.files, host.directory / "libvanished.so"), key="gone", kind=host.kind,
    )  # fmt: skip
    with pytest.raises(FileNotFoundError):
        make_bundle(RunJob(model="digits"), tmp_path / "job", [gone])
    assert list(tmp_path.iterdir()) == []
