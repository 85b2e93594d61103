"""Two faults on every kind of device: a runner that stops (SIGSTOP: a hung delegate, a
phone that freezes the process) is ended by `--deadline` at about that deadline, with
exit 3, also while the host is busy; and Ctrl-C while a file is on its way to the
device leaves nothing there: no partial file, no job folder.

Every device kind a run reaches: this machine (local), the loopback phone behind the
REAL adb server (tests/support/loopback_adb.py), the REAL sshd on loopback
(tests/support/sshd.py), and the arm64 phone whose runner executes as ARM code under
qemu-user (tests/support/arm64.py). Each run is a real `etdeploy run digits` in its own
process. A busy host is made here: as many busy-looping processes as there are cores,
beside the run, for as long as it lasts (a farm host is busy)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from etdeploy.devices.transfer import PARTIAL_MARKER
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.device_config import ssh_table, through_proxy, write_config
from tests.support.processes import processes_naming
from tests.support.sshd import CuttingProxy, SshServer, start_sshd

pytestmark = pytest.mark.slow

KINDS = ("local", "adb", "ssh", "arm64")
DEADLINE_S = 6
# What may come after the deadline: killing the runner, reading what it said, removing
# its job folder, writing the result; on a host whose cores are all taken.
AFTER_DEADLINE_S = 12
PHONE_WORKDIR = "/data/local/tmp/etdeploy"
RUNS_FOR_S = 3


@dataclass(frozen=True)
class Kind:
    """A device of one kind: the config that reaches it, where its work dir is on this
    machine (each stand-in keeps its files here), and how to make its link slow (a
    phone on weak Wi-Fi, a board on a slow network; None: a local copy, which has no
    link)."""

    name: str
    config: Path
    workdir: Path
    slow_link: Callable[[float | None], None] | None = None


@pytest.fixture(scope="module")
def runners() -> dict[str, Path]:
    from etdeploy.builder import BuildOptions, build
    from etdeploy.runner_build import ensure_runner

    build("digits", BuildOptions())  # the program every run here uses
    return {"host": ensure_runner("host").directory}


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[AdbTestbed, SshServer, CuttingProxy]]:
    root = tmp_path_factory.mktemp("faults")
    with (
        adb_testbed(root / "adb", ("pixel",)) as adb,
        start_sshd(root / "sshd") as sshd,
        CuttingProxy(sshd.port) as proxy,
    ):
        yield adb, sshd, proxy


@pytest.fixture(scope="module")
def arm64_phone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbTestbed]:
    from tests.support.arm64 import require_arm64

    require_arm64()
    from etdeploy.runner_build import ensure_runner

    ensure_runner("aarch64")
    with adb_testbed(tmp_path_factory.mktemp("adb-arm64"), {"pixel": {"arm64": True}}) as bed:
        yield bed


@pytest.fixture(params=KINDS)
def kind(
    request: pytest.FixtureRequest, runners: dict[str, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Kind]:  # fmt: skip
    for name in ("ANDROID_NDK", "EXECUTORCH_ANDROID_PREFIX", "SSH_AUTH_SOCK"):
        monkeypatch.delenv(name, raising=False)  # the bundles built here, no agent
    config = tmp_path / "etdeploy.toml"
    if request.param == "local":
        workdir = tmp_path / "local-work"
        write_config(config, {"dut": {"transport": "local", "workdir": str(workdir)}})
        yield Kind("local", config, workdir)
        return
    if request.param == "ssh":
        _, sshd, proxy = request.getfixturevalue("servers")
        table = ssh_table(sshd, tmp_path, **through_proxy(sshd, proxy.port, tmp_path))
        write_config(config, {"dut": table})
        yield Kind("ssh", config, Path(str(table["workdir"])), proxy.throttle)
        proxy.throttle(None)
        return
    if request.param == "adb":
        bed, _, _ = request.getfixturevalue("servers")
        table = {"serial": bed.serial("pixel"), "adb_port": bed.server.port,
                 "runner": str(runners["host"])}  # fmt: skip
    else:
        bed = request.getfixturevalue("arm64_phone")
        table = {"serial": bed.serial("pixel"), "adb_port": bed.server.port}
    phone = bed.phones["pixel"]
    write_config(config, {"dut": table})

    def slow_link(bytes_per_s: float | None) -> None:
        phone.faults.send_bytes_per_s = bytes_per_s

    yield Kind(request.param, config, phone.device_path(PHONE_WORKDIR), slow_link)
    phone.faults.send_bytes_per_s = None


@contextlib.contextmanager
def busy_host() -> Iterator[None]:
    """Every core of this machine taken by a busy loop while the block runs."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def start_run(kind: Kind, tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / "run.log"
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "etdeploy", "run", "digits", "-d", "dut", "--config",
             str(kind.config), "--warmup", "0", *args],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
    return process, log


