"""Feedback on long steps: in a terminal a live stage line with its elapsed time
and a bar per transfer; piped, timestamped lines for what lasts, with the real
byte counts of a real push."""

from __future__ import annotations

import io
import os
import re
import time
from pathlib import Path

from rich.console import Console

from etdeploy.cli._feedback import Feedback
from etdeploy.devices.local import LocalDevice


def piped() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=300), out


def test_piped_stages_are_stamped_with_when_they_began() -> None:
    console, out = piped()
    with Feedback(console, quiet=False, after_s=0.2) as feedback:
        feedback.status("exporting with torch.export")
        time.sleep(0.6)
        feedback.status("a stage too short to mention")
        feedback.status("lowering to xnnpack")
        time.sleep(0.6)
    lines = out.getvalue().splitlines()
    assert [re.sub(r"^\d\d:\d\d:\d\d \+\d+\.\ds ", "", line) for line in lines] == [
        "exporting with torch.export",
        "lowering to xnnpack",
    ]
    # Stamped with the stage's start: the first began as the command did.
    assert lines[0].split()[1] == "+0.0s"


def test_piped_transfers_report_the_bytes_a_real_push_sent(tmp_path: Path) -> None:
    payload = tmp_path / "weights.bin"
    payload.write_bytes(os.urandom(20 << 20))  # several of the local device's copy chunks
    device = LocalDevice(workdir=tmp_path / "device")
    console, out = piped()
    with Feedback(console, quiet=False, after_s=0.0) as feedback:
        sent = device.push(payload, "programs/weights.bin", progress=feedback.transfer)
        again = device.push(payload, "programs/weights.bin", progress=feedback.transfer)
    assert sent.bytes_sent == 20 << 20 and again.skipped
    *going, done = out.getvalue().splitlines()  # the skipped second push says nothing
    assert re.search(r" sent weights\.bin: 20\.97 MB in \d+\.\d s \(.+/s\)$", done), done
    # Once a transfer has lasted after_s, where it is: bytes of the total.
    assert going and all(
        re.search(r" sending weights\.bin: [\d.]+ MB of 20\.97 MB$", g) for g in going
    )


def test_in_a_terminal_a_stage_shows_its_elapsed_time_never_a_byte_count() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with Feedback(console, quiet=False) as feedback:
        feedback.status("deploying to pixel8")
        time.sleep(0.4)  # the live display redraws about ten times a second
        feedback.transfer("/data/local/tmp/etdeploy/programs/x.pte", 1_000_000, 3_000_000)
        time.sleep(0.4)
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # the text, not the cursor moves
    assert "deploying to pixel8" in drawn and re.search(r"\d\.\d s", drawn)
    # rich's "0/? bytes" drawn for a step that is not a transfer: never.
    assert not [line for line in drawn.splitlines() if "pixel8" in line and "?" in line]
    assert "x.pte" in drawn and "1.0/3.0 MB" in drawn


def test_quiet_says_nothing() -> None:
    console, out = piped()
    with Feedback(console, quiet=True, after_s=0.0) as feedback:
        feedback.status("exporting")
        time.sleep(0.1)
        feedback.transfer("x", 1, 2)
        feedback.transfer("x", 2, 2)
    assert out.getvalue() == ""
