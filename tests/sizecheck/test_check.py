"""check_size: several files and directories judged together, --extra for the rest of the app,
budgets, the default verdicts of `run`/`farm`, and the versioned JSON report."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from etdeploy.errors import UsageError
from etdeploy.sizecheck.check import (
    FITS,
    OVER,
    SCHEMA,
    check_size,
    report_to_json,
)
from etdeploy.sizecheck.compress import gzip_size
from etdeploy.sizecheck.limits import apply_overrides, default_limits
from tests.support.programs import BuiltPrograms


def _status(report, key: str) -> str:  # type: ignore[no-untyped-def]
    return next(v.status for v in report.verdicts if v.limit.key == key)


def test_a_pte_is_measured_raw_and_compressed_with_its_breakdown(programs: BuiltPrograms) -> None:
    report = check_size([programs.portable])
    (f,) = report.files
    assert f.kind == "pte" and f.layout is not None and f.breakdown is not None
    assert f.raw_bytes == programs.portable.stat().st_size
    # The per-part pass is the whole-file estimate: same bytes, within a few per part.
    assert abs(f.download_bytes - gzip_size(programs.portable)) < 50 * len(f.breakdown.parts)
    assert f.level9_bytes is not None and f.level9_bytes <= f.download_bytes
    assert report.raw_bytes == f.raw_bytes and report.download_bytes == f.download_bytes
    assert not report.failed
    assert _status(report, "play.base") == FITS and _status(report, "appstore.app") == FITS


def test_files_and_directories_are_summed_and_extra_is_added(
    programs: BuiltPrograms, tmp_path: Path
) -> None:
    libs = tmp_path / "libs" / "arm64-v8a"
    libs.mkdir(parents=True)
    (libs / "libexecutorch.so").write_bytes(programs.weights.read_bytes()[:300_000])
    (libs.parent / "README").write_text("not a pte, sized as an asset\n" * 50)
    os.mkfifo(libs / "a-fifo")  # not a regular file: skipped with a note, never opened
    report = check_size([programs.xnnpack, tmp_path / "libs"], extra_bytes="12MB")
    paths = [f.path.name for f in report.files]
    assert paths == ["xnnpack.pte", "README", "libexecutorch.so"]
    assert [f.kind for f in report.files] == ["pte", "file", "file"]
    assert report.extra_bytes == 12_000_000
    assert report.raw_bytes == sum(f.raw_bytes for f in report.files) + 12_000_000
    assert report.download_bytes == sum(f.download_bytes for f in report.files) + 12_000_000
    assert any("a-fifo" in n and "not a regular file" in n for n in report.notes)


def test_a_file_given_twice_is_counted_once(programs: BuiltPrograms) -> None:
    report = check_size([programs.portable, programs.portable])
    assert len(report.files) == 1
    assert any("given twice" in n for n in report.notes)


def test_the_whole_module_is_judged_at_the_limit_boundary(programs: BuiltPrograms) -> None:
    size = check_size([programs.portable], store="play").download_bytes
    base = default_limits()["play.base"].bytes
    at = check_size([programs.portable], store="play", extra_bytes=base - size)
    assert at.download_bytes == base and _status(at, "play.base") == FITS and not at.failed
    over = check_size([programs.portable], store="play", extra_bytes=base - size + 1)
    assert _status(over, "play.base") == OVER and over.failed
    (v,) = [v for v in over.verdicts if v.limit.key == "play.base"]
    assert v.headroom_bytes == -1 and v.describe() == "over by 1 B"


def test_a_budget_is_held_against_the_download_or_the_raw_size(programs: BuiltPrograms) -> None:
    first = check_size([programs.portable], store="play")
    ok = check_size([programs.portable], store="play", budget=first.download_bytes)
    assert _status(ok, "budget") == FITS and not ok.failed
    tight = check_size([programs.portable], store="play", budget=first.download_bytes - 1)
    assert _status(tight, "budget") == OVER and tight.failed
    raw = check_size(
        [programs.portable], store="play", budget=first.download_bytes, budget_measure="raw"
    )
    assert _status(raw, "budget") == OVER  # raw is larger than the download


def test_overridden_limits_decide_the_verdict(programs: BuiltPrograms) -> None:
    tiny = apply_overrides(default_limits(), {"play.base": "1MB"})
    report = check_size([programs.portable], store="play", limits=tiny)
    assert _status(report, "play.base") == OVER and report.failed


def test_non_pte_files_need_any_file(programs: BuiltPrograms) -> None:
    with pytest.raises(UsageError, match="not an ExecuTorch program"):
        check_size([programs.weights])
    report = check_size([programs.weights], any_file=True, levels=(6,))
    (f,) = report.files
    assert f.kind == "file" and f.breakdown is None and f.level9_bytes is None


def test_the_json_report_is_versioned_and_complete(programs: BuiltPrograms) -> None:
    report = check_size([programs.xnnpack], budget="100MB", extra_bytes=1000)
    doc = json.loads(json.dumps(report_to_json(report, top=3)))
    assert doc["schema"] == SCHEMA == "etdeploy.sizecheck/1"
    assert doc["total"] == {
        "raw_bytes": report.raw_bytes,
        "download_bytes": report.download_bytes,
        "level9_bytes": report.level9_bytes,
        "download_uncertainty_bytes": 0,
    }
    assert doc["estimate"]["method"] == "exact"
    (f,) = doc["files"]
    assert f["estimate"] == "exact" and f["error_bound"] == 0 and f["level9_error_bound"] == 0
    assert f["deflated_bytes"] == f["raw_bytes"]
    assert f["pte"]["file_identifier"] == "ET12"
    assert f["pte"]["delegates"][0]["backend_id"] == "XnnpackBackend"
    assert f["pte"]["methods"][0]["planned_arena_bytes"] > 0
    assert f["breakdown"]["total_bytes"] == f["raw_bytes"]
    assert len(f["breakdown"]["largest_tensors"]) == 3
    over_budget = check_size([programs.xnnpack], budget=1000, levels=(6,))
    (v,) = [v for v in report_to_json(over_budget)["verdicts"] if v["key"] == "budget"]
    assert v["status"] == "over" and v["excess_bytes"] == over_budget.download_bytes - 1000
    assert v["headroom_bytes"] == -v["excess_bytes"] and v["text"].startswith("over by")
    keys = {v["key"] for v in doc["verdicts"]}
    assert {"play.base", "appstore.app", "budget"} <= keys
    assert all(v["status"] in ("fits", "over", "warning") for v in doc["verdicts"])
    assert doc["failed"] is False


def test_a_directory_named_like_a_program_is_refused(tmp_path: Path) -> None:
    # `sizecheck out/model.pte` where the build left a directory: not a folder to sum.
    folder = tmp_path / "model.pte"
    folder.mkdir()
    (folder / "model.pte").write_bytes(b"x" * 10)
    with pytest.raises(UsageError, match=r"model\.pte: is a directory, not a \.pte file"):
        check_size([folder])
    assert check_size([folder], any_file=True).raw_bytes == 10  # as an asset folder it sums


def test_nothing_to_size_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no files to size"):
        check_size([])
    with pytest.raises(UsageError, match="hold no files"):
        check_size([tmp_path])
