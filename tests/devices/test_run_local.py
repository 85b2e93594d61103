"""`etdeploy run digits` on this machine's local device, where it fails: a runner
that goes silent, one that crashes, a work dir on a full disk (a real small
tmpfs), a run killed in the middle. Each is the real command, its exit code, its
one-line message and hint, and what it leaves behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.devices.transfer import PARTIAL_MARKER
from tests.support.device_config import write_config
from tests.support.tmpfs import small_tmpfs

pytestmark = pytest.mark.slow

DAY = 86400
# A runner that starts, says one line, then says nothing more (upstream's first line).
SILENT_RUNNER = "#!/bin/sh\necho 'Model loaded in 0.5 ms.'\nexec sleep 600\n"


def cli(*args: str | Path) -> Any:
    return CliRunner().invoke(app, [*map(str, args)], catch_exceptions=False)


def one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, output
    assert "hint:" in output and "Traceback" not in output
    return lines[0]


def hint_of(output: str) -> str:
    return " ".join(
        output[output.index("hint:") :].split("\n  |")[0].split()  # the hint, unwrapped
    )


def script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def host_runner() -> Path:
    from etdeploy.runner_build import ensure_runner

    return ensure_runner("host").directory


def test_a_runner_silent_past_the_idle_timeout_is_named_as_such(tmp_path: Path) -> None:
    runner = script(tmp_path / "executor_runner", SILENT_RUNNER)
    started = time.monotonic()
    done = cli("run", "digits", "--runner", runner, "-n", "1", "--idle-timeout", "2",
               "--deadline", "120", "--json", tmp_path / "r.json")  # fmt: skip
    assert done.exit_code == 3, done.output
    assert time.monotonic() - started < 60  # the silence stopped it, long before 120 s
    line = one_line_error(done.output)
    assert "said nothing for 2 s and was stopped (--idle-timeout)" in line
    assert "raise --idle-timeout" in hint_of(done.output)
    assert "deadline" not in hint_of(done.output)
    assert json.loads((tmp_path / "r.json").read_text())["error"]["kind"] == "RunnerFailure"


def test_a_runner_past_its_deadline_is_still_a_timeout_with_the_deadline_hint(
    tmp_path: Path,
) -> None:
    chatty = script(
        tmp_path / "executor_runner",
        "#!/bin/sh\nwhile :; do echo 'Model loaded in 0.5 ms.'; sleep 0.2; done\n",
    )
    done = cli("run", "digits", "--runner", chatty, "-n", "1", "--idle-timeout", "5",
               "--deadline", "2")  # fmt: skip
    assert done.exit_code == 3, done.output
    assert "runner timed out" in one_line_error(done.output)
    assert "deadline" in hint_of(done.output)


def _leftovers(workdir: Path, count: int, each: int) -> list[Path]:
    """Programs earlier runs left, last used a month ago."""
    programs = workdir / "programs"
    programs.mkdir(parents=True, exist_ok=True)
    made = []
    for i in range(count):
        path = programs / f"{i:024x}.pte"
        path.write_bytes(os.urandom(each))
        os.utime(path, (time.time() - 30 * DAY, time.time() - 30 * DAY))
        made.append(path)
    return made


def test_a_full_work_dir_is_exit_3_with_the_clean_hint_and_clean_makes_room(
    tmp_path: Path, host_runner: Path
) -> None:
    from etdeploy.runner_build import runner_from_path

    needed = sum(p.stat().st_size for p in runner_from_path(host_runner).files)
    workdir = tmp_path / "work"
    with small_tmpfs(workdir, needed + 3 * 1024 * 1024):
        config = write_config(tmp_path / "etdeploy.toml",
                              {"small": {"transport": "local", "workdir": str(workdir)}})  # fmt: skip
        old = _leftovers(workdir, 3, 2 * 1024 * 1024)
        done = cli("run", "digits", "--device", "small", "--config", config, "--runner",
                   host_runner, "-n", "1", "--json", tmp_path / "r.json")  # fmt: skip
        assert done.exit_code == 3, done.output
        assert "No space left on device" in one_line_error(done.output)
        assert "etdeploy clean --device small" in hint_of(done.output)
        # Nothing half-written: no partial, no job dir, only whole files.
        assert [p for p in workdir.rglob("*") if PARTIAL_MARKER in p.name] == []
        assert [p for p in workdir.iterdir() if p.name[:2] == "20"] == []
        for pushed in runner_from_path(host_runner).files:
            copy = next(workdir.glob(f"runners/*/{pushed.name}"), None)
            assert copy is None or copy.read_bytes() == pushed.read_bytes()

        dry = cli("clean", "--device", "small", "--config", config, "--older-than", "7d",
                  "--dry-run", "--json", "-")  # fmt: skip
        assert dry.exit_code == 0, dry.output
        planned = json.loads(dry.stdout)
        assert sorted(i["path"] for i in planned["removed"]) == sorted(
            f"programs/{p.name}" for p in old
        )
        assert all(p.exists() for p in old)  # a dry run removes nothing

        cleaned = cli("clean", "--device", "small", "--config", config, "--older-than", "7d")
        assert cleaned.exit_code == 0, cleaned.output
        assert "removed 3 item(s)" in cleaned.stdout
        assert not any(p.exists() for p in old)

        again = cli("run", "digits", "--device", "small", "--config", config, "--runner",
                    host_runner, "-n", "1")  # fmt: skip
        assert again.exit_code == 0, again.output


def runners_in(workdir: Path) -> list[int]:
    """Pids of runner processes started from below workdir."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if argv and argv[0].startswith(str(workdir).encode()):
                    found.append(int(entry.name))
    return found


def test_a_job_dir_a_killed_run_left_is_removed_by_the_next_run(
    tmp_path: Path, host_runner: Path
) -> None:
    workdir = tmp_path / "work"
    config = write_config(tmp_path / "etdeploy.toml",
                          {"here": {"transport": "local", "workdir": str(workdir)}})  # fmt: skip
    command = [sys.executable, "-m", "etdeploy", "run", "digits", "--device", "here",
               "--config", str(config), "--runner", str(host_runner),
               "-n", "100000000", "--warmup", "0"]  # fmt: skip

    def job_dirs() -> list[Path]:
        return [p for p in workdir.iterdir() if p.name[:2] == "20"] if workdir.is_dir() else []

    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as run:
        deadline = time.monotonic() + 180
        while not (runners := runners_in(workdir)):
            assert run.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        os.kill(run.pid, signal.SIGKILL)  # no `finally` runs: its job dir stays
    # The runner leads a session of its own: it outlives a SIGKILLed parent.
    for pid in runners:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    (left,) = job_dirs()
    done = cli("run", "digits", "--device", "here", "--config", config, "--runner", host_runner,
               "-n", "1")  # fmt: skip
    assert done.exit_code == 0, done.output
    assert not left.exists() and job_dirs() == []
