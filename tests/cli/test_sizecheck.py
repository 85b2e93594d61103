"""`etdeploy sizecheck`: tables and exit codes (0 fits, 1 over, 2 bad input), the JSON
report on stdout or in a file, and a start that never imports torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import etdeploy.cli.sizecheck  # noqa: F401  registers the command on the app
from etdeploy.cli import app
from tests.support.programs import BuiltPrograms, TrainedPrograms

runner = CliRunner()


def test_a_model_that_fits_exits_0_with_verdicts_and_with_v_its_breakdown(
    programs: BuiltPrograms,
) -> None:
    done = runner.invoke(app, ["sizecheck", str(programs.xnnpack), "--top", "2", "-v"])
    assert done.exit_code == 0, done.output
    out = done.stdout
    assert "Play base module" in out and "App Store app" in out and "fits" in out
    assert "delegate blob: XnnpackBackend" in out
    assert "largest 2 of 6 constant tensors" in out
    assert "int8 weights (estimate)" in out
    assert "source (read 2026-12-02): https://support.google.com/" in out


def test_a_plain_call_for_a_small_file_is_a_line_per_file_and_per_verdict(
    programs: BuiltPrograms,
) -> None:
    done = runner.invoke(app, ["sizecheck", str(programs.xnnpack)])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    # A header and the file; a header and the four default verdicts.
    assert len(lines) == 7, done.stdout
    assert lines[1].startswith(str(programs.xnnpack)) and lines[1].split()[-1] in (
        "exact", "(cached)"
    )  # fmt: skip
    assert [line.split("  ")[0] for line in lines[3:]] == [
        "Play base module", "Play all modules + install-time packs",
        "App Store app (uncompressed)", "App Store cellular download prompt",
    ]  # fmt: skip
    assert "what it is made of" not in done.stdout
    # One pointer to the details; the limits' caveats wait for -v or a limit not met.
    assert done.stderr.splitlines() == [
        "what it is made of, its largest tensors and where each limit was read: add -v"
    ]


def test_quiet_prints_no_note_and_the_console_says_exact_or_sampled(
    programs: BuiltPrograms, trained: TrainedPrograms, fresh_cache: Path
) -> None:
    done = runner.invoke(app, ["-q", "sizecheck", str(programs.xnnpack), "-v"])
    assert done.exit_code == 0, done.output
    assert done.stderr == ""  # not the breakdown's note, not a limit's
    assert "exact" in done.stdout.splitlines()[1]
    sampled = runner.invoke(
        app, ["-q", "sizecheck", str(trained.float_payload), "--any-file", "--estimate", "sample"]
    )
    assert sampled.exit_code == 0, sampled.output
    assert "sampled ±" in sampled.stdout.splitlines()[1] and sampled.stderr == ""


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


def _one_error(stderr: str, message: str) -> None:
    """Exactly one error line naming the problem, then a hint; no traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 2, stderr
    assert lines[0].startswith("error: ") and message in lines[0], stderr
    assert lines[1].startswith("hint: ")


def test_each_bad_input_is_one_line_and_exit_2(programs: BuiltPrograms, tmp_path: Path) -> None:
    raw = programs.portable.read_bytes()
    (tmp_path / "cut.pte").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    (tmp_path / "out.pte").mkdir()  # a directory where the program was meant to be
    os.mkfifo(tmp_path / "pipe.pte")  # unreadable without blocking (root reads chmod 000)
    (tmp_path / "gone.pte").symlink_to(tmp_path / "deleted.pte")
    for name, message in (
        ("cut.pte", "cut.pte: truncated"),
        ("image.png", "image.png: not an ExecuTorch program"),
        ("out.pte", "out.pte: is a directory, not a .pte file"),
        ("pipe.pte", "pipe.pte: is not a regular file"),
        ("gone.pte", "gone.pte: broken symbolic link"),
        ("missing.pte", "missing.pte: no such file"),
    ):
        done = runner.invoke(app, ["sizecheck", str(tmp_path / name)])
        assert done.exit_code == 2, (name, done.output)
        _one_error(done.stderr, message)
        assert done.stdout == ""


