"""SshDevice against a real OpenSSH sshd on loopback (tests/support/sshd.py)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from etdeploy.devices.base import ProgressCallback
from etdeploy.devices.lock import device_lock
from etdeploy.devices.ssh import SshDevice, SshSettings, resolve_target
from etdeploy.devices.transfer import temporary_name
from etdeploy.errors import DeviceError, TransportError, UsageError
from tests.support.device_config import ssh_settings, through_proxy
from tests.support.processes import processes_naming
from tests.support.sshd import (
    CuttingProxy,
    SshServer,
    free_port,
    generate_key,
    process_is_running,
    start_sshd,
)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    with start_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


@pytest.fixture(autouse=True)
def no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's ssh-agent must not decide which key these tests authenticate with.
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


def settings_for(server: SshServer, tmp_path: Path, **overrides: object) -> SshSettings:
    return ssh_settings(server, tmp_path, **overrides)


@pytest.fixture
def device(sshd: SshServer, tmp_path: Path) -> Iterator[SshDevice]:
    with SshDevice(settings_for(sshd, tmp_path)) as dev:
        yield dev  # type: ignore[misc]


def random_file(path: Path, size: int) -> Path:
    path.write_bytes(os.urandom(size))
    return path


# -- running commands ----------------------------------------------------------------


def test_run_returns_the_exit_status_and_both_streams(device: SshDevice) -> None:
    out = device.run(["sh", "-c", "echo to-out; echo to-err >&2; exit 7"], deadline_s=30)
    assert out.exit_code == 7
    assert out.stdout == "to-out\n"
    assert out.stderr == "to-err\n"
    assert not out.timed_out


def test_run_passes_arguments_verbatim_and_honours_cwd_and_env(
    device: SshDevice, tmp_path: Path
) -> None:
    workdir = tmp_path / "cwd here"
    workdir.mkdir()
    out = device.run(
        ["sh", "-c", 'printf "%s|%s|%s" "$1" "$PWD" "$GREETING"', "sh", "a b 'c' $d"],
        deadline_s=30,
        cwd=str(workdir),
        env={"GREETING": 'it\'s "quoted" $HOME'},
    )
    assert out.exit_code == 0, out.stderr
    assert out.stdout == f"a b 'c' $d|{workdir}|it's \"quoted\" $HOME"


def test_run_in_a_missing_directory_fails_without_running(
    device: SshDevice, tmp_path: Path
) -> None:
    out = device.run(["touch", str(tmp_path / "ran")], deadline_s=30, cwd=str(tmp_path / "nope"))
    assert out.exit_code == 125
    assert not (tmp_path / "ran").exists()


def test_run_drains_megabytes_on_both_streams_without_deadlock(device: SshDevice) -> None:
    size = 4 * 1024 * 1024
    script = (
        f"(yes out | head -c {size}) & (yes err | head -c {size} >&2) & wait; "
        f"yes tail | head -c {size}"
    )
    out = device.run(["sh", "-c", script], deadline_s=60)
    assert out.exit_code == 0
    assert not out.timed_out
    assert len(out.stdout) == 2 * size
    assert len(out.stderr) == size
    assert set(out.stderr.split("\n")) <= {"err", "e", "er", ""}


def test_run_past_its_deadline_kills_the_whole_process_group(
    device: SshDevice, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    script = f"sleep 300 & echo $! > {pids}; echo $$ >> {pids}; echo started; wait"
    started = time.monotonic()
    out = device.run(["sh", "-c", script], deadline_s=1.5)
    elapsed = time.monotonic() - started
    assert out.timed_out
    assert out.stdout == "started\n"
    assert elapsed < 10
    # sshd runs on this machine, so /proc shows whether the remote processes died.
    recorded = [int(p) for p in pids.read_text().split()]
    assert len(recorded) == 2
    deadline = time.monotonic() + 5
    while any(process_is_running(p) for p in recorded) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in recorded if process_is_running(p)]


def test_run_silent_past_idle_timeout_is_killed_with_its_output_kept(device: SshDevice) -> None:
    out = device.run(["sh", "-c", "echo hello; sleep 300"], deadline_s=60, idle_timeout_s=1.0)
    assert out.timed_out and out.idle  # its silence stopped it, not the deadline
    assert out.stdout == "hello\n"
    assert out.elapsed_s < 10


def test_a_chatty_command_past_its_deadline_is_not_called_idle(device: SshDevice) -> None:
    out = device.run(
        ["sh", "-c", "while :; do echo tick; sleep 0.2; done"], deadline_s=1.5, idle_timeout_s=5
    )
    assert out.timed_out and not out.idle


def test_a_command_killed_by_a_signal_reports_it_as_the_shell_does(device: SshDevice) -> None:
    # sshd would send a signal death as exit-signal, which paramiko reads as no
    # status (-1); the wrapper's shell reports 128 + the signal, as adb's does.
    out = device.run(["sh", "-c", "echo about to crash; kill -SEGV $$"], deadline_s=30)
    assert out.exit_code == 128 + 11, (out.exit_code, out.stderr)
    assert out.stdout == "about to crash\n"


def test_a_command_killed_with_its_wrapper_reports_the_signal_not_sighup(
    device: SshDevice,
) -> None:
    # The command's whole group goes; the wrapper, in a group of its own, outlives
    # it and reports the signal as a shell does.
    out = device.run(["sh", "-c", "kill -KILL 0"], deadline_s=30)
    assert out.exit_code == 128 + 9, (out.exit_code, out.stderr)


def test_a_command_whose_wrapper_is_killed_from_outside_ended_without_a_status(
    device: SshDevice,
) -> None:
    # The command's parent is the sh running its script; that sh's parent is the
    # wrapper sshd started (the test user's login shell, bash, execs it). Killed, it
    # leaves sshd nothing to send but exit-signal: no status, never "SIGHUP".
    wrapper = 'kill -KILL "$(ps -o ppid= -p $PPID)"'
    with pytest.raises(DeviceError) as caught:
        device.run(["sh", "-c", wrapper], deadline_s=30)
    assert "ended without an exit status" in caught.value.message
    assert "SIGHUP" not in caught.value.message


def test_a_stopped_command_is_gone_at_its_deadline(device: SshDevice) -> None:
    marker = f"stopped-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    out = device.run(["sh", "-c", "kill -STOP 0", marker], deadline_s=2)
    assert out.timed_out and time.monotonic() - started < 8
    assert processes_naming(marker) == []


@pytest.mark.parametrize(
    ("shell", "tools", "own_group"),
    [
        ("dash", ("ps", "tr", "setsid"), True),  # Linux: util-linux's setsid(1)
        ("bash", ("ps", "tr"), True),  # macOS's /bin/sh: bash, job control, no setsid
        ("dash", ("ps", "tr"), False),  # neither: the command shares the wrapper's group
    ],
)
def test_the_wrapper_outlives_a_command_that_kills_its_group_where_the_host_allows(
    shell: str, tools: tuple[str, ...], own_group: bool, tmp_path: Path
) -> None:
    """The wrapper's own sh, run here as sshd would run it (a session of its own, no
    terminal), with only `tools` on its PATH."""
    from etdeploy.devices.ssh.wire import _wrapper

    for tool in tools:
        (tmp_path / tool).symlink_to(shutil.which(tool) or pytest.skip(f"no {tool} here"))
    sh = shutil.which(shell) or pytest.skip(f"no {shell} here")
    # util-linux's setsid -w here plays sshd: a new session, no terminal, its status.
    session = shutil.which("setsid") or pytest.skip("no setsid here")
    done = subprocess.run(
        [
            session,
            "-w",
            sh,
            "-c",
            _wrapper("/bin/sh -c 'kill -KILL 0'; exit $?"),
            "etdeploy-run-x",
        ],
        env={"PATH": str(tmp_path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    marker, wrapper, _, command_group = done.stdout.split()
    assert marker == "ETDEPLOY-PID" and int(wrapper) > 1
    if own_group:
        assert int(command_group) != int(wrapper)
        assert done.returncode == 128 + 9  # the wrapper's exit-status, as sshd passes it on
    else:
        assert command_group == "-"
        assert done.returncode == -9  # the wrapper went too: sshd would send exit-signal


def test_the_token_kill_reaches_only_the_command_that_carries_the_token() -> None:
    """A wrapper whose pid is not known yet is found by its token; the pattern is put
    together at run time, and a token that is not etdeploy's gives no command at all
    (an empty pattern would match every process)."""
    from etdeploy.devices.ssh.wire import token_kill

    token = "etdeploy-run-0123456789abcdef"
    carrier = subprocess.Popen(["sh", "-c", "sleep 30", token])
    bystander = subprocess.Popen(["sleep", "31"])
    try:
        time.sleep(0.2)
        # pgrep in place of pkill: the same selection, listed instead of killed.
        listed = subprocess.run(
            ["sh", "-c", token_kill(token, tool="pgrep")], capture_output=True, text=True
        ).stdout.split()
        assert listed == [str(carrier.pid)]
    finally:
        carrier.kill()
        bystander.kill()
        carrier.wait()
        bystander.wait()
    for bad in ("etdeploy-run-", "etdeploy-run-$x", "other-0123456789abcdef"):
        with pytest.raises(ValueError):
            token_kill(bad)


def test_helper_scripts_share_one_session_that_no_script_can_break(
    device: SshDevice, tmp_path: Path
) -> None:
    for i in range(5):  # a probe and a record per file, none a session of its own
        device.push(random_file(tmp_path / f"{i}.bin", 1000), f"inputs/{i}.bin")
    assert device.helper_sessions == 1
    with pytest.raises(DeviceError, match="exit status 3"):
        device.helper("exit 3", "exiting")
    # A script reading stdin gets nothing (it cannot eat the scripts after it).
    assert device.helper("cat; echo still here", "reading stdin") == "still here\n"
    assert device.helper("printf 'no newline'", "printing") == "no newline"
    with pytest.raises(DeviceError, match="no answer within 1 s"):
        device.helper("sleep 30", "sleeping", deadline_s=1)
    assert device.helper("echo fresh", "after a timeout") == "fresh\n"
    assert device.helper_sessions == 2 and device.connects == 1


def test_run_of_a_missing_program_reports_127(device: SshDevice) -> None:
    out = device.run(["/no/such/program"], deadline_s=30)
    assert out.exit_code == 127


# -- files -----------------------------------------------------------------------


def test_push_then_pull_round_trips_the_bytes_with_progress(
    device: SshDevice, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "model.pte", 3 * 1024 * 1024 + 17)
    seen: list[tuple[int, int]] = []
    result = device.push(
        local, "job/model.pte", progress=lambda _p, done, total: seen.append((done, total))
    )
    assert result.bytes_sent == local.stat().st_size
    assert not result.skipped
    assert result.remote == f"{device.workdir}/job/model.pte"
    assert seen[-1] == (local.stat().st_size, local.stat().st_size)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    back = device.pull("job/model.pte", tmp_path / "back" / "model.pte")
    assert back.read_bytes() == local.read_bytes()
    assert device.sha256("job/model.pte") == hashlib.sha256(local.read_bytes()).hexdigest()


def test_push_skips_a_file_whose_remote_sha256_matches(device: SshDevice, tmp_path: Path) -> None:
    local = random_file(tmp_path / "inputs.bin", 200_000)
    assert device.push(local, "job/inputs.bin").bytes_sent == 200_000
    again = device.push(local, "job/inputs.bin")
    assert again.skipped
    assert again.bytes_sent == 0
    # A different file under the same name is sent again.
    random_file(local, 200_000)
    assert device.push(local, "job/inputs.bin").bytes_sent == 200_000
    assert device.sha256("job/inputs.bin") == hashlib.sha256(local.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def counting_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SshServer, Path]]:
    """An sshd whose sessions find a sha256sum first on PATH that logs each call,
    then runs the real one: how these tests see whether a push hashed remotely."""
    root = tmp_path_factory.mktemp("counting-sshd")
    tools = root / "bin"
    tools.mkdir()
    log = root / "sha256sum.log"
    wrapper = tools / "sha256sum"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec /usr/bin/sha256sum "$@"\n')
    wrapper.chmod(0o755)
    log.write_text("")
    with start_sshd(root / "sshd", set_env={"PATH": f"{tools}:/usr/bin:/bin"}) as server:
        yield server, log


def remote_hashes(log: Path) -> int:
    return len(log.read_text().splitlines())


def test_an_unchanged_file_is_known_by_its_record_and_a_changed_one_is_hashed(
    counting_sshd: tuple[SshServer, Path], tmp_path: Path
) -> None:
    server, log = counting_sshd
    local = random_file(tmp_path / "model.pte", 300_000)
    with SshDevice(settings_for(server, tmp_path)) as dev:
        dev.push(local, "programs/model.pte")
        before = remote_hashes(log)
        assert dev.push(local, "programs/model.pte").skipped
        assert remote_hashes(log) == before  # the record said what is there
    # A new connection (a new run) trusts the record the same way.
    with SshDevice(settings_for(server, tmp_path)) as dev:
        assert dev.push(local, "programs/model.pte").skipped
        assert remote_hashes(log) == before
        # Altered behind etdeploy's back, its size and mtime put back: hashed, re-sent.
        remote = Path(dev.workdir) / "programs" / "model.pte"
        st = remote.stat()
        remote.write_bytes(os.urandom(300_000))
        os.utime(remote, ns=(st.st_atime_ns, st.st_mtime_ns))
        again = dev.push(local, "programs/model.pte")
        assert not again.skipped and remote_hashes(log) == before + 1
        assert remote.read_bytes() == local.read_bytes()
        # --verify-remote hashes even a file whose record is whole.
        assert dev.push(local, "programs/model.pte", verify=True).skipped
        assert remote_hashes(log) == before + 2


def test_a_file_of_another_size_is_sent_without_hashing_either_side_remotely(
    counting_sshd: tuple[SshServer, Path], tmp_path: Path
) -> None:
    server, log = counting_sshd
    with SshDevice(settings_for(server, tmp_path)) as dev:
        dev.push(random_file(tmp_path / "a.bin", 1000), "inputs/x.bin")
        before = remote_hashes(log)
        result = dev.push(random_file(tmp_path / "b.bin", 2000), "inputs/x.bin")
        assert result.bytes_sent == 2000 and remote_hashes(log) == before


def test_push_applies_the_mode_and_leaves_no_temporary_file(
    device: SshDevice, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "runner", 1000)
    result = device.push(local, "job/runner", mode=0o755)
    remote = Path(result.remote)
    assert remote.stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in remote.parent.iterdir()) == ["runner"]


def test_file_helpers_report_missing_files_plainly(device: SshDevice, tmp_path: Path) -> None:
    assert device.sha256("nothing/here.bin") is None
    assert not device.exists("nothing/here.bin")
    device.makedirs("a/b/c")
    assert device.exists("a/b/c")
    local = random_file(tmp_path / "x.bin", 10)
    device.push(local, "a/b/c/x.bin")
    device.remove("a/b/c/x.bin")
    assert not device.exists("a/b/c/x.bin")
    device.remove("a", recursive=True)
    assert not device.exists("a")


def test_pull_of_a_missing_file_is_a_device_error_and_writes_nothing(
    device: SshDevice, tmp_path: Path
) -> None:
    target = tmp_path / "out" / "result.bin"
    with pytest.raises(DeviceError, match="no such file"):
        device.pull("missing/result.bin", target)
    assert not target.parent.exists() or list(target.parent.iterdir()) == []


def test_removing_the_home_directory_is_refused(device: SshDevice) -> None:
    with pytest.raises(UsageError, match="refusing"):
        device.remove("~", recursive=True)


# -- identity --------------------------------------------------------------------


def test_info_reports_the_remote_os_and_abi(device: SshDevice) -> None:
    info = device.info()
    machine = os.uname().machine
    expected = {"aarch64": "arm64", "amd64": "x86_64"}.get(machine, machine)
    assert info.os == "linux"
    assert info.abi == f"linux-{expected}"
    assert info.transport == "ssh"
    assert info.serial == f"{device.target.user}@127.0.0.1:{device.target.port}"
    assert info.os_version == os.uname().release


def test_workdir_defaults_to_etdeploy_in_the_remote_home(sshd: SshServer, tmp_path: Path) -> None:
    with SshDevice(settings_for(sshd, tmp_path, workdir=None)) as dev:
        home = dev.run(["sh", "-c", 'printf %s "$HOME"'], deadline_s=30).stdout
        assert dev.workdir == f"{home}/etdeploy"  # type: ignore[attr-defined]
        assert dev.resolve("job/x") == f"{home}/etdeploy/job/x"  # type: ignore[attr-defined]
        assert dev.resolve("~/y") == f"{home}/y"  # type: ignore[attr-defined]


# -- host keys -------------------------------------------------------------------


def test_unknown_host_key_is_rejected_by_default_with_the_fix(
    sshd: SshServer, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with (
        SshDevice(settings_for(sshd, tmp_path, known_hosts=str(empty))) as dev,
        pytest.raises(DeviceError) as caught,
    ):
        dev.run(["true"], deadline_s=30)
    assert "not in" in caught.value.message
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {empty}" in (caught.value.hint or "")
    assert "accept-new" in (caught.value.hint or "")
    assert empty.read_text() == ""


def test_accept_new_records_the_host_key_and_strict_then_trusts_it(
    sshd: SshServer, tmp_path: Path
) -> None:
    known = tmp_path / "fresh" / "known_hosts"
    accepting = settings_for(sshd, tmp_path, known_hosts=str(known), host_key_policy="accept-new")
    with SshDevice(accepting) as dev:
        assert dev.run(["true"], deadline_s=30).exit_code == 0
    assert known.read_text() == sshd.known_hosts_line()
    with SshDevice(settings_for(sshd, tmp_path, known_hosts=str(known))) as strict:
        assert strict.run(["true"], deadline_s=30).exit_code == 0
    assert known.read_text() == sshd.known_hosts_line()


def test_a_changed_host_key_is_rejected_even_with_accept_new(
    sshd: SshServer, tmp_path: Path
) -> None:
    impostor = generate_key(tmp_path / "other_host_key")
    key_type, key_b64 = (tmp_path / "other_host_key.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {key_type} {key_b64}\n")
    assert impostor.exists()
    for policy in ("strict", "accept-new"):
        settings = settings_for(sshd, tmp_path, known_hosts=str(known), host_key_policy=policy)
        with SshDevice(settings) as dev, pytest.raises(DeviceError) as caught:
            dev.run(["true"], deadline_s=30)
        assert "CHANGED" in caught.value.message
        assert f"ssh-keygen -R '[127.0.0.1]:{sshd.port}'" in (caught.value.hint or "")
    assert known.read_text() == f"[127.0.0.1]:{sshd.port} {key_type} {key_b64}\n"


# -- authentication and connecting ------------------------------------------------


def test_a_key_the_host_does_not_accept_gives_a_clear_authentication_error(
    sshd: SshServer, tmp_path: Path
) -> None:
    stranger = generate_key(tmp_path / "id_stranger")
    with (
        SshDevice(settings_for(sshd, tmp_path, key_filename=str(stranger))) as dev,
        pytest.raises(DeviceError) as caught,
    ):
        dev.run(["true"], deadline_s=30)
    message = caught.value.message
    assert f"authentication failed for {sshd.user}@127.0.0.1:{sshd.port}" in message
    assert str(stranger) in message
    assert "ssh-copy-id" in (caught.value.hint or "")
    assert not caught.value.retryable


def test_nothing_listening_is_a_retryable_device_error(sshd: SshServer, tmp_path: Path) -> None:
    port = free_port()
    with (
        SshDevice(settings_for(sshd, tmp_path, port=port)) as dev,
        pytest.raises(DeviceError) as caught,
    ):
        dev.run(["true"], deadline_s=30)
    assert "connection refused" in caught.value.message
    assert caught.value.retryable


def test_a_server_that_never_sends_its_banner_times_out(sshd: SshServer, tmp_path: Path) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    accepted: list[socket.socket] = []
    waiter = threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True)
    waiter.start()
    try:
        settings = settings_for(
            sshd,
            tmp_path,
            port=silent.getsockname()[1],
            banner_timeout_s=1.0,
            connect_timeout_s=1.0,
        )
        started = time.monotonic()
        with SshDevice(settings) as dev, pytest.raises((DeviceError, TransportError)) as caught:
            dev.run(["true"], deadline_s=30)
        assert time.monotonic() - started < 10
        assert caught.value.retryable
    finally:
        for sock in accepted:
            sock.close()
        silent.close()


def test_an_ssh_config_alias_supplies_host_port_user_key_and_known_hosts(
    sshd: SshServer, tmp_path: Path
) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host buildmac\n"
        "    HostName 127.0.0.1\n"
        f"    Port {sshd.port}\n"
        f"    User {sshd.user}\n"
        f"    IdentityFile {sshd.key_filename}\n"
        f"    UserKnownHostsFile {sshd.known_hosts}\n"
    )
    settings = SshSettings(host="buildmac", ssh_config=str(config), workdir=str(tmp_path / "w"))
    target = resolve_target(settings)
    assert (target.hostname, target.port, target.user) == ("127.0.0.1", sshd.port, sshd.user)
    assert target.key_filenames == (str(sshd.key_filename),)
    assert target.known_hosts == (sshd.known_hosts,)
    with SshDevice(settings) as dev:
        assert dev.name == "buildmac"
        assert dev.lock_key() == f"ssh:{sshd.user}@127.0.0.1:{sshd.port}"
        assert dev.run(["echo", "via alias"], deadline_s=30).stdout == "via alias\n"


def test_explicit_settings_win_over_ssh_config(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host mac\n    HostName 10.0.0.9\n    Port 2200\n    User alice\n")
    target = resolve_target(SshSettings(host="mac", port=2222, user="bob", ssh_config=str(config)))
    assert (target.hostname, target.port, target.user) == ("10.0.0.9", 2222, "bob")
    assert target.host_key_name == "[10.0.0.9]:2222"


# -- a connection cut mid-transfer ------------------------------------------------


def test_a_connection_cut_during_push_is_retryable_and_leaves_no_file(
    sshd: SshServer, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "big.bin", 8 * 1024 * 1024)
    with CuttingProxy(sshd.port) as proxy:
        settings = settings_for(sshd, tmp_path, **through_proxy(sshd, proxy.port, tmp_path))
        with SshDevice(settings) as dev:
            dev.makedirs("job")
            proxy.arm(after_bytes=2 * 1024 * 1024)
            with pytest.raises(TransportError) as caught:
                dev.push(local, "job/big.bin")
            assert caught.value.retryable
            assert "lost during upload" in caught.value.message
            remote_dir = Path(dev.workdir) / "job"
            assert not (remote_dir / "big.bin").exists()
            assert proxy.cuts == 1

            result = dev.push(local, "job/big.bin")
            assert result.bytes_sent == local.stat().st_size
            assert dev.connects == 2
            assert (remote_dir / "big.bin").read_bytes() == local.read_bytes()
            # The cut upload's temporary file is cleaned up after reconnecting.
            assert sorted(p.name for p in remote_dir.iterdir()) == ["big.bin"]


@pytest.mark.parametrize("cut_after", [40_000, 700_000, 3 * 1024 * 1024])
def test_a_cut_anywhere_in_an_upload_is_a_lost_connection_never_a_write_refusal(
    sshd: SshServer, tmp_path: Path, cut_after: int
) -> None:
    # Whether paramiko has noticed the loss yet is a race; only a status reply from
    # the server makes a failure "cannot write", so no cut can be taken for one.
    local = random_file(tmp_path / "lib.so", 4 * 1024 * 1024)
    with CuttingProxy(sshd.port) as proxy:
        settings = settings_for(sshd, tmp_path, **through_proxy(sshd, proxy.port, tmp_path))
        with SshDevice(settings) as dev:
            dev.makedirs("runners")
            proxy.arm(after_bytes=cut_after)
            with pytest.raises(TransportError) as caught:
                dev.push(local, "runners/lib.so")
            assert caught.value.retryable and "lost during upload" in caught.value.message
            assert "none confirmed written" in caught.value.message
            assert not (Path(dev.workdir) / "runners" / "lib.so").exists()


def test_a_write_the_server_refuses_is_a_device_error_not_a_lost_connection(
    device: SshDevice, tmp_path: Path
) -> None:
    # A directory with a file in it where the file must go: the upload is written,
    # then the SFTP server answers the rename with a failure status (root may
    # write anywhere, so no permission bits would do).
    device.makedirs("job/x.bin")
    (Path(device.workdir) / "job" / "x.bin" / "keep").write_text("someone's")
    with pytest.raises(DeviceError) as caught:
        device.push(random_file(tmp_path / "x.bin", 1000), "job/x.bin")
    assert not isinstance(caught.value, TransportError) and not caught.value.retryable
    assert "cannot write" in caught.value.message
    assert device.connects == 1  # the connection was fine all along
    partial = Path(temporary_name(f"{device.workdir}/job/x.bin"))
    assert not partial.exists()


def test_a_full_disk_is_a_device_error_naming_clean_and_leaves_nothing_half_written(
    sshd: SshServer, tmp_path: Path
) -> None:
    from tests.support.tmpfs import small_tmpfs

    workdir = tmp_path / "remote-work"
    big = random_file(tmp_path / "big.pte", 3 * 1024 * 1024)
    with (
        small_tmpfs(workdir, 2 * 1024 * 1024),
        SshDevice(settings_for(sshd, tmp_path, workdir=str(workdir))) as dev,
    ):
        with pytest.raises(DeviceError) as caught:
            dev.push(big, "programs/big.pte")
        error = caught.value
        assert not isinstance(error, TransportError) and not error.retryable
        assert error.hint and f"etdeploy clean --device {dev.name}" in error.hint
        left = [p.name for p in workdir.rglob("*") if p.is_file()]
        assert left == [], left  # no partial, no record
        # What fits still goes, on the same connection.
        assert dev.push(random_file(tmp_path / "small.bin", 1000), "inputs/s.bin").bytes_sent


# paramiko's prefetch reader runs in its own thread and dies with the connection;
# pull() reports the loss itself, so that thread's exception is expected noise.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_connection_cut_during_pull_is_retryable_and_writes_nothing_locally(
    sshd: SshServer, tmp_path: Path
) -> None:
    with CuttingProxy(sshd.port) as proxy:
        settings = settings_for(sshd, tmp_path, **through_proxy(sshd, proxy.port, tmp_path))
        with SshDevice(settings) as dev:
            source = random_file(tmp_path / "source.bin", 16 * 1024 * 1024)
            dev.push(source, "job/out.bin")
            target = tmp_path / "pulled" / "out.bin"
            # A pull sends only small read requests; cut after a few hundred of them.
            proxy.arm(after_bytes=20_000)
            with pytest.raises(TransportError) as caught:
                dev.pull("job/out.bin", target)
            assert caught.value.retryable
            assert list(target.parent.iterdir()) == []
            assert dev.pull("job/out.bin", target).read_bytes() == source.read_bytes()


# -- an interruption on a link that then hangs and drops ----------------------------


@contextlib.contextmanager
def ctrl_c_after_first_chunk(proxy: CuttingProxy) -> Iterator[ProgressCallback]:
    """A progress callback that, at a transfer's first report, hangs the link (the
    proxy relays nothing more, either way), then delivers SIGINT as a terminal's
    Ctrl-C does; the link is cut 0.5 s later, as a hung link finally drops.

    Interrupted there, the SFTP file's close can still send its request (the SSH
    window has room), and it waits for an answer the hung link never brings: the
    race the pipeline's interruption tests lose now and then, made certain."""

    def interrupt(_path: str, done: int, _total: int) -> None:
        if done and not proxy.stalled.is_set():
            proxy.stall(0)
            threading.Timer(0.5, proxy.down).start()
            signal.raise_signal(signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield interrupt
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_interrupted_push_stays_an_interruption_when_the_link_then_drops(
    sshd: SshServer, tmp_path: Path
) -> None:
    local = random_file(tmp_path / "lib.so", 3 * 1024 * 1024)
    with CuttingProxy(sshd.port) as proxy:
        settings = settings_for(sshd, tmp_path, **through_proxy(sshd, proxy.port, tmp_path))
        with SshDevice(settings) as dev:
            dev.makedirs("runners")
            with ctrl_c_after_first_chunk(proxy) as progress, pytest.raises(KeyboardInterrupt):
                dev.push(local, "runners/lib.so", progress=progress)
            remote_dir = Path(dev.workdir) / "runners"
            assert not (remote_dir / "lib.so").exists()  # nothing under the real name

            proxy.up()
            assert dev.push(local, "runners/lib.so").bytes_sent == local.stat().st_size
            # The interrupted upload's partial file went with the next push.
            assert sorted(p.name for p in remote_dir.iterdir()) == ["lib.so"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_interrupted_pull_stays_an_interruption_when_the_link_then_drops(
    sshd: SshServer, tmp_path: Path
) -> None:
    source = random_file(tmp_path / "source.bin", 16 * 1024 * 1024)
    with CuttingProxy(sshd.port) as proxy:
        settings = settings_for(sshd, tmp_path, **through_proxy(sshd, proxy.port, tmp_path))
        with SshDevice(settings) as dev:
            dev.push(source, "job/out.bin")
            target = tmp_path / "pulled" / "out.bin"
            with ctrl_c_after_first_chunk(proxy) as progress, pytest.raises(KeyboardInterrupt):
                dev.pull("job/out.bin", target, progress=progress)
            assert list(target.parent.iterdir()) == []  # no half-written file here

            proxy.up()
            assert dev.pull("job/out.bin", target).read_bytes() == source.read_bytes()


# -- one job per host --------------------------------------------------------------


def test_lock_key_serialises_two_jobs_on_the_same_host(sshd: SshServer, tmp_path: Path) -> None:
    first = SshDevice(settings_for(sshd, tmp_path))
    second = SshDevice(settings_for(sshd, tmp_path, workdir=str(tmp_path / "other")))
    elsewhere = SshDevice(settings_for(sshd, tmp_path, port=sshd.port + 1))
    assert first.lock_key() == second.lock_key() == f"ssh:{sshd.user}@127.0.0.1:{sshd.port}"
    assert elsewhere.lock_key() != first.lock_key()

    spans: dict[str, tuple[float, float]] = {}

    def job(label: str, dev: SshDevice) -> None:
        with device_lock(dev, timeout_s=30):
            begin = time.monotonic()
            dev.run(["sleep", "0.5"], deadline_s=30)
            spans[label] = (begin, time.monotonic())

    threads = [
        threading.Thread(target=job, args=("first", first)),
        threading.Thread(target=job, args=("second", second)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    (_, a_end), (b_begin, _) = sorted(spans.values())
    assert b_begin >= a_end, "the second job ran while the first held the host"

    with (
        device_lock(first),
        pytest.raises(DeviceError, match="busy"),
        device_lock(second, timeout_s=0.3),
    ):
        pass
    first.close()
    second.close()


# -- settings from etdeploy.toml ----------------------------------------------------


def test_settings_from_a_device_table_are_typed() -> None:
    settings = SshSettings.from_mapping(
        {"host": "mac", "port": 2222, "connect_timeout_s": 3, "host_key_policy": "accept-new"}
    )
    # Nothing is kept in the background unless the table asks (persist_s, keeper.py),
    # whether the settings come from etdeploy.toml or from code.
    assert settings == SshSettings(
        host="mac", port=2222, connect_timeout_s=3.0, host_key_policy="accept-new", persist_s=0.0
    )
    assert isinstance(settings.connect_timeout_s, float)
    assert SshSettings(host="mac").persist_s == 0
    assert SshSettings.from_mapping({"host": "mac", "persist_s": 60}).persist_s == 60.0


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"port": 22}, "devices.mac: host is required"),
        ({"host": "mac", "prot": 22}, "devices.mac: unknown key 'prot'"),
        ({"host": "mac", "port": "22"}, "devices.mac.port: expected int, got '22'"),
        ({"host": "mac", "port": True}, "devices.mac.port: expected int, got True"),
        ({"host": "mac", "host_key_policy": "yolo"}, "devices.mac.host_key_policy: expected"),
    ],
)
def test_a_bad_device_table_names_the_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        SshSettings.from_mapping(table, where="devices.mac")
    assert message in caught.value.message


