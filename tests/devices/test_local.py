"""The local device honours the Device contract."""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import pytest

from etdeploy import digests
from etdeploy.devices.local import LocalDevice
from etdeploy.devices.transfer import temporary_name
from etdeploy.digests import RACY_MARGIN_NS, sha256_file
from etdeploy.errors import DeviceError
from tests.support.interrupt import interrupted_after
from tests.support.processes import processes_naming


def test_push_skips_an_unchanged_file_and_never_leaves_a_partial(tmp_path: Path) -> None:
    device = LocalDevice(workdir=tmp_path / "dev")
    src = tmp_path / "blob"
    src.write_bytes(b"x" * 100_000)
    remote = f"{device.workdir}/job/blob"
    first = device.push(src, remote)
    second = device.push(src, remote)
    assert (first.bytes_sent, first.skipped) == (100_000, False)
    assert (second.bytes_sent, second.skipped) == (0, True)
    assert device.sha256(remote) == sha256_file(src)
    assert [p.name for p in Path(remote).parent.iterdir()] == ["blob"]


def test_run_returns_exit_code_and_both_streams() -> None:
    out = LocalDevice().run(
        [
            sys.executable,
            "-c",
            "import sys; print('out'); print('err', file=sys.stderr); sys.exit(7)",
        ],
        deadline_s=30,
    )
    assert (out.exit_code, out.stdout.strip(), out.stderr.strip(), out.timed_out) == (
        7,
        "out",
        "err",
        False,
    )


def test_a_hung_process_is_killed_at_the_deadline() -> None:
    out = LocalDevice().run([sys.executable, "-c", "import time; time.sleep(60)"], deadline_s=1)
    assert out.timed_out and out.exit_code != 0 and out.elapsed_s < 30


def test_a_process_silent_past_the_idle_timeout_is_killed_with_its_output_kept() -> None:
    script = "import sys, time; print('loaded', flush=True); time.sleep(60)"
    out = LocalDevice().run([sys.executable, "-c", script], deadline_s=60, idle_timeout_s=1)
    assert out.timed_out and out.idle and out.stdout == "loaded\n"
    assert out.elapsed_s < 30


def test_an_unchanged_file_in_the_work_dir_is_known_by_its_stat_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    device = LocalDevice(workdir=tmp_path / "dev")
    src = tmp_path / "weights.bin"
    src.write_bytes(os.urandom(200_000))
    remote = f"{device.workdir}/programs/weights.bin"
    device.push(src, remote)
    # Once both sides are older than a timestamp tick and hashed, neither is read again.
    time.sleep(RACY_MARGIN_NS / 1e9 + 0.1)
    assert device.push(src, remote, verify=True).skipped  # hashes both, records both
    reads: list[str] = []
    real = digests._hash
    monkeypatch.setattr(digests, "_hash", lambda p: reads.append(str(p)) or real(p))
    assert device.push(src, remote).skipped
    assert reads == []
    # A changed copy in the work dir is read, found different and replaced.
    Path(remote).write_bytes(os.urandom(200_000))
    assert not device.push(src, remote).skipped
    assert Path(remote).read_bytes() == src.read_bytes()


def test_a_chatty_process_is_not_idle() -> None:
    script = "import time\nfor i in range(12):\n    print(i, flush=True); time.sleep(0.1)"
    out = LocalDevice().run([sys.executable, "-c", script], deadline_s=60, idle_timeout_s=0.5)
    assert (
        not out.timed_out
        and out.exit_code == 0
        and out.stdout.split() == [str(i) for i in range(12)]
    )


def test_the_runner_dies_with_its_caller(tmp_path: Path) -> None:
    # A caller interrupted mid-run (Ctrl-C, a farm's job timeout) must not leave
    # the runner behind: its own session would otherwise outlive us.
    pid_file = tmp_path / "pid"
    script = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    )
    with interrupted_after(1.0), pytest.raises(KeyboardInterrupt):
        LocalDevice().run([sys.executable, "-c", script], deadline_s=60)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_stopped_process_is_gone_at_its_deadline() -> None:
    marker = f"stopped-{uuid.uuid4().hex[:8]}"
    out = LocalDevice().run(["sh", "-c", "kill -STOP 0", marker], deadline_s=1)
    assert out.timed_out and processes_naming(marker) == []


def test_a_partial_left_by_a_cut_push_is_dropped_by_the_next_push(tmp_path: Path) -> None:
    device = LocalDevice(workdir=tmp_path / "dev")
    src = tmp_path / "model.pte"
    src.write_bytes(b"m" * 5000)
    remote = f"{device.workdir}/job/model.pte"
    Path(remote).parent.mkdir(parents=True)
    stale = Path(temporary_name(remote) + "0")  # what a killed process left
    stale.write_bytes(b"m" * 100)
    device.push(src, remote)
    assert [p.name for p in Path(remote).parent.iterdir()] == ["model.pte"]


def test_progress_ends_at_the_total_and_a_skip_reports_the_file_done(tmp_path: Path) -> None:
    device = LocalDevice(workdir=tmp_path / "dev")
    src = tmp_path / "inputs.bin"
    src.write_bytes(os.urandom(20 << 20))
    seen: list[tuple[str, int, int]] = []
    device.push(src, "job/inputs.bin", progress=lambda *a: seen.append(a))
    size = src.stat().st_size
    assert seen[-1] == (f"{device.workdir}/job/inputs.bin", size, size) and len(seen) > 1
    seen.clear()
    assert device.push(src, "job/inputs.bin", progress=lambda *a: seen.append(a)).skipped
    assert seen == [(f"{device.workdir}/job/inputs.bin", size, size)]


def test_a_skipped_push_still_applies_the_mode(tmp_path: Path) -> None:
    device = LocalDevice(workdir=tmp_path / "dev")
    src = tmp_path / "runner"
    src.write_bytes(b"#!/bin/sh\n")
    first = device.push(src, "job/runner")
    assert device.push(src, "job/runner", mode=0o755).skipped
    assert os.stat(first.remote).st_mode & 0o777 == 0o755


def test_pull_files_writes_every_file_or_none(tmp_path: Path) -> None:
    device = LocalDevice(workdir=tmp_path / "dev")
    for i in range(2):
        src = tmp_path / f"out-{i}.bin"
        src.write_bytes(bytes([i]) * 100)
        device.push(src, f"job/out-{i}.bin")
    back = device.pull_files(
        [(f"job/out-{i}.bin", tmp_path / "back" / f"{i}.bin") for i in range(2)]
    )
    assert [b.read_bytes() for b in back] == [b"\x00" * 100, b"\x01" * 100]
    with pytest.raises(DeviceError, match="no such file"):
        device.pull_files(
            [("job/out-0.bin", tmp_path / "b2" / "0.bin"), ("job/x", tmp_path / "b2" / "x")]
        )
    assert list((tmp_path / "b2").iterdir()) == []


def test_pull_writes_the_whole_file_or_nothing(tmp_path: Path) -> None:
    device = LocalDevice(workdir=tmp_path / "dev")
    src = tmp_path / "out.bin"
    src.write_bytes(b"o" * 1000)
    device.push(src, "job/out-0.bin")
    back = device.pull("job/out-0.bin", tmp_path / "back" / "out-0.bin")
    assert back.read_bytes() == src.read_bytes()
    with pytest.raises(DeviceError, match="no such file"):
        device.pull("job/absent.bin", tmp_path / "back" / "absent.bin")
    assert sorted(p.name for p in back.parent.iterdir()) == ["out-0.bin"]
