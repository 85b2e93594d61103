"""A warm etdeploy (etdeploy.warm): a command served by the server ends as the ordinary
command would (its output, status and result), is interrupted as it would be (SIGINT,
SIGTERM, and SIGKILL of the command, which stops the work it started), and is never
served by a server whose sources changed, by one of another environment, or at a
terminal; a server stops when idle.

Every command here is a real `python -m etdeploy` process with its streams piped, as
in a CI log; each test has its own runtime directory, so its server is its own, and
stops it at the end."""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.device_config import write_config
from tests.support.processes import live_processes, processes_naming

pytestmark = pytest.mark.slow


class Warm:
    """Commands started with a runtime directory of their own (where servers live)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.runtime = tmp / "runtime"
        self.runtime.mkdir(mode=0o700)
        self.workdir = tmp / "device"
        self.config = write_config(
            tmp / "etdeploy.toml", {"here": {"transport": "local", "workdir": str(self.workdir)}}
        )

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.update({"ETDEPLOY_WARM": "1", "XDG_RUNTIME_DIR": str(self.runtime), **extra})
        return env

    def start(self, *args: str | Path, **extra: str) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "etdeploy", "run", *map(str, args),
                   "-d", "here", "--config", str(self.config)]  # fmt: skip
        # Not from the checkout: `-m` would import the etdeploy beside the working dir.
        return subprocess.Popen(
            command, env=self.env(**extra), cwd=self.tmp, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def run(self, *args: str | Path, **extra: str) -> subprocess.CompletedProcess[str]:
        process = self.start(*args, **extra)
        out, err = process.communicate(timeout=300)
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    def servers(self) -> list[int]:
        """The pids of the servers up for this test's commands."""
        pids = []
        for lock in (self.runtime / "etdeploy").glob("*.lock"):
            text = lock.read_text().strip()
            if text.isdigit() and _alive(int(text)):
                pids.append(int(text))
        return pids

    def wait_for_server(self) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (found := self.servers()) and any((self.runtime / "etdeploy").glob("*.sock")):
                return found[0]
            time.sleep(0.1)
        raise AssertionError("no warm server came up")

    def stop(self) -> None:
        """Stop every server of this test's commands (found by their socket's folder:
        one started as the last command ended has not written its lock yet)."""
        for pid in processes_naming("etdeploy.warm.server", str(self.runtime)):
            os.kill(pid, signal.SIGTERM)


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet has ended)."""
    return any(found == pid for found, _ in live_processes())


def _runners(workdir: Path) -> list[int]:
    """Runner processes of this test's device (their command lines name its work dir)."""
    return processes_naming("etdeploy_runner", str(workdir))


@pytest.fixture
def warm(tmp_path: Path) -> Iterator[Warm]:
    commands = Warm(tmp_path)
    try:
        yield commands
    finally:
        commands.stop()


