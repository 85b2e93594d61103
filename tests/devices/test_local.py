"""The local device honours the Device contract."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from etdeploy.devices.base import sha256_file
from etdeploy.devices.local import LocalDevice
from tests.support.interrupt import interrupted_after


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
    assert out.timed_out and out.stdout == "loaded\n"
    assert out.elapsed_s < 30


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


def test_a_flood_of_output_is_kept_as_its_head_and_tail_within_bounds() -> None:
    from etdeploy.devices.base import BoundedOutput

    kept = BoundedOutput(limit=1000)
    for i in range(10_000):
        kept.append(f"line {i}\n")
    text = kept.text()
    assert text.startswith("line 0\n") and text.endswith("line 9999\n")
    assert "characters of output dropped" in text and len(text) < 1200
