"""A run interrupted at each stage, on the loopback phone and over SSH, leaves
nothing the next run does not remove.

Each interruption (SIGINT as a terminal's Ctrl-C sends it, SIGTERM as a CI system
cancelling a job does, SIGKILL, the device lost) comes at each stage of a real
`etdeploy run digits` in its own process: building (the run waits on the build
cache's lock, which the test holds), pushing (the transfer stalls part-way:
the loopback phone stops reading, or the proxy in front of sshd stops relaying),
running (the runner is up, with millions of iterations to go), pulling (the
phone's next RECV stalls; sshd's sftp-server is stopped while the runner runs).
After each, the device comes back, the next run passes, and the work dir holds
no job directory, partial file or pid file, no process of the run is left, and no
scratch directory of a run that nobody holds stays in the runs' temporary folder. Over SSH, a
stalled push is interrupted where the run waits, for the SSH window or for the
socket, which varies from run to run; tests/devices/test_ssh.py interrupts a
transfer where the window has room, every time. A push through a keeper the run
started (persist_s) is interrupted as a terminal's Ctrl-C does, to the run's whole
process group, of which the keeper is not part.

The device is the real adb server with tests/support/loopback_adb.py as the
phone, or OpenSSH's sshd on loopback behind tests/support/sshd.CuttingProxy;
the program is the session's prebuilt digits, the runner its warm host build.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import filelock
import pytest

from etdeploy.devices.transfer import PARTIAL_MARKER
from etdeploy.scratch import abandoned_scratch
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.device_config import ssh_table, through_proxy, write_config
from tests.support.processes import processes_naming
from tests.support.sshd import CuttingProxy, SshServer, _children_of, start_sshd

pytestmark = pytest.mark.slow

STAGES = ("build", "push", "run", "pull")
STOPS = ("SIGINT", "SIGTERM", "SIGKILL", "lost")
EXPECTED_EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGKILL": -9, "lost": 3}
# Iterations per stage: a run that is still running when interrupted, or one that
# ends soon so that the pull comes.
ITERATIONS = {"build": 1, "push": 1, "run": 30_000_000, "pull": 1}
# Over SSH the sftp-server is stopped while the runner runs: long enough to see it.
SSH_PULL_ITERATIONS = 200_000
PHONE_WORKDIR = "/data/local/tmp/etdeploy"


@dataclass
class Target:
    """A device under test: how the run reaches it, where its work dir is on this
    machine, and how to lose it and get it back."""

    transport: str
    config: Path
    workdir: Path
    lose: Callable[[], None]
    restore: Callable[[], None]
    stall_push: Callable[[], None]
    push_stalled: Callable[[], bool]
    stall_pull: Callable[[], None]
    pull_stalled: Callable[[], bool]


@pytest.fixture(scope="module")
def host_runner() -> Path:
    from etdeploy.builder import BuildOptions, build
    from etdeploy.runner_build import ensure_runner

    build("digits", BuildOptions())  # the prebuilt program every run here uses
    return ensure_runner("host").directory


@pytest.fixture(autouse=True)
def runs_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The runs' temporary folder (TMPDIR), this test's own: the scratch directories its
    runs leave are told apart from those of the tests `make test` runs beside it. Short,
    under the host's: an SSH keeper may put its socket there."""
    root = Path(tempfile.mkdtemp(prefix="etd-"))
    monkeypatch.setenv("TMPDIR", str(root))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def phone_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbTestbed]:
    with adb_testbed(tmp_path_factory.mktemp("adb"), ("pixel",)) as bed:
        yield bed


@dataclass(frozen=True)
class SshBed:
    server: SshServer
    proxy: CuttingProxy
    root: Path  # the host's work dir is root/remote-work, kept warm across tests


@pytest.fixture(scope="module")
def ssh_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshBed]:
    root = tmp_path_factory.mktemp("ssh")
    with start_sshd(root / "sshd") as server, CuttingProxy(server.port) as proxy:
        yield SshBed(server, proxy, root)


def adb_target(bed: AdbTestbed, runner: Path, tmp_path: Path) -> Iterator[Target]:
    phone = bed.phones["pixel"]
    # As adbd does: a closed stream hangs up only the shell, so a runner whose
    # caller died keeps running until the next run's sweep ends it.
    phone.on_stream_close = "sighup"
    table = {"serial": bed.serial("pixel"), "adb_port": bed.server.port, "runner": str(runner)}

    lost: list[bool] = []

    def lose() -> None:
        lost.append(True)
        phone.offline = True
        phone.release_stall()
        phone.drop_connections()

    def restore() -> None:
        phone.offline = False
        if lost or phone.stalled:
            phone.release_stall()
            bed.server.reconnect(phone)
        lost.clear()

    def stall_push() -> None:
        phone.faults.stall_after_send_bytes = 1 << 20

    def stall_pull() -> None:
        phone.faults.stall_next_recv = True

    yield Target(
        "adb", write_config(tmp_path / "etdeploy.toml", {"dut": table}),
        phone.device_path(PHONE_WORKDIR), lose, restore,
        stall_push, lambda: phone.stalled, stall_pull, lambda: phone.stalled,
    )  # fmt: skip
    phone.faults.stall_after_send_bytes = None
    phone.faults.stall_next_recv = False
    restore()


