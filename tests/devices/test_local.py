"""The local device honours the Device contract."""

from __future__ import annotations

import sys
from pathlib import Path

from etdeploy.devices.base import sha256_file
from etdeploy.devices.local import LocalDevice


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