def test_a_run_whose_caller_is_interrupted_kills_the_remote_group(
    device: SshDevice, tmp_path: Path
) -> None:
    from tests.support.interrupt import interrupted_after

    pid_file = tmp_path / "remote.pid"
    with interrupted_after(1.5), pytest.raises(KeyboardInterrupt):
        # Deaf to the hang-up sshd sends when the channel closes: only our kill stops it.
        device.run(["sh", "-c", f"trap '' HUP; echo $$ > {pid_file}; exec sleep 60"], deadline_s=60)
    pid = int(pid_file.read_text())
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists()


def test_a_flood_of_output_is_kept_as_head_and_tail(device: SshDevice) -> None:
    out = device.run(["sh", "-c", "yes line | head -c 40000000; echo END; exit 7"], deadline_s=120)
    assert out.exit_code == 7
    assert out.stdout.startswith("line\n") and out.stdout.endswith("END\n")
    assert "characters of output dropped" in out.stdout and len(out.stdout) < 17_000_000


def test_an_ssh_config_match_exec_line_runs(tmp_path: Path) -> None:
    """paramiko is imported as it comes (issue 36: invoke is no longer held back), and
    an ssh_config `Match exec` line runs through it."""
    config = tmp_path / "ssh_config"
    config.write_text('Match exec "test -d /"\n  User matched\n')
    code = (
        "import etdeploy.devices.ssh.connection\nimport paramiko\n"
        f"print(paramiko.SSHConfig.from_path({str(config)!r}).lookup('h').get('user'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    assert done.stdout.split() == ["matched"]