def ssh_target(bed: SshBed, tmp_path: Path, **table_keys: object) -> Iterator[Target]:
    server, proxy = bed.server, bed.proxy
    workdir = bed.root / "remote-work"
    table = ssh_table(
        server, tmp_path, **through_proxy(server, proxy.port, tmp_path), workdir=str(workdir),
        **table_keys,
    )  # fmt: skip
    stopped: list[int] = []

    def sftp_servers() -> list[int]:
        found = []
        for pid in _children_of(server.pid):
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "sftp-server":
                    found.append(pid)
            except OSError:
                continue
        return found

    def stall_pull() -> None:
        # Stopped while the runner runs: the pushes are done, the pulls will hang.
        for pid in sftp_servers():
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)

    def restore() -> None:
        proxy.up()
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                continue
        stopped.clear()

    yield Target(
        "ssh", write_config(tmp_path / "etdeploy.toml", {"dut": table}), workdir,
        proxy.down, restore,
        lambda: proxy.stall(2 << 20), proxy.stalled.is_set,
        stall_pull, lambda: bool(stopped),
    )  # fmt: skip
    proxy.stall(None)  # a stall not reached is taken back
    restore()


@pytest.fixture(params=["adb", "ssh"])
def target(request: pytest.FixtureRequest, host_runner: Path, tmp_path: Path) -> Iterator[Target]:
    if request.param == "adb":
        yield from adb_target(request.getfixturevalue("phone_bed"), host_runner, tmp_path)
    else:
        yield from ssh_target(request.getfixturevalue("ssh_bed"), tmp_path)


def start_run(
    target: Target, tmp_path: Path, iterations: int, *, own_group: bool = False
) -> tuple[subprocess.Popen[bytes], Path]:
    """`etdeploy run` of digits on the target; own_group: in a process group of its
    own, as a terminal's foreground job is, to be signalled as a whole."""
    log = tmp_path / "run.log"
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "etdeploy", "run", "digits", "-d", "dut", "--config",
             str(target.config), "-n", str(iterations), "--warmup", "0", "--deadline", "300",
             "--json", str(tmp_path / "result.json")],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=own_group,
            # SIGINT at its default, as in a terminal, even under a background `make test &`.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
    return process, log


def wait_for(
    what: str, ready: Callable[[], bool], process: subprocess.Popen[bytes], log: Path
) -> None:
    deadline = time.monotonic() + 120
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"never reached: {what}\n{log.read_text()}")
        time.sleep(0.05)


def runner_of(target: Target) -> list[int]:
    return processes_naming(str(target.workdir), "etdeploy_runner")


def debris(workdir: Path) -> list[str]:
    """What a run left: job directories, partial files, pid files, record temporaries."""
    if not workdir.is_dir():
        return []
    found = [p.name for p in workdir.iterdir() if p.is_dir() and p.name[:2] == "20"]
    for path in workdir.rglob("*"):
        name = path.name
        if (
            PARTIAL_MARKER in name
            or (path.parent.name == ".pids" and path.is_file())
            or (path.parent.name == ".etdeploy-digests" and ".tmp" in name)
        ):
            found.append(str(path.relative_to(workdir)))
    return found


