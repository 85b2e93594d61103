"""The warm server (etdeploy.warm) in the benchmarks: wait until the server a command
started is up, and stop it when the benchmark is done.

`etdeploy run` with its streams piped is served by a warm server once one is up
(docs/guides/command-line.md); the benchmarks time it that way (what a CI loop or a
farm host gets) and, beside it, with ETDEPLOY_WARM=0 (every command starting Python
and importing etdeploy), so both figures are in the note."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ORDINARY = {"ETDEPLOY_WARM": "0"}


def server_socket(env: dict[str, str]) -> Path:
    """Where the server for commands run with `env` listens."""
    code = "from etdeploy.warm.client import identity, socket_path; print(socket_path(identity()))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True)  # fmt: skip
    return Path(done.stdout.strip())


def wait_for_server(env: dict[str, str], timeout_s: float = 60.0) -> Path:
    """The server's socket, once a server listens on it (started by a command just run)."""
    import socket

    path = server_socket(env)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(path))
                return path
            except OSError:
                time.sleep(0.05)
    raise RuntimeError(f"no warm server came up at {path}")


def stop_server(path: Path) -> None:
    lock = Path(f"{path}.lock")
    text = lock.read_text().strip() if lock.exists() else ""
    if text.isdigit():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(text), signal.SIGTERM)
