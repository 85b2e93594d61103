"""devices/workdir.py: what dead runs left in a work dir goes with the next run, and
never what a live process or another machine owns.

On the local device (the same POSIX sh and listing as every transport) and on the
loopback phone behind the real adb server, with a real orphan process to kill.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from etdeploy.devices.local import LocalDevice
from etdeploy.devices.transfer import MACHINE_TAG, PARTIAL_MARKER, owner_tag
from etdeploy.devices.workdir import JobDirs, held_for_job, sweep_leftovers
from tests.support.processes import processes_naming


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process of this machine that has ended."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture
def orphans() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the group, its leader gone or not
        process.wait()


def group_alive(pgid: int) -> bool:
    """Whether a process of group pgid runs (zombies aside: a container's init may
    be slow to reap them)."""
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            return True
    return False


def orphan(pid_file: Path, started: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """A command as the adb run wrapper leaves it when its caller dies: its own group's
    leader, its pid in `pid_file`, the path on its command line."""
    process = subprocess.Popen(
        ["sh", "-c", f"echo $$ > {pid_file}; sleep 60; true"], start_new_session=True
    )
    started.append(process)
    deadline = time.monotonic() + 10
    while not (pid_file.is_file() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return process


def test_the_sweep_removes_what_dead_runs_of_this_machine_left_and_nothing_else(
    tmp_path: Path, dead_pid: int, orphans: list[subprocess.Popen[bytes]]
) -> None:
    work = tmp_path / "work"
    device = LocalDevice(workdir=work)
    dead, live = f"{MACHINE_TAG}-{dead_pid}", owner_tag()
    other_machine = "0badc0de-4242" if MACHINE_TAG != "0badc0de" else "feedf00d-4242"
    files = {
        f"runners/k/.libx.so{PARTIAL_MARKER}{dead}": "gone",  # a push a killed run cut
        f"inputs/.a.bin{PARTIAL_MARKER}{live}": "kept",  # a push in progress, here
        f"inputs/.b.bin{PARTIAL_MARKER}{other_machine}": "kept",  # another machine's
        f"programs/.c.pte{PARTIAL_MARKER}9123": "gone",  # untagged: an older etdeploy's
        f".pids/{live}-aaa.pid": "kept",
        f".pids/{other_machine}-bbb.pid": "kept",
        f".pids/{dead}-ccc.pid": "gone",
        "programs/d.pte": "kept",
    }
    for path in files:
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text("x")
    # The dead run's command still runs: the sweep ends it before removing its pid file.
    left_running = orphan(work / f".pids/{dead}-ccc.pid", orphans)

    removed = sweep_leftovers(device)

    assert sorted(removed) == sorted(f"{work}/{p}" for p, fate in files.items() if fate == "gone")
    for path, fate in files.items():
        assert (work / path).exists() == (fate == "kept"), path
    assert left_running.wait(timeout=10) == -signal.SIGKILL
    assert not group_alive(left_running.pid)  # what it started too
    assert sweep_leftovers(device) == []


def test_a_pid_that_now_names_another_process_is_not_killed(
    tmp_path: Path, dead_pid: int, orphans: list[subprocess.Popen[bytes]]
) -> None:
    work = tmp_path / "work"
    (work / ".pids").mkdir(parents=True)
    pid_file = work / f".pids/{MACHINE_TAG}-{dead_pid}-eee.pid"
    # A process that is not the run's wrapper (its command line does not name the
    # pid file) under the pid the file records.
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    orphans.append(bystander)
    pid_file.write_text(f"{bystander.pid}\n")
    assert sweep_leftovers(LocalDevice(workdir=work)) == [str(pid_file)]
    assert bystander.poll() is None


def test_the_next_run_sweeps_job_dirs_and_leftovers_but_its_own(
    tmp_path: Path, dead_pid: int
) -> None:
    work = tmp_path / "work"
    device = LocalDevice(workdir=work)
    jobs = JobDirs(device)
    (work / jobs.begin("20261204-000000-dead01")).mkdir(parents=True)  # killed mid-run
    (work / f"inputs/.i.bin{PARTIAL_MARKER}{MACHINE_TAG}-{dead_pid}").parent.mkdir(parents=True)
    (work / f"inputs/.i.bin{PARTIAL_MARKER}{MACHINE_TAG}-{dead_pid}").write_text("x")
    mine = jobs.begin("20261204-000001-live01")
    Path(mine).mkdir()
    removed = JobDirs(device).sweep(but="20261204-000001-live01")
    assert sorted(removed) == sorted([
        f"{work}/20261204-000000-dead01", f"{work}/inputs/.i.bin{PARTIAL_MARKER}{MACHINE_TAG}-{dead_pid}",
    ])  # fmt: skip
    assert Path(mine).is_dir()


def test_a_run_in_another_work_dir_of_the_device_leaves_this_ones_journal_alone(
    tmp_path: Path,
) -> None:
    """Two work dirs on one device (here two local devices: one lock, one machine): a
    run in the second neither removes the first's leftover nor forgets it, and the
    first's next run still finds it."""
    first, second = LocalDevice(workdir=tmp_path / "a"), LocalDevice(workdir=tmp_path / "b")
    assert first.lock_key() == second.lock_key()
    left = Path(JobDirs(first).begin("20261205-000000-dead02"))  # killed mid-run
    left.mkdir(parents=True)
    assert JobDirs(second).sweep() == []
    assert left.is_dir()
    assert JobDirs(first).sweep() == [str(left)]
    assert not left.exists()


