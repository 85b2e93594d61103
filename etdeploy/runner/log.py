"""What a runner's log lines say: load time, each timed iteration and the
completion line, as upstream's executor_runner prints them (and ours too)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
# Searched anywhere in a line, so ExecuTorch's PAL prefix
# ("I 00:00:00.123 executorch:executor_runner.cpp:123] ") and logcat's
# ("12-02 10:00:00.000  123  123 I ExecuTorch: ") are both skipped.
_LOADED = re.compile(rf"Model loaded in {_NUMBER} ms\.")
_ITERATION = re.compile(rf"Iteration (\d+) of (\d+): {_NUMBER} ms")
_EXECUTED = re.compile(rf"Model executed successfully (\d+) time\(s\) in {_NUMBER} ms\.")


@dataclass(frozen=True)
class RunnerLog:
    """What a runner's log lines say. Fields are None when their line is absent."""

    load_ms: float | None
    iterations_ms: tuple[float, ...]
    # N of "Iteration i of N", as the runner announced it.
    iterations_announced: int | None
    executed_count: int | None
    executed_total_ms: float | None

    @property
    def completed(self) -> bool:
        return self.executed_count is not None


def parse_log(text: str) -> RunnerLog:
    """Read the timing lines out of a runner's stdout, stderr or device log.

    Other lines are ignored. An iteration reported twice (the same text seen on
    stdout and in logcat) counts once; iterations come back in their own order.
    """
    load_ms: float | None = None
    iterations: dict[int, float] = {}
    announced: int | None = None
    executed_count: int | None = None
    executed_total: float | None = None
    for line in text.splitlines():
        if (match := _LOADED.search(line)) is not None:
            if load_ms is None:
                load_ms = float(match.group(1))
        elif (match := _ITERATION.search(line)) is not None:
            index = int(match.group(1))
            iterations.setdefault(index, float(match.group(3)))
            announced = int(match.group(2))
        elif (match := _EXECUTED.search(line)) is not None:
            executed_count = int(match.group(1))
            executed_total = float(match.group(2))
    return RunnerLog(
        load_ms=load_ms,
        iterations_ms=tuple(iterations[i] for i in sorted(iterations)),
        iterations_announced=announced,
        executed_count=executed_count,
        executed_total_ms=executed_total,
    )
