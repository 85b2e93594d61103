"""The ssh keeper (etdeploy/devices/ssh/keeper.py) against a hostile local user, with a
real sshd on loopback: its directory a link, another user's or open to the group, a
socket in its place owned by another uid. Each is refused with one warning line and
the command connects itself; the keeper gets none of the command's environment
outside the allow-list; a command that leaves a thread running does not take it down.

"Another user" is nobody: these tests run as root (as CI's container does)."""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from etdeploy.background import ALLOWED_ENVIRONMENT, fork_child
from etdeploy.devices.ssh import SshDevice, SshSettings
from etdeploy.devices.ssh.keeper_ipc import KeeperPaths, keeper_key
from tests.support.device_config import ssh_settings
from tests.support.processes import processes_naming
from tests.support.sshd import SshServer, process_is_running

KEEPER = "etdeploy.devices.ssh.keeper"
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="chown and setuid to nobody need root")


@pytest.fixture(autouse=True)
def no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache of this test's own, short enough that keepers live in it (not in the
    temp directory's fallback for long paths)."""
    root = Path(tempfile.mkdtemp(prefix="etd-"))
    monkeypatch.setenv("ETDEPLOY_CACHE_DIR", str(root))
    yield root
    for pid in processes_naming(KEEPER, str(root)):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)


def kept(server: SshServer, tmp_path: Path) -> SshSettings:
    return ssh_settings(server, tmp_path, persist_s=30.0)


def command(settings: SshSettings) -> dict[str, object]:
    with SshDevice(settings) as device:
        out = device.run(["sh", "-c", "echo hi"], deadline_s=60)
        assert out.stdout == "hi\n", out.stderr
        return device.counters()


def nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


def _symlinked(keepers: Path) -> None:
    own = keepers.parent / "elsewhere"
    own.mkdir(mode=0o700)
    keepers.symlink_to(own)


def _foreign(keepers: Path) -> None:
    keepers.mkdir(mode=0o700)
    os.chown(keepers, nobody(), nobody())


def _group_writable(keepers: Path) -> None:
    keepers.mkdir()
    keepers.chmod(0o770)


@needs_root
@pytest.mark.parametrize(
    ("prepare", "said"),
    [
        (_symlinked, "is a symbolic link"),
        (_foreign, "belongs to uid"),
        (_group_writable, "open to group or others"),
    ],
    ids=["symlinked", "foreign-owned", "group-writable"],
)
def test_a_keeper_directory_not_ones_own_is_refused_and_the_command_connects_itself(
    sshd: SshServer,
    tmp_path: Path,
    cache: Path,
    caplog: pytest.LogCaptureFixture,
    prepare: Callable[[Path], None],
    said: str,
) -> None:
    keepers = cache / "keepers"
    prepare(keepers)
    before = keepers.lstat()
    with caplog.at_level(logging.WARNING, logger="etdeploy"):
        counters = command(kept(sshd, tmp_path))
    assert "pid" not in counters and counters["connects"] == 1  # connected itself
    (warning,) = [r.getMessage() for r in caplog.records if "ssh keeper not used" in r.getMessage()]
    assert said in warning and "\n" not in warning
    assert processes_naming(KEEPER, str(cache)) == []
    after = keepers.lstat()
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)  # left as found


@needs_root
def test_a_socket_whose_listener_is_another_uid_gets_nothing_and_the_command_connects_itself(
    sshd: SshServer, tmp_path: Path, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from etdeploy.devices.ssh.keeper_ipc import keeper_dir

    settings = kept(sshd, tmp_path)
    paths = KeeperPaths.of(keeper_dir(), keeper_key(settings, settings.host))
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound.bind(str(paths.socket))
    heard_read, heard_write = os.pipe()

    def listen_as_nobody() -> int:
        # SO_PEERCRED tells a client who its listener was at listen(): nobody.
        os.setgroups([])
        os.setgid(nobody())
        os.setuid(nobody())
        bound.listen(4)
        while True:
            client, _ = bound.accept()
            client.settimeout(5)
            try:
                os.write(heard_write, client.recv(4096) or b"<closed>")
            except OSError:
                os.write(heard_write, b"<nothing>")

    pid = fork_child(listen_as_nobody)
    os.close(heard_write)
    try:
        with caplog.at_level(logging.WARNING, logger="etdeploy"):
            counters = command(settings)
        assert "pid" not in counters and counters["connects"] == 1
        (warning,) = [
            r.getMessage() for r in caplog.records if "ssh keeper not used" in r.getMessage()
        ]
        assert f"uid {nobody()}" in warning
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        bound.close()
    with os.fdopen(heard_read, "rb") as heard:
        assert b"hello" not in heard.read()  # not one request reached it
    assert processes_naming(KEEPER, str(cache)) == []


def test_nothing_outside_the_allow_list_reaches_the_keeper(
    sshd: SshServer, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI_JOB_TOKEN", "secret-of-the-job")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "another-secret")
    pid = int(command(kept(sshd, tmp_path))["pid"])
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    names = {entry.split(b"=", 1)[0].decode() for entry in raw if entry}
    assert names <= set(ALLOWED_ENVIRONMENT), names - set(ALLOWED_ENVIRONMENT)
    assert b"secret" not in b"\0".join(raw)
    assert "ETDEPLOY_CACHE_DIR" in names  # what it needs does reach it


# A command that uses the keeper and leaves a thread that is not a daemon running.
_LEAVES_A_THREAD = """
import json, sys, threading, time
from etdeploy.devices.ssh import SshDevice, SshSettings
with SshDevice(SshSettings(**json.loads(sys.argv[1]))) as device:
    device.run(["true"], deadline_s=60)
    print(device.counters()["pid"], flush=True)
threading.Thread(target=time.sleep, args=(1.0,)).start()
sys.exit(0)
"""


def test_a_command_that_leaves_a_thread_running_does_not_take_the_keeper_down(
    sshd: SshServer, tmp_path: Path, cache: Path
) -> None:
    settings = kept(sshd, tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", _LEAVES_A_THREAD, json.dumps(asdict(settings))],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    pid = int(done.stdout.split()[0])
    assert process_is_running(pid)
    keepers = cache / "keepers"
    assert any(p.suffix == ".sock" for p in keepers.iterdir())  # its socket is still there
    assert int(command(settings)["pid"]) == pid  # and it serves the next command
    assert stat.S_IMODE(keepers.stat().st_mode) == 0o700
