"""The app as a whole: its version, help that reads as documentation, global
flags anywhere on the line, one short-flag scheme, one meaning of --json, and
errors as one line with a hint. All of it starts without torch."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

import etdeploy
from etdeploy.cli import app
from tests.cli.conftest import assert_one_line_error
from tests.cli.conftest import etdeploy as run_cli
from tests.support.adb_server import free_port


def commands() -> Iterator[tuple[str, Any]]:
    """Every command a user can type, by its full name ("runner build"). typer
    builds on its own copy of click: groups are told apart by their commands."""

    def walk(group: Any, prefix: str) -> Iterator[tuple[str, Any]]:
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from walk(command, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", command

    return walk(typer.main.get_command(app), "")


def test_version_prints_etdeploys_and_exits_0(tmp_path: Path) -> None:
    done = run_cli("--version", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == f"etdeploy {etdeploy.__version__}"


def test_each_command_is_summed_up_in_one_line_of_its_groups_listing() -> None:
    # The listing shows a docstring's first paragraph as written: a line break in
    # it breaks the row mid-sentence.
    for name, command in commands():
        summary = (command.help or "").strip().split("\n\n")[0]
        assert summary and "\n" not in summary, (name, summary)


def test_each_short_flag_means_one_long_flag_in_every_command() -> None:
    meaning: dict[str, set[str]] = {}
    for _name, command in commands():
        for param in command.params:
            if param.param_type_name != "option":
                continue
            # farm's --out (a folder) and build's --output (a file) both say where
            # the command's output goes.
            longs = [{"--out": "--output"}.get(o, o) for o in param.opts if o.startswith("--")]
            for short in (o for o in param.opts if not o.startswith("--")):
                meaning.setdefault(short, set()).update(longs)
    assert {short: longs for short, longs in meaning.items() if len(longs) > 1} == {}
    # The scheme: -v/-q are verbose/quiet everywhere, -d the device, -b the backend.
    assert meaning["-v"] == {"--verbose"} and meaning["-q"] == {"--quiet"}
    assert meaning["-d"] == {"--device"} and meaning["-b"] == {"--backend"}


def test_every_command_takes_the_global_flags_and_shows_examples(tmp_path: Path) -> None:
    for name, command in commands():
        flags = {o for p in command.params for o in p.opts}
        assert {"-v", "--verbose", "-q", "--quiet"} <= flags, name
    # Help as a user pipes it: examples, nothing cut.
    for name in ("build", "inspect", "run", "devices", "doctor", "sizecheck", "runner build"):
        done = run_cli(*name.split(), "--help", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        text = done.stdout
        assert "Examples" in text and f"etdeploy {name}" in text, name
        assert "…" not in text, (name, text)
    run_help = run_cli("run", "-h", cwd=tmp_path).stdout
    for panel in ("Model and build", "Inputs and reference", "Device", "Verification"):
        assert panel in run_help
    assert ".npy .npz .pt .bin .png .jpg" in run_help  # was cut to ".npy/.npz/.pt/.bi…"


def _groups_and_commands() -> Iterator[tuple[str, Any]]:
    """Every group (the root "", "farm", ...) and command, by its full name."""

    def walk(group: Any, prefix: str) -> Iterator[tuple[str, Any]]:
        yield prefix.strip(), group
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from walk(command, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", command

    return walk(typer.main.get_command(app), "")


def _bracketed(text: str) -> list[str]:
    """The bracketed words of a help text as written (a TOML table such as [release])."""
    return re.findall(r"\[[^\[\]\s]+\]", text)


def test_no_help_text_of_any_command_loses_a_bracketed_word() -> None:
    """Help is rendered as rich markup (the examples are bold): a bracketed word in
    a command's, a group's or an option's help must still be there to read."""
    runner = CliRunner()
    checked = 0
    for name, command in _groups_and_commands():
        written = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        expected = [word for text in written for word in _bracketed(text)]
        if not expected:
            continue
        done = runner.invoke(app, [*name.split(), "--help"], terminal_width=200)
        assert done.exit_code == 0, done.output
        shown = " ".join(done.output.split())
        for word in expected:
            assert word in shown, (name, word)
            assert "\\" + word not in shown, (name, word)  # shown as written, not escaped twice
            checked += 1
    assert checked >= 5  # [release], [build], [run], [explore] among them


