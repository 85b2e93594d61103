"""`etdeploy sizecheck`: tables and exit codes (0 fits, 1 over, 2 bad input), the JSON
report on stdout or in a file, and a start that never imports torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import etdeploy.cli.sizecheck  # noqa: F401  registers the command on the app
from etdeploy.cli import app
from tests.sizecheck.conftest import BuiltPrograms

runner = CliRunner()


def test_a_model_that_fits_exits_0_with_verdicts_and_breakdown(programs: BuiltPrograms) -> None:
    done = runner.invoke(app, ["sizecheck", str(programs.xnnpack), "--top", "2"])
    assert done.exit_code == 0, done.output
    out = done.stdout
    assert "Play base module" in out and "App Store app" in out and "fits" in out
    assert "delegate blob: XnnpackBackend" in out
    assert "largest 2 of 6 constant tensors" in out
    assert "int8 weights (estimate)" in out


def test_over_the_budget_exits_1_with_one_line_and_a_hint(programs: BuiltPrograms) -> None:
    done = runner.invoke(app, ["sizecheck", str(programs.portable), "--budget", "1MB"])
    assert done.exit_code == 1
    assert "error: over team budget (1.00 MB) by" in done.stderr
    assert "hint:" in done.stderr


def test_a_delivery_with_extra_bytes_judges_the_whole_module(programs: BuiltPrograms) -> None:
    done = runner.invoke(
        app,
        ["sizecheck", str(programs.portable), "--store", "appstore", "--delivery", "app-clip",
         "--extra", "12MB", "--no-level9"],
    )  # fmt: skip
    assert done.exit_code == 1  # 3.7 MB + 12 MB is over the 15 MB App Clip
    assert "over App Clip, iOS 16+ (15.00 MB)" in done.stderr


def test_json_to_stdout_is_only_json(programs: BuiltPrograms) -> None:
    done = runner.invoke(app, ["sizecheck", str(programs.xnnpack), "--json", "-"])
    assert done.exit_code == 0
    doc = json.loads(done.stdout)
    assert doc["schema"] == "etdeploy.sizecheck/1"
    assert doc["files"][0]["breakdown"]["total_bytes"] == programs.xnnpack.stat().st_size


def test_json_to_a_file_is_written_whole(programs: BuiltPrograms, tmp_path: Path) -> None:
    target = tmp_path / "reports" / "size.json"
    done = runner.invoke(
        app, ["sizecheck", str(programs.portable), "--json", str(target), "--budget", "1MB"]
    )
    assert done.exit_code == 1  # the report is written even when the check fails
    doc = json.loads(target.read_text())
    assert doc["failed"] is True
    assert [p.name for p in target.parent.iterdir()] == ["size.json"]  # no temp file left


def test_any_file_sizes_an_asset_without_a_breakdown(programs: BuiltPrograms) -> None:
    refused = runner.invoke(app, ["sizecheck", str(programs.weights)])
    assert refused.exit_code == 2
    assert "not an ExecuTorch program" in refused.stderr and "--any-file" in refused.stderr
    done = runner.invoke(app, ["sizecheck", str(programs.weights), "--any-file", "--json", "-"])
    assert done.exit_code == 0
    assert json.loads(done.stdout)["files"][0]["breakdown"] is None


def test_bad_flags_are_exit_2(programs: BuiltPrograms, tmp_path: Path) -> None:
    for args, message in (
        (["--store", "steam"], "not a store"),
        (["--delivery", "sideload"], "not a delivery"),
        (["--budget", "lots"], "--budget: cannot read 'lots'"),
        (["--extra", "-1"], "--extra: cannot read"),
    ):
        done = runner.invoke(app, ["sizecheck", str(programs.portable), *args])
        assert done.exit_code == 2, args
        assert message in done.stderr
    missing = runner.invoke(app, ["sizecheck", str(tmp_path / "nope.pte")])
    assert missing.exit_code == 2 and "no such file" in missing.stderr


def test_sizecheck_runs_without_importing_torch(programs: BuiltPrograms) -> None:
    code = (
        "import sys\nimport etdeploy.cli.sizecheck\nfrom etdeploy.cli import app\n"
        f"try:\n    app(['sizecheck', {str(programs.xnnpack)!r}, '--json', '-'])\n"
        "except SystemExit as e:\n    code = e.code\n"
        "print('RESULT', code, 'torch' in sys.modules, 'executorch' in sys.modules, "
        "file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "RESULT 0 False False" in done.stderr, done.stderr
    assert json.loads(done.stdout)["schema"] == "etdeploy.sizecheck/1"
