"""The command's side of a warm etdeploy (see the package docstring): standard library
only, imported before anything else of etdeploy."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import zlib
from pathlib import Path

from etdeploy.ipc import LineReader, send

# ETDEPLOY_WARM=0 (or off, false, no): never use or start a server.
WARM_ENV = "ETDEPLOY_WARM"
# Seconds a server waits for the next command before it stops.
IDLE_ENV = "ETDEPLOY_WARM_IDLE_S"
IDLE_S = 120.0
# The commands a server runs.
WARM_COMMANDS = frozenset({"run"})
# Environment a server's imports depend on: a command whose values differ is not
# served by it (numpy reads its thread settings at import, rich its colour settings
# when its consoles are made, Python its paths and flags at start).
_IMPORT_ENV_PREFIXES = ("PYTHON", "ETDEPLOY_", "OMP_", "OPENBLAS_", "MKL_", "LC_")
_IMPORT_ENV_NAMES = frozenset({"LANG", "NO_COLOR", "FORCE_COLOR", "TERM", "COLORTERM", "HOME"})
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def wanted(argv: list[str]) -> bool:
    """Whether this command line may be served warm: a served command (the first word
    that is not an option), no terminal on any standard stream, a plain interpreter
    (no -X, -O or -W options, which a server's interpreter would not share), a
    platform with fork and descriptor passing, and not turned off."""
    if os.environ.get(WARM_ENV, "").lower() in ("0", "off", "false", "no"):
        return False
    word = next((a for a in argv if not a.startswith("-")), None)
    if word not in WARM_COMMANDS or not hasattr(socket, "send_fds") or not hasattr(os, "fork"):
        return False
    if sys.flags.optimize or sys.flags.dev_mode or sys.warnoptions or sys._xoptions:
        return False
    try:
        return not any(os.isatty(fd) for fd in (0, 1, 2))
    except OSError:
        return False


def identity() -> str:
    """What a server must share with the command: the interpreter, the etdeploy it
    imports (where and which version), the user and the environment its imports read."""
    import etdeploy

    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(_IMPORT_ENV_PREFIXES) or k in _IMPORT_ENV_NAMES
    }
    env.pop(WARM_ENV, None)
    env.pop(IDLE_ENV, None)
    parts = [
        sys.executable, sys.version, str(Path(etdeploy.__file__).resolve().parent),
        etdeploy.__version__, os.getuid(), sorted(env.items()),
    ]  # fmt: skip
    return json.dumps(parts)


def socket_dir() -> Path:
    """A directory only this user can enter: $XDG_RUNTIME_DIR/etdeploy, else
    /tmp/etdeploy-UID (made 0700; one that is not this user's own is refused)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "etdeploy" if runtime else Path(f"/tmp/etdeploy-{os.getuid()}")
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = base.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise OSError(f"{base} is not private to this user")
    return base


def socket_path(key: str) -> Path:
    return socket_dir() / f"warm-{zlib.crc32(key.encode()):08x}.sock"


def run_warm(argv: list[str]) -> int | None:
    """Run the command in a warm server: its exit status, or None when there is no
    server to take it (or it refused), and nothing of the command has run."""
    key = identity()
    try:
        path = socket_path(key)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(path))
    except OSError:
        return None
    with sock:
        streams = {name: _stream_state(getattr(sys, name)) for name in ("stdout", "stderr")}
        request = {
            "key": key, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
            "umask": _umask(), "streams": streams,
        }  # fmt: skip
        try:
            send(sock, request, [0, 1, 2])
            reader = LineReader(sock)
            started = reader.read()
        except (OSError, ValueError):
            return None
        if not started or not isinstance(started.get("pid"), int):
            return None  # refused: a stale or foreign server; the command runs here
        return _wait(reader, int(started["pid"]))


def _wait(reader: LineReader, pid: int) -> int:
    """Pass the command's signals to the child running it until it ends; its status."""

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in _SIGNALS:
        signal.signal(signum, forward)
    try:
        ended = reader.read()
    except (OSError, ValueError):
        ended = None
    if ended is None:
        print("error: the warm etdeploy ended without a status", file=sys.stderr)
        print(f"hint: run it again with {WARM_ENV}=0", file=sys.stderr)
        return 3
    if isinstance(ended.get("signal"), int):
        died = int(ended["signal"])
        for signum in _SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), died)  # end as the child did
        return 128 + died
    return int(ended.get("exit", 3))


def _stream_state(stream: object) -> dict[str, object]:
    return {
        "encoding": getattr(stream, "encoding", "utf-8"),
        "errors": getattr(stream, "errors", "strict"),
        "line_buffering": getattr(stream, "line_buffering", False),
        "write_through": getattr(stream, "write_through", False),
    }


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def start_server() -> None:
    """Start a server for commands like this one, detached (its own session, no
    streams of the command's): the next command finds it up. Nothing when one is up
    (it holds SOCKET.lock)."""
    import fcntl
    import subprocess

    try:
        path = socket_path(identity())
        lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # a server holds it
    finally:
        os.close(lock)  # released: the server takes it
    import etdeploy

    # Started where this etdeploy is importable first, as the command imported it.
    home = Path(etdeploy.__file__).resolve().parent.parent
    with contextlib.suppress(OSError):
        subprocess.Popen(
            [sys.executable, "-m", "etdeploy.warm.server", str(path)],
            cwd=home, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True,
        )  # fmt: skip