def test_verbose_and_quiet_work_after_the_subcommand(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pte"
    plain = run_cli("inspect", missing, cwd=tmp_path)
    assert_one_line_error(plain, 2, f"not a file: {missing}")
    after = run_cli("inspect", missing, "-v", cwd=tmp_path)
    before = run_cli("-v", "inspect", missing, cwd=tmp_path)
    for done in (after, before):
        assert done.returncode == 2 and "Traceback" in done.stderr
    assert run_cli("inspect", missing, "--quiet", cwd=tmp_path).returncode == 2


def test_the_old_dash_q_for_quantize_is_told_what_it_is_now(tmp_path: Path) -> None:
    done = run_cli("run", "digits", "-q", "int8", cwd=tmp_path)
    assert_one_line_error(done, 2, "-q is --quiet; quantization is --quantize")
    assert "--quantize int8" in done.errors[-1]


def test_json_takes_a_path_or_dash_never_the_next_option(tmp_path: Path) -> None:
    done = run_cli("doctor", "--json", "--no-devices", cwd=tmp_path)
    assert_one_line_error(done, 2, "--json takes PATH or -, not '--no-devices'")
    assert list(tmp_path.iterdir()) == []


def test_json_dash_is_the_document_alone_on_stdout_and_a_path_is_a_file(tmp_path: Path) -> None:
    """One meaning for every command that has --json (farm keeps its own)."""
    to_stdout = run_cli("doctor", "--no-devices", "--json", "-", cwd=tmp_path)
    doc = json.loads(to_stdout.stdout)  # nothing but the document
    assert doc["schema"] == "etdeploy.doctor/1"
    to_file = run_cli("doctor", "--no-devices", "--json", tmp_path / "d.json", cwd=tmp_path)
    written = json.loads((tmp_path / "d.json").read_text())
    assert [c["area"] for c in written["checks"]] == [c["area"] for c in doc["checks"]]
    assert "checks:" in to_file.stdout  # the table still prints when the document goes to a file
    unwritable = run_cli("doctor", "--no-devices", "--json", tmp_path / "no" / "such" / "dir" / "..",
                         cwd=tmp_path)  # fmt: skip
    assert unwritable.returncode == 2 and "Traceback" not in unwritable.stderr


def test_a_piped_doctor_keeps_each_check_on_one_line(tmp_path: Path) -> None:
    port = str(free_port())  # both runs ask the same (absent) adb server
    doc = json.loads(
        run_cli("doctor", "--no-devices", "--json", "-", cwd=tmp_path,
                ANDROID_ADB_SERVER_PORT=port).stdout
    )  # fmt: skip
    shown = run_cli("doctor", "--no-devices", cwd=tmp_path, ANDROID_ADB_SERVER_PORT=port)
    table = shown.stdout.splitlines()
    for check in doc["checks"]:
        row = re.compile(rf"^│ {re.escape(check['area'])} +│ {re.escape(check['name'])} +│")
        lines = [line for line in table if row.match(line)]
        assert len(lines) == 1, (check["name"], table)
        assert check["detail"] in lines[0]  # the whole detail, on that line


def test_shell_completion_can_be_installed_and_completes_commands(tmp_path: Path) -> None:
    # What `--install-completion` puts in ~/.bashrc asks for the script this way
    # (the flag itself guesses the shell from the process tree, which a test
    # runner's may not show).
    done = run_cli(cwd=tmp_path, _ETDEPLOY_COMPLETE="source_bash")
    assert done.returncode == 0, done.stderr
    assert "complete" in done.stdout and "_ETDEPLOY_COMPLETE" in done.stdout
    # And what the script asks when a user presses Tab after `etdeploy ru`.
    done = run_cli(
        cwd=tmp_path, _ETDEPLOY_COMPLETE="complete_bash", COMP_WORDS="etdeploy ru", COMP_CWORD="1"
    )
    assert done.returncode == 0 and done.stdout.split() == ["run", "runner"], done


@pytest.mark.parametrize("command", [["devices"], ["doctor", "--no-devices"], ["sizecheck", "x"]])
def test_an_error_starts_on_its_first_line(tmp_path: Path, command: list[str]) -> None:
    done = run_cli(*command, "--config", tmp_path / "missing.toml", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: "), done.stderr


def test_the_flags_of_one_invocation_do_not_leak_into_the_next(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    runner = CliRunner()
    verbose = runner.invoke(app, ["inspect", str(tmp_path / "nope.pte"), "-v"])
    plain = runner.invoke(app, ["inspect", str(tmp_path / "nope.pte")])
    assert verbose.exit_code == plain.exit_code == 2
    assert "Traceback" in verbose.output and "Traceback" not in plain.output


@pytest.mark.parametrize(
    ("args", "message", "hint"),
    [
        (["run", "digits", "-n", "0"], "--iterations / -n must be at least 1, got 0",
         "e.g. --iterations 10"),
        (["run", "digits", "--itrations", "3"], "No such option: --itrations", "--help"),
        (["run", "digits", "--device"], "'--device' requires an argument", "--help"),
        (["sizecheck"], "Missing argument", "--help"),
        (["nosuch"], "No such command 'nosuch'", "--help"),
        (["farm", "run", "spec.toml", "--jobs-per-device", "x"], "'--jobs-per-device'", "--help"),
    ],
)  # fmt: skip
def test_a_usage_error_is_one_error_line_a_hint_and_exit_2(
    tmp_path: Path, args: list[str], message: str, hint: str
) -> None:
    """A range etdeploy checks and typer's own checks (an unknown option, a missing
    value) answer alike, not with a boxed panel under the usage line."""
    done = run_cli(*args, cwd=tmp_path)
    assert_one_line_error(done, 2, message)
    assert hint in done.errors[1] and "╭" not in done.stderr
