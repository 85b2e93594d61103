"""What every device's run must show of its memory: an account per phase whose
parts sum to the measured peak (etdeploy.memory.account), and where the process
is the runner's own (not an emulator's), a small unexplained remainder."""

from __future__ import annotations

from typing import Any

PHASES = ["load", "first_execution", "steady_state"]


def assert_account(result: dict[str, Any], *, unexplained_within: float | None) -> None:
    """`result` (a result document) carries the account of every phase; each
    phase's parts sum to its peak, and with `unexplained_within` the remainder is
    at most that share of the peak."""
    memory = result["memory"]
    phases = memory["phases"]
    assert [p["phase"] for p in phases] == PHASES, phases
    assert memory["peak_bytes"] == max(p["peak_bytes"] for p in phases)
    for phase in phases:
        assert sum(part["bytes"] for part in phase["parts"]) == phase["peak_bytes"], phase
        if unexplained_within is not None:
            (rest,) = [p["bytes"] for p in phase["parts"] if p["part"] == "unexplained"]
            assert abs(rest) <= unexplained_within * phase["peak_bytes"], phase
