"""What every device does while a command runs (etdeploy.devices.process)."""

from __future__ import annotations

import subprocess
import time

import pytest

from etdeploy.devices.process import (
    BoundedOutput,
    RunClock,
    env_exports,
    killed_if_interrupted,
    wait_until_ended,
)
from etdeploy.errors import UsageError


def test_a_flood_of_output_is_kept_as_its_head_and_tail_within_bounds() -> None:
    kept = BoundedOutput(limit=1000)
    for i in range(10_000):
        kept.append(f"line {i}\n")
    text = kept.text()
    assert text.startswith("line 0\n") and text.endswith("line 9999\n")
    assert "characters of output dropped" in text and len(text) < 1200


def test_bytes_output_is_bounded_the_same_way() -> None:
    kept = BoundedOutput(limit=1000)
    for i in range(10_000):
        kept.append(f"line {i}\n".encode())
    data = kept.data()
    assert data.startswith(b"line 0\n") and data.endswith(b"line 9999\n")
    assert b"characters of output dropped" in data and len(data) < 1200


def test_the_clock_runs_out_at_the_deadline_or_after_a_silence_and_says_which() -> None:
    deadline = RunClock(0.3, idle_timeout_s=5)
    assert wait_until_ended(lambda t: time.sleep(t) or False, deadline, poll_s=0.05)
    assert (deadline.ran_out, deadline.idle) == ("deadline", False)
    silent = RunClock(60, idle_timeout_s=0.3)
    started = time.monotonic()
    assert wait_until_ended(lambda t: time.sleep(t) or False, silent, poll_s=0.05)
    assert time.monotonic() - started < 5
    assert (silent.ran_out, silent.idle) == ("idle", True)
    silent.heard()  # output while it is being killed does not change what ran out
    assert silent.expired() and silent.idle


def test_output_keeps_a_command_alive_past_its_idle_timeout() -> None:
    clock = RunClock(60, idle_timeout_s=0.3)
    ticks = iter(range(12))

    def ended(timeout: float) -> bool:
        time.sleep(min(timeout, 0.1))
        clock.heard()
        return next(ticks) == 11

    assert not wait_until_ended(ended, clock, poll_s=0.1)


def test_an_interrupted_caller_kills_the_command_and_is_still_interrupted() -> None:
    killed: list[str] = []
    with pytest.raises(KeyboardInterrupt), killed_if_interrupted(lambda: killed.append("kill")):
        raise KeyboardInterrupt
    with killed_if_interrupted(lambda: killed.append("not this time")):
        pass
    assert killed == ["kill"]


def test_env_exports_reach_a_posix_shell_verbatim() -> None:
    script = env_exports({"GREETING": "hello 'world' $HOME"}) + 'printf %s "$GREETING"'
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout == "hello 'world' $HOME"


def test_a_name_a_shell_cannot_export_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="not an environment variable name"):
        env_exports({"BAD-NAME": "x"})