def test_a_job_held_on_the_device_leaves_nothing_however_its_block_ends(tmp_path: Path) -> None:
    """held_for_job, as run, generate and localize hold a device: the job's directory
    goes when the block raises (an error, Ctrl-C), with its note; a directory whose
    job never got to remove it (a killed run) goes when the next job takes the device;
    --keep leaves the job's own."""
    work = tmp_path / "work"
    device = LocalDevice(workdir=work)
    with pytest.raises(KeyboardInterrupt), held_for_job(device, "20261205-000000-ctrlc1"):
        (work / "20261205-000000-ctrlc1").mkdir(parents=True)
        raise KeyboardInterrupt
    assert list(work.iterdir()) == []
    killed = Path(JobDirs(device).begin("20261205-000001-kill01"))  # its holder died
    killed.mkdir()
    with held_for_job(device, "20261205-000002-next01", keep=True):
        assert not killed.exists()
        (work / "20261205-000002-next01").mkdir()
    assert [p.name for p in work.iterdir()] == ["20261205-000002-next01"]


def test_what_is_left_of_a_dead_wrappers_group_is_killed_if_it_runs_from_the_work_dir(
    tmp_path: Path, dead_pid: int, orphans: list[subprocess.Popen[bytes]]
) -> None:
    """adbd hangs up only the shell when its stream closes: the wrapper dies, the
    runner it started lives on in the wrapper's group."""
    work = tmp_path / "work"
    (work / ".pids").mkdir(parents=True)
    runner = work / "runners" / "k" / "etdeploy_runner"
    runner.parent.mkdir(parents=True)
    runner.write_text("#!/bin/sh\nsleep 60\n")
    runner.chmod(0o755)
    pid_file = work / f".pids/{MACHINE_TAG}-{dead_pid}-fff.pid"
    wrapper = subprocess.Popen(
        ["sh", "-c", f"echo $$ > {pid_file}; {runner} & sleep 0.3; kill -KILL $$"],
        start_new_session=True,
    )
    orphans.append(wrapper)
    assert wrapper.wait(timeout=10) == -signal.SIGKILL
    left = processes_naming(str(runner))
    assert left  # the runner outlived its wrapper
    assert sweep_leftovers(LocalDevice(workdir=work)) == [str(pid_file)]
    deadline = time.monotonic() + 5
    while group_alive(wrapper.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(wrapper.pid)  # the runner and what it started