def _verdict(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout.strip().splitlines()[-1]


def test_a_served_run_ends_as_the_ordinary_one(warm: Warm, digits_bundle: Path) -> None:
    ordinary = warm.run("--bundle", digits_bundle, "--json", "-", ETDEPLOY_WARM="0")
    first = warm.run("--bundle", digits_bundle)  # runs the ordinary way, starts a server
    server = warm.wait_for_server()
    served = warm.run("--bundle", digits_bundle, "--json", "-")
    again = warm.run("--bundle", digits_bundle)
    assert ordinary.returncode == first.returncode == served.returncode == again.returncode == 0
    assert warm.servers() == [server]  # the same server took both
    mine, theirs = json.loads(ordinary.stdout), json.loads(served.stdout)
    assert theirs["status"] == mine["status"] == "passed"
    assert theirs["verdict"]["reason"] == mine["verdict"]["reason"]
    assert theirs["accuracy"]["reason"] == mine["accuracy"]["reason"]
    assert _verdict(again) == _verdict(first)
    bad = warm.run("--bundle", digits_bundle, "-d", "nosuch")
    plain = warm.run("--bundle", digits_bundle, "-d", "nosuch", ETDEPLOY_WARM="0")
    assert (bad.returncode, bad.stderr) == (plain.returncode, plain.stderr)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_command_interrupts_its_work(
    warm: Warm, digits_bundle: Path, signum: int, status: int
) -> None:
    warm.run("--bundle", digits_bundle)
    warm.wait_for_server()
    command = warm.start("digits", "-n", "50000000")
    _wait_for_runner(warm, command)
    command.send_signal(signum)
    _, err = command.communicate(timeout=60)
    assert command.returncode == status
    assert f"interrupted by {signal.Signals(signum).name}" in err
    assert _runners(warm.workdir) == []
    assert not list(warm.workdir.glob("2*-*-*"))  # no job directory left


def test_a_killed_command_has_its_work_stopped(warm: Warm, digits_bundle: Path) -> None:
    warm.run("--bundle", digits_bundle)
    warm.wait_for_server()
    command = warm.start("digits", "-n", "50000000")
    _wait_for_runner(warm, command)
    command.kill()
    command.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while (_runners(warm.workdir) or list(warm.workdir.glob("2*-*-*"))) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert _runners(warm.workdir) == []
    assert not list(warm.workdir.glob("2*-*-*"))
    assert warm.run("--bundle", digits_bundle).returncode == 0  # and the next one runs


def test_changed_sources_are_never_served(warm: Warm, digits_bundle: Path, tmp_path: Path) -> None:
    """A server that imported a source file since changed stops; the command runs the
    ordinary way. (A copy of etdeploy is changed here, not the checkout.)"""
    import etdeploy

    tree = tmp_path / "tree"
    shutil.copytree(Path(etdeploy.__file__).parent, tree / "etdeploy")
    path = {"PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
    warm.run("--bundle", digits_bundle, **path)
    server = warm.wait_for_server()
    os.utime(tree / "etdeploy" / "verify.py")  # touched: a changed source file
    result = warm.run("--bundle", digits_bundle, **path)
    assert result.returncode == 0
    deadline = time.monotonic() + 30
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server)


def test_another_environment_is_not_served_by_this_server(
    warm: Warm, digits_bundle: Path, tmp_path: Path
) -> None:
    warm.run("--bundle", digits_bundle)
    server = warm.wait_for_server()
    other = warm.run("--bundle", digits_bundle, ETDEPLOY_CACHE_DIR=str(tmp_path / "cache"))
    assert other.returncode == 0
    assert server in warm.servers()


def test_a_terminal_is_never_served(warm: Warm, digits_bundle: Path) -> None:
    code = (
        "import sys; from etdeploy.warm.client import wanted; "
        "print(wanted(['run', '--bundle', 'x']), file=sys.stderr)"
    )
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=warm.env(), stdin=subprocess.DEVNULL,
            stdout=follower, stderr=subprocess.PIPE, text=True, check=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(follower)
        os.close(leader)
    assert done.stderr.strip() == "False"
    piped = subprocess.run(
        [sys.executable, "-c", code], env=warm.env(), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert piped.stderr.strip() == "True"
    off = subprocess.run(
        [sys.executable, "-c", code], env=warm.env(ETDEPLOY_WARM="0"), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert off.stderr.strip() == "False"


def test_an_idle_server_stops(warm: Warm, digits_bundle: Path) -> None:
    warm.run("--bundle", digits_bundle, ETDEPLOY_WARM_IDLE_S="1")
    server = warm.wait_for_server()
    deadline = time.monotonic() + 30
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server)
    assert not list((warm.runtime / "etdeploy").glob("*.sock"))


def _wait_for_runner(warm: Warm, command: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not _runners(warm.workdir):
        if command.poll() is not None or time.monotonic() > deadline:
            out, err = command.communicate()
            raise AssertionError(f"the runner never started:\n{out}\n{err}")
        time.sleep(0.05)