def wait_for(what: str, ready: Callable[[], bool], process: subprocess.Popen[bytes],
             log: Path, timeout: float = 300) -> None:  # fmt: skip
    limit = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None or time.monotonic() > limit:
            raise AssertionError(f"never reached: {what}\n{log.read_text()}")
        time.sleep(0.02)


def runners_in(workdir: Path) -> list[int]:
    """The runner processes started from this work dir (under qemu for arm64)."""
    return processes_naming(str(workdir), "etdeploy_runner", "--model_path")


def debris(workdir: Path) -> list[str]:
    """Job folders and partial files on the device."""
    if not workdir.is_dir():
        return []
    found = [p.name for p in workdir.iterdir() if p.is_dir() and p.name[:2] == "20"]
    found += [str(p.relative_to(workdir)) for p in workdir.rglob(f"*{PARTIAL_MARKER}*")]
    return found


@pytest.mark.serial  # its spinners take every core, which would slow the tests beside it
def test_a_stopped_runner_ends_at_the_deadline_on_a_busy_host(kind: Kind, tmp_path: Path) -> None:
    process, log = start_run(kind, tmp_path, "-n", "100000000", "--deadline", str(DEADLINE_S))
    try:
        wait_for("the runner", lambda: bool(runners_in(kind.workdir)), process, log)
        time.sleep(RUNS_FOR_S)  # it ran a while (and logged each iteration), then stopped
        with busy_host():
            for pid in runners_in(kind.workdir):
                os.kill(pid, signal.SIGSTOP)
            stopped = time.monotonic()
            exited = process.wait(timeout=DEADLINE_S + 120)
            took = time.monotonic() - stopped
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in runners_in(kind.workdir):
            os.kill(pid, signal.SIGKILL)
    said = log.read_text()
    assert exited == 3, said
    assert "timed out" in said and "Traceback" not in said
    assert took < DEADLINE_S + AFTER_DEADLINE_S, f"{kind.name}: ended {took:.1f} s after the stop"
    assert runners_in(kind.workdir) == []
    assert debris(kind.workdir) == []


def partial_files(workdir: Path) -> list[Path]:
    return list(workdir.rglob(f"*{PARTIAL_MARKER}*")) if workdir.is_dir() else []


def test_ctrl_c_during_a_push_leaves_no_partial_file_and_no_job_folder(
    kind: Kind, tmp_path: Path
) -> None:
    """The link stays up; the run is stopped while the runner is on its way there."""
    for attempt in range(1, 6):
        # Nothing on the device yet: the runner bundle is pushed, file by file.
        shutil.rmtree(kind.workdir, ignore_errors=True)
        if kind.slow_link is not None:
            kind.slow_link(2e6)  # ~7 s for the bundle's 14 MB
        process, log = start_run(kind, tmp_path, "-n", "1")
        try:
            # A local copy takes milliseconds: looked for at once, and tried again
            # when the push ended before it was seen.
            wait_for("a push under way", lambda p=process: bool(partial_files(kind.workdir))
                     or p.poll() is not None, process, log)  # fmt: skip
            seen = process.poll() is None
            process.send_signal(signal.SIGINT)
            exited = process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            if kind.slow_link is not None:
                kind.slow_link(None)
        if seen and exited == 130:
            break
        assert kind.slow_link is None, f"attempt {attempt}: no push to interrupt\n{log.read_text()}"
    said = log.read_text()
    assert exited == 130 and said.rstrip().endswith("interrupted by SIGINT"), said
    assert debris(kind.workdir) == [], said
