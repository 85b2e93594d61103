"""The ssh keeper (etdeploy/devices/ssh/keeper.py): one host's connection and its
sessions kept between commands, against a real OpenSSH sshd on loopback.

A "command" here is an SshDevice opened and closed, in this process or in a Python
process of its own (where it is killed or interrupted); the remote processes are
this machine's, so /proc shows what is left of them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.devices.ssh import SshDevice, SshSettings
from etdeploy.devices.ssh.keeper_client import KeeperLink
from etdeploy.devices.ssh.keeper_ipc import KeeperPaths, keeper_dir, keeper_key
from etdeploy.errors import DeviceError, TransportError
from tests.support.device_config import ssh_settings, ssh_table, through_proxy, write_config
from tests.support.processes import processes_naming
from tests.support.sshd import CuttingProxy, SshServer, process_is_running, start_sshd

KEEPER = "etdeploy.devices.ssh.keeper"

# A command in a process of its own: runs argv[2] on the device, prints what it saw.
CLIENT = """
import json, sys
from etdeploy.devices.ssh import SshDevice, SshSettings
settings = SshSettings(**json.loads(sys.argv[1]))
with SshDevice(settings) as device:
    out = device.run(["sh", "-c", sys.argv[2]], deadline_s=300)
    print(json.dumps({"exit": out.exit_code, "stdout": out.stdout,
                      "counters": device.counters(), "paramiko": "paramiko" in sys.modules}))
"""


@pytest.fixture(autouse=True)
def no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


@pytest.fixture(autouse=True)
def no_keeper_outlives_the_test(tmp_path: Path) -> Iterator[None]:
    """Every keeper a test starts names the test's directory in its settings: ask
    each to leave, then kill what did not."""
    yield
    leftovers = processes_naming(KEEPER, str(tmp_path))
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    for pid in leftovers:
        wait_until(lambda p=pid: not process_is_running(p), 5)  # type: ignore[misc]


def wait_until(ready: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def settings_for(server: SshServer, tmp_path: Path, **overrides: object) -> SshSettings:
    """The test server's settings, with a keeper that outlives each command by 30 s."""
    return ssh_settings(server, tmp_path, **{"persist_s": 30.0, **overrides})


def paths_of(settings: SshSettings, name: str | None = None) -> KeeperPaths:
    return KeeperPaths.of(keeper_dir(), keeper_key(settings, name or settings.host))


def command(settings: SshSettings, script: str = "echo hi") -> dict[str, object]:
    """One command, in-process: the counters and the keeper it used."""
    with SshDevice(settings) as device:
        out = device.run(["sh", "-c", script], deadline_s=60)
        assert out.exit_code == 0, out.stderr
        return device.counters()