def test_several_files_with_extra_are_judged_together(programs: BuiltPrograms) -> None:
    done = runner.invoke(
        app,
        ["sizecheck", str(programs.xnnpack), str(programs.portable), "--extra", "1.5MB",
         "--no-level9", "--json", "-"],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert [Path(f["path"]).name for f in doc["files"]] == ["xnnpack.pte", "portable.pte"]
    raw = programs.xnnpack.stat().st_size + programs.portable.stat().st_size + 1_500_000
    assert doc["total"]["raw_bytes"] == raw
    assert doc["total"]["download_bytes"] == sum(f["download_bytes"] for f in doc["files"]) + (
        1_500_000
    )
    assert doc["total"]["level9_bytes"] is None


def _write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "etdeploy.toml"
    path.write_text(text)
    return path


def test_the_config_file_sets_deliveries_extra_and_limits(
    programs: BuiltPrograms, tmp_path: Path
) -> None:
    config = _write_config(
        tmp_path,
        '[sizecheck]\nstore = "appstore"\ndeliveries = ["app-clip"]\nextra = "12MB"\n',
    )
    done = runner.invoke(app, ["sizecheck", str(programs.portable), "--config", str(config)])
    assert done.exit_code == 1  # 3.7 MB + 12 MB is over the 15 MB App Clip
    assert "over App Clip, iOS 16+ (15.00 MB)" in done.stderr
    assert f"settings from {config}" in done.stderr
    # A flag overrides the file: without the extra, the program alone fits.
    done = runner.invoke(
        app, ["sizecheck", str(programs.portable), "--config", str(config), "--extra", "0",
              "--json", "-"],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert doc["config"] == str(config) and doc["extra_bytes"] == 0
    assert next(v["key"] for v in doc["verdicts"]) == "appstore.app-clip"


def test_limits_and_budget_come_from_the_nearest_config(
    programs: BuiltPrograms, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_config(tmp_path, '[sizecheck]\nbudget = "1MB"\n[limits]\n"play.base" = "2MB"\n')
    work = tmp_path / "sub" / "dir"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)  # found in a parent directory, as every command finds it
    done = runner.invoke(app, ["sizecheck", str(programs.portable), "--json", "-"])
    assert done.exit_code == 1
    doc = json.loads(done.stdout)
    by_key = {v["key"]: v for v in doc["verdicts"]}
    assert by_key["play.base"]["limit_bytes"] == 2_000_000
    assert by_key["play.base"]["status"] == "over"
    assert by_key["budget"]["limit_bytes"] == 1_000_000
    assert by_key["budget"]["source"] == "etdeploy.toml [sizecheck] budget"
    # --budget replaces the file's budget.
    done = runner.invoke(
        app, ["sizecheck", str(programs.portable), "--budget", "1GB", "--store", "appstore"]
    )
    assert done.exit_code == 0, done.output


def test_a_bad_config_value_is_one_line_naming_the_key(
    programs: BuiltPrograms, tmp_path: Path
) -> None:
    for text, message in (
        ('[sizecheck]\ndeliveries = ["base", "sideload"]\n',
         "etdeploy.toml: sizecheck.deliveries: 'sideload' is not a delivery"),
        ('[limits]\n"appstore.ap" = "1GB"\n', "etdeploy.toml: limits.appstore.ap: no such limit"),
        ('[sizecheck]\nextra = "lots"\n', "etdeploy.toml: sizecheck.extra: cannot read 'lots'"),
        ('[sizecheck]\nbugdet = "1MB"\n', "etdeploy.toml: unknown key sizecheck.bugdet"),
    ):  # fmt: skip
        config = _write_config(tmp_path, text)
        done = runner.invoke(app, ["sizecheck", str(programs.portable), "--config", str(config)])
        assert done.exit_code == 2, (text, done.output)
        _one_error(done.stderr, message)
    done = runner.invoke(
        app, ["sizecheck", str(programs.portable), "--config", str(tmp_path / "nope.toml")]
    )
    assert done.exit_code == 2
    _one_error(done.stderr, "config file not found")


def test_a_sampled_estimate_says_so_in_the_table_and_the_json(
    trained: TrainedPrograms, fresh_cache: Path
) -> None:
    args = ["sizecheck", str(trained.float_payload), "--any-file", "--estimate", "sample"]
    done = runner.invoke(app, [*args, "--json", "-"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    (f,) = doc["files"]
    assert f["estimate"].startswith("sampled ±") and doc["estimate"]["method"] == f["estimate"]
    assert 0 < f["error_bound"] < 0.01 and f["deflated_bytes"] < f["raw_bytes"] / 4
    play = next(v for v in doc["verdicts"] if v["key"] == "play.base")
    assert play["uncertainty_bytes"] == f["download_uncertainty_bytes"] > 0
    assert play["headroom_bytes"] == (
        play["limit_bytes"] - play["measured_bytes"] - play["uncertainty_bytes"]
    )
    table = runner.invoke(app, args)
    assert table.exit_code == 0
    assert "sampled ±" in table.stdout.splitlines()[1]  # the file's line says how it was measured
    assert "fits" in table.stdout and "(sampled ±" in table.stdout  # and so does each verdict
    assert "download sizes sampled" in table.stderr


def test_a_second_run_reads_the_figures_back(programs: BuiltPrograms, fresh_cache: Path) -> None:
    runs = [
        json.loads(runner.invoke(app, ["sizecheck", str(programs.portable), "--json", "-"]).stdout)
        for _ in range(2)
    ]
    assert [r["files"][0]["cached"] for r in runs] == [False, True]
    assert runs[0]["total"] == runs[1]["total"] and runs[0]["verdicts"] == runs[1]["verdicts"]
    fresh = runner.invoke(app, ["sizecheck", str(programs.portable), "--no-cache", "--json", "-"])
    assert json.loads(fresh.stdout)["files"][0]["cached"] is False


def test_a_bad_estimate_is_one_line_with_a_hint(programs: BuiltPrograms) -> None:
    done = runner.invoke(app, ["sizecheck", str(programs.portable), "--estimate", "fast"])
    assert done.exit_code == 2 and done.stdout == ""
    _one_error(done.stderr, "--estimate 'fast': not an estimate")
    assert "--estimate sample" in done.stderr