def digits_build_lock() -> filelock.FileLock:
    """The lock of the float xnnpack digits entry in the build cache."""
    builds = Path(os.environ["ETDEPLOY_CACHE_DIR"]) / "builds"
    for manifest in builds.glob("*/digits.pte.json"):
        doc = json.loads(manifest.read_text())
        if doc["backend"] == "xnnpack" and not doc.get("quantization") and not doc.get("data"):
            return filelock.FileLock(f"{manifest.parent}.lock")
    raise AssertionError("digits is not built")


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("stage", STAGES)
def test_an_interrupted_run_leaves_nothing_the_next_run_does_not_remove(
    target: Target, stage: str, stop: str, tmp_path: Path
) -> None:
    if stage == "push" or (stage == "pull" and target.transport == "ssh"):
        # Something to push (and, over SSH, an sftp-server that pushed it, to stop).
        shutil.rmtree(target.workdir, ignore_errors=True)
    if stage == "push":
        target.stall_push()
    held = digits_build_lock() if stage == "build" else None
    if held is not None:
        held.acquire()
    if stage == "pull" and target.transport == "adb":
        target.stall_pull()  # the phone's next RECV: nothing is pulled before the outputs
    iterations = ITERATIONS[stage]
    if stage == "pull" and target.transport == "ssh":
        iterations = SSH_PULL_ITERATIONS
    process, log = start_run(target, tmp_path, iterations)
    try:
        if stage == "build":
            # Said as the build starts; the lock the test holds keeps it there.
            wait_for("building", lambda: "building digits" in log.read_text(), process, log)
            time.sleep(0.2)
        elif stage == "push":
            wait_for("a stalled push", target.push_stalled, process, log)
        elif stage == "run":
            wait_for("the runner", lambda: bool(runner_of(target)), process, log)
        else:
            if target.transport == "ssh":
                wait_for("the runner", lambda: bool(runner_of(target)), process, log)
                target.stall_pull()
            wait_for("the runner's end", lambda: not runner_of(target), process, log)
            wait_for("a stalled pull", target.pull_stalled, process, log)
            time.sleep(0.3)
        if stop == "lost":
            target.lose()
        else:
            process.send_signal(getattr(signal, stop))
        if held is not None:
            held.release()
        if stage in ("push", "pull") and stop in ("SIGINT", "SIGTERM"):
            # A hung link does not come back: the clean-up meets a lost device.
            time.sleep(0.5)
            target.lose()
        exited = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if held is not None and held.is_locked:
            held.release()
        target.restore()
    said = log.read_text()
    if stop in ("SIGINT", "SIGTERM"):
        assert_interrupted(stop, exited, tmp_path, said)
    else:
        assert exited == EXPECTED_EXIT[stop], said
        assert "Traceback" not in said
    if stop == "lost":
        assert json.loads((tmp_path / "result.json").read_text())["error"]["infrastructure"]
    assert_the_next_run_passes_and_nothing_is_left(target, tmp_path)


def assert_interrupted(stop: str, exited: int, tmp_path: Path, said: str) -> None:
    """The run ended as that signal's interruption: its exit code, its last line, and
    its result document's error."""
    assert exited == EXPECTED_EXIT[stop], said
    assert "Traceback" not in said
    error = json.loads((tmp_path / "result.json").read_text())["error"]
    assert error["infrastructure"], error
    assert error["kind"] == "Interruption" and stop in error["message"]
    assert said.rstrip().splitlines()[-1] == f"interrupted by {stop}"


def assert_the_next_run_passes_and_nothing_is_left(target: Target, tmp_path: Path) -> None:
    again = subprocess.run(
        [sys.executable, "-m", "etdeploy", "run", "digits", "-d", "dut", "--config",
         str(target.config), "-n", "1", "--warmup", "0", "-q"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert debris(target.workdir) == []
    assert runner_of(target) == []
    # A SIGKILLed run's scratch directory too: nobody held it, the next run removed it.
    assert abandoned_scratch(Path(os.environ["TMPDIR"])) == []


KEEPER = "etdeploy.devices.ssh.keeper"
# The keeper's time after the last command (devices.md: it leaves persist_s seconds
# after it), short: the test waits for it to go.
PERSIST_S = 3.0


def keepers_of(tmp_path: Path) -> list[int]:
    """The live keepers started for this test's table (its settings name tmp_path)."""
    return processes_naming(KEEPER, str(tmp_path))


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_a_push_through_a_keeper_the_run_started_is_interrupted_as_a_whole_job(
    ssh_bed: SshBed, host_runner: Path, tmp_path: Path, stop: str
) -> None:
    """With persist_s the run starts its host's keeper, which pushes for it. The
    signal goes to the run's whole process group, as a terminal's Ctrl-C goes to its
    foreground job: the keeper, in a session of its own, is not part of the job.
    The run ends as interrupted, the next run passes, nothing is left on the device,
    and the keepers leave persist_s after the last command, as documented."""
    assert keepers_of(tmp_path) == []
    generator = ssh_target(ssh_bed, tmp_path, persist_s=PERSIST_S)
    target = next(generator)
    try:
        shutil.rmtree(target.workdir, ignore_errors=True)  # something to push
        target.stall_push()
        process, log = start_run(target, tmp_path, 1, own_group=True)
        try:
            wait_for("a stalled push", target.push_stalled, process, log)
            started = keepers_of(tmp_path)
            assert started, "the push did not go through a keeper"
            assert all(os.getpgid(pid) != process.pid for pid in started), started
            os.killpg(process.pid, getattr(signal, stop))
            time.sleep(0.5)
            target.lose()  # a hung link does not come back
            exited = process.wait(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            target.restore()
        assert_interrupted(stop, exited, tmp_path, log.read_text())
        assert_the_next_run_passes_and_nothing_is_left(target, tmp_path)
        deadline = time.monotonic() + PERSIST_S + 15
        while keepers_of(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert keepers_of(tmp_path) == []
    finally:
        generator.close()
        for pid in keepers_of(tmp_path):  # none should be; none outlives the test
            os.kill(pid, signal.SIGKILL)