def client(settings: SshSettings, script: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CLIENT, json.dumps(asdict(settings)), script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def all_closed(pid: int) -> bool:
    """Whether pid is gone with every descriptor it had: a killed process's first
    thread shows as a zombie while its other threads still hold its sockets."""
    try:
        return not os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return True


def remote_processes_gone(pids: list[int], timeout_s: float = 5) -> bool:
    return wait_until(lambda: not any(process_is_running(p) for p in pids), timeout_s)


# -- reuse ------------------------------------------------------------------------------


def test_a_second_command_reuses_the_keeper_its_connection_and_sessions(
    sshd: SshServer, tmp_path: Path
) -> None:
    settings = settings_for(sshd, tmp_path)
    first = command(settings)
    second = command(settings)
    assert second["pid"] == first["pid"] and process_is_running(int(first["pid"]))
    # One connection, one helper shell, one SFTP session for both commands.
    assert second["connects"] == 1
    assert second["helper_sessions"] == 1
    assert second["sftp_sessions"] == 1
    # Command sessions: one started with the keeper, and one after each command for
    # the next (on a thread: counted once it is open). A command that opened its own
    # would make it more.
    link = KeeperLink(settings, settings.host)
    assert wait_until(lambda: link.counters()["command_sessions"] == 3, 5)
    time.sleep(0.3)
    assert link.counters()["command_sessions"] == 3
    link.close()


def test_a_command_served_by_a_keeper_never_imports_paramiko(
    sshd: SshServer, tmp_path: Path
) -> None:
    settings = settings_for(sshd, tmp_path)
    for _ in range(2):  # the one that starts the keeper, and one that finds it
        done = client(settings, "echo hi")
        out, err = done.communicate(timeout=60)
        assert done.returncode == 0, err
        said = json.loads(out)
        assert said["stdout"] == "hi\n" and said["paramiko"] is False


def test_files_move_through_the_keeper_with_progress_and_typed_errors(
    sshd: SshServer, tmp_path: Path
) -> None:
    local = tmp_path / "blob.bin"
    local.write_bytes(os.urandom(3 << 20))
    seen: list[tuple[str, int, int]] = []
    with SshDevice(settings_for(sshd, tmp_path)) as device:
        pushed = device.push(local, "in/blob.bin", progress=lambda *a: seen.append(a))
        assert pushed.bytes_sent == local.stat().st_size and not pushed.skipped
        assert seen[-1][1:] == (local.stat().st_size, local.stat().st_size)
        assert device.exists("in/blob.bin") and not device.exists("in/nothing")
        back = device.pull("in/blob.bin", tmp_path / "back.bin")
        assert back.read_bytes() == local.read_bytes()
        with pytest.raises(DeviceError, match=r"no such file on .*in/nothing") as caught:
            device.pull("in/nothing", tmp_path / "nothing")
        assert caught.value.device == device.name and caught.value.hint
        assert not list(tmp_path.glob("nothing*"))  # no partial file left here
        assert device.push(local, "in/blob.bin").skipped  # known by its record


# -- leaving ----------------------------------------------------------------------------


def test_the_keeper_leaves_after_persist_s_without_a_command(
    sshd: SshServer, tmp_path: Path
) -> None:
    settings = settings_for(sshd, tmp_path, persist_s=1.0)
    pid = int(command(settings)["pid"])
    time.sleep(0.5)
    assert process_is_running(pid)  # still there within persist_s
    assert wait_until(lambda: not process_is_running(pid), 5)
    assert not paths_of(settings).socket.exists()
    # The next command starts another.
    assert int(command(settings)["pid"]) != pid


def test_the_keeper_leaves_when_its_host_goes_and_the_next_command_says_why(
    tmp_path: Path,
) -> None:
    with start_sshd(tmp_path / "own-sshd") as server:
        settings = settings_for(server, tmp_path)
        pid = int(command(settings)["pid"])
    assert wait_until(lambda: not process_is_running(pid), 5)
    with pytest.raises(DeviceError, match="connection refused") as caught:
        command(settings)
    assert caught.value.retryable


def test_a_keeper_killed_between_commands_is_replaced_without_failing_one(
    sshd: SshServer, tmp_path: Path
) -> None:
    settings = settings_for(sshd, tmp_path)
    with SshDevice(settings) as device:
        assert device.run(["true"], deadline_s=30).exit_code == 0
        first = int(device.counters()["pid"])
        os.kill(first, signal.SIGKILL)
        assert wait_until(lambda: all_closed(first), 5)
        # The same command goes on: its next request starts a new keeper.
        out = device.run(["echo", "again"], deadline_s=30)
        assert out.stdout == "again\n"
        assert int(device.counters()["pid"]) != first


def test_persist_s_0_never_starts_a_keeper(sshd: SshServer, tmp_path: Path) -> None:
    settings = settings_for(sshd, tmp_path, persist_s=0.0)
    counters = command(settings)
    assert "pid" not in counters and counters["connects"] == 1
    assert processes_naming(KEEPER, str(tmp_path)) == []
    assert not paths_of(settings).socket.exists()


# -- errors -----------------------------------------------------------------------------


def test_a_connect_error_is_the_one_a_direct_connect_gives(sshd: SshServer, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    raised: list[DeviceError] = []
    for persist_s in (30.0, 0.0):
        settings = settings_for(sshd, tmp_path, known_hosts=str(empty), persist_s=persist_s)
        with pytest.raises(DeviceError) as caught:
            command(settings)
        raised.append(caught.value)
        # The keeper that failed to connect is gone by the time its error is raised
        # here, not some time later (issue 39, item 12: it once outlived its report).
        assert processes_naming(KEEPER, str(tmp_path)) == []
    kept, direct = raised
    assert "host key for" in kept.message and "is not in" in kept.message
    assert (kept.message, kept.hint, kept.device, kept.retryable) == (
        direct.message,
        direct.hint,
        direct.device,
        direct.retryable,
    )


def test_an_unknown_host_key_through_the_cli_is_the_same_line_and_exit_code(
    sshd: SshServer, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    outputs = []
    for persist_s in (30.0, 0.0):
        table = ssh_table(sshd, tmp_path, known_hosts=str(empty), persist_s=persist_s)
        config = write_config(tmp_path / f"etdeploy-{persist_s}.toml", {"mac": table})
        done = CliRunner().invoke(
            app, ["run", "digits", "--device", "mac", "--config", str(config)]
        )
        assert done.exit_code == 3, done.output
        outputs.append([line for line in done.output.splitlines() if "host key" in line])
    assert outputs[0] and outputs[0] == outputs[1]


def test_a_connection_lost_mid_command_is_a_retryable_transport_error(
    sshd: SshServer, tmp_path: Path
) -> None:
    with CuttingProxy(sshd.port) as proxy:
        settings = settings_for(sshd, tmp_path, **through_proxy(sshd, proxy.port, tmp_path))
        with SshDevice(settings) as device:
            assert device.run(["true"], deadline_s=30).exit_code == 0
            pid = int(device.counters()["pid"])
            started = time.monotonic()
            threading.Timer(0.5, proxy.down).start()
            with pytest.raises(TransportError) as caught:
                device.run(["sleep", "30"], deadline_s=60)
        assert caught.value.retryable and "lost" in caught.value.message
        assert time.monotonic() - started < 10
        assert wait_until(lambda: not process_is_running(pid), 5)  # it left with its link
        proxy.up()
        assert command(settings)["pid"] != pid


# -- clients that die or are interrupted ---------------------------------------------------


def started_remote(pids: Path, process: subprocess.Popen[str]) -> list[int]:
    def written() -> bool:
        return pids.exists() and len(pids.read_text().split()) == 2

    if not wait_until(written, 30):
        process.kill()
        raise AssertionError(f"the command never started: {process.communicate()}")
    return [int(p) for p in pids.read_text().split()]


def test_a_client_killed_mid_command_has_its_remote_command_killed_by_the_keeper(
    sshd: SshServer, tmp_path: Path
) -> None:
    settings = settings_for(sshd, tmp_path)
    pids = tmp_path / "pids"
    process = client(settings, f"sleep 300 & echo $! > {pids}.t; echo $$ >> {pids}.t; "
                     f"mv {pids}.t {pids}; wait")  # fmt: skip
    remote = started_remote(pids, process)
    keeper = processes_naming(KEEPER, str(tmp_path))
    process.kill()
    process.wait()
    assert remote_processes_gone(remote), "the remote command outlived its client"
    # The keeper stays, and serves the next command.
    assert processes_naming(KEEPER, str(tmp_path)) == keeper
    assert int(command(settings)["pid"]) == keeper[0]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_client_leaves_once_its_remote_command_is_dead(
    sshd: SshServer, tmp_path: Path, stop: signal.Signals
) -> None:
    settings = settings_for(sshd, tmp_path)
    pids = tmp_path / "pids"
    code = (
        "import signal\nfrom etdeploy.interrupts import terminate_as_interrupt\n"
        "with terminate_as_interrupt():\n"
        + "\n".join("    " + line for line in CLIENT.strip().splitlines())
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(asdict(settings)),
         f"sleep 300 & echo $! > {pids}.t; echo $$ >> {pids}.t; mv {pids}.t {pids}; wait"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # SIGINT at its default, as in a terminal, even under a background `make test &`.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    remote = started_remote(pids, process)
    process.send_signal(stop)
    _, err = process.communicate(timeout=30)
    assert "KeyboardInterrupt" in err or "Interrupted" in err, err
    # Dead when the client has exited, not some time later.
    assert not [p for p in remote if process_is_running(p)]
    assert command(settings)["connects"] == 1  # the keeper serves on


def test_two_commands_starting_at_once_end_with_one_keeper(sshd: SshServer, tmp_path: Path) -> None:
    settings = settings_for(sshd, tmp_path)
    processes = [client(settings, "echo hi") for _ in range(3)]
    said = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        said.append(json.loads(out))
    assert len({s["counters"]["pid"] for s in said}) == 1  # type: ignore[index]
    assert len(processes_naming(KEEPER, str(tmp_path))) == 1
    assert said[0]["counters"]["connects"] == 1  # type: ignore[index]


def test_a_keeper_that_cannot_start_leaves_the_command_to_connect_itself(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A python that exits at once stands for a keeper that cannot start.
    monkeypatch.setattr(sys, "executable", "/bin/false")
    settings = settings_for(sshd, tmp_path)
    with SshDevice(settings) as device:
        assert device.run(["echo", "direct"], deadline_s=30).stdout == "direct\n"
        assert "pid" not in device.counters()
    assert processes_naming(KEEPER, str(tmp_path)) == []


def test_a_keeper_asked_to_leave_goes_at_once(sshd: SshServer, tmp_path: Path) -> None:
    settings = settings_for(sshd, tmp_path)
    pid = int(command(settings)["pid"])
    KeeperLink(settings, settings.host).shutdown()
    assert wait_until(lambda: not process_is_running(pid), 5)
    assert not paths_of(settings).socket.exists() and not paths_of(settings).pid.exists()


def test_a_keeper_whose_link_hangs_is_replaced_by_the_next_command(
    sshd: SshServer, tmp_path: Path
) -> None:
    with CuttingProxy(sshd.port) as proxy:
        settings = settings_for(sshd, tmp_path, **through_proxy(sshd, proxy.port, tmp_path))
        pid = int(command(settings)["pid"])
        time.sleep(1.2)  # past the time a connection that answered is trusted unasked
        proxy.stall(0)  # the link hangs without closing: nothing more gets through
        started = time.monotonic()
        again = command(settings)
        # Asked for an answer it never gave (connect_timeout_s), the keeper left.
        assert int(again["pid"]) != pid and again["connects"] == 1
        assert time.monotonic() - started < settings.connect_timeout_s + 5
        assert wait_until(lambda: not process_is_running(pid), 5)
        proxy.down()
