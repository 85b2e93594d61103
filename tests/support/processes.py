"""The live processes of this machine, read from /proc (Linux), for tests that check
what a run started and whether it is gone."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def live_processes() -> Iterator[tuple[int, list[str]]]:
    """(pid, argv) of every process that is neither a zombie nor dead; a process that
    ends while it is read is passed over."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The state is the first field after "(comm)", which may itself hold ") ".
        if stat[stat.rfind(")") + 2 :][:1] in ("Z", "X"):
            continue
        yield int(entry), [word.decode(errors="replace") for word in argv if word]


def processes_naming(*markers: str) -> list[int]:
    """Pids of live processes (this one aside) whose command line holds every marker."""
    return [
        pid
        for pid, argv in live_processes()
        if pid != os.getpid() and all(marker in " ".join(argv) for marker in markers)
    ]
