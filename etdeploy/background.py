"""What etdeploy runs in the background, only when the user turns it on (today an SSH
host's keeper: etdeploy.devices.ssh.keeper, with persist_s > 0 in the device's table),
and the rules it keeps so that it trusts only its owner (design.md, Conventions):

- its files live in a private runtime directory, created 0700 and checked without
  following a symbolic link (os.open with O_NOFOLLOW | O_DIRECTORY, then fstat): a
  directory that is a link, is not this user's, or is open to group or others is
  refused, never repaired (a chmod would adopt what someone else prepared);
- each end of its Unix socket checks the other's uid (SO_PEERCRED, Linux's socket(7)
  and unix(7), read 2026-12-05). Python offers no portable way to read a peer's
  credentials (BSD's getpeereid is not in its socket module), so where SO_PEERCRED is
  missing (macOS, the BSDs) nothing is kept and every command connects itself;
- it runs in a forked child that can only end with os._exit: whatever the child's
  work does (returns, raises, sys.exit, leaves a thread running), it never unwinds
  into code its parent meant for itself;
- it is found by a key that includes code_stamp(): etdeploy's version and its
  sources, its dependencies as installed (each one's files) and the interpreter. Change any (an upgrade
  under a running helper) and the next command starts a new helper; the old one
  leaves after its idle time;
- it gets only the environment variables of ALLOWED_ENVIRONMENT (a CI job's secrets
  stay with the job).

A refusal is an Untrusted with one line that says what was found; the caller then
does the work the ordinary way, in its own process.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import socket
import stat
import struct
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import NoReturn

import etdeploy

# What a helper may see of its starter's environment: where the user's files and
# tools are, their locale and time zone, where etdeploy keeps its files, and the
# Python path that found this etdeploy. A helper that needs more names it
# (environment(extra=...)), each one a decision.
ALLOWED_ENVIRONMENT = (
    "HOME", "USER", "LOGNAME", "PATH", "SHELL",
    "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LC_NUMERIC", "TZ",
    "TMPDIR", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "ETDEPLOY_CACHE_DIR", "PYTHONPATH",
)  # fmt: skip

# What a helper exits with when its work raised (sysexits.h EX_SOFTWARE).
_EXIT_SOFTWARE = 70


class Untrusted(Exception):
    """A background helper's directory or peer that is not this user's alone; the
    message is one line saying what was found."""


def supported() -> bool:
    """Whether helpers can be kept here: Unix sockets, fork, and a peer's uid to read."""
    return hasattr(socket, "AF_UNIX") and hasattr(os, "fork") and hasattr(socket, "SO_PEERCRED")


# -- the private directory ------------------------------------------------------------------


def private_directory(parent: Path, names: Iterable[str]) -> Path:
    """parent/names[0]/names[1]/..., each made 0700 when missing and checked, without
    following a link, to be a directory of this user's that nobody else can use.
    `parent` itself is the user's choice (the cache root, the temp directory)."""
    parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    path = parent
    try:
        for name in names:
            path = path / name
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=fd)
            inner = _open_private(name, fd, path)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    return path


def _open_private(name: str, parent_fd: int, path: Path) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open(name, flags, dir_fd=parent_fd)
    except OSError as exc:
        if stat.S_ISLNK(os.lstat(name, dir_fd=parent_fd).st_mode):
            raise Untrusted(f"{path} is a symbolic link, not a directory of yours") from None
        raise Untrusted(f"{path} cannot be used: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    why = _not_private(info)
    if why:
        os.close(fd)
        raise Untrusted(f"{path} {why}")
    return fd


def _not_private(info: os.stat_result) -> str:
    if info.st_uid != os.getuid():
        return f"belongs to uid {info.st_uid}, not to you (uid {os.getuid()})"
    if info.st_mode & 0o077:
        return f"is open to group or others (mode {stat.S_IMODE(info.st_mode):04o}; want 0700)"
    return ""


# -- the peer on the other end of a socket --------------------------------------------------


def check_peer(sock: socket.socket, what: str) -> None:
    """Refuse a Unix socket whose other end is another user's process (SO_PEERCRED: the
    credentials the peer had when it connected, or when a listener called listen())."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    if uid != os.getuid():
        raise Untrusted(f"{what} is a process of uid {uid}, not yours (uid {os.getuid()})")


# -- the forked child ------------------------------------------------------------------------


def end_child(work: Callable[[], int]) -> NoReturn:
    """Run `work` in this forked child, then end it with os._exit, whatever `work` did:
    its status, or EX_SOFTWARE when it raised (the traceback on stderr)."""
    status = _EXIT_SOFTWARE
    try:
        status = work()
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                if stream is not None:
                    stream.flush()
        os._exit(status)


def fork_child(work: Callable[[], int]) -> int:
    """Fork; the child runs `work` under end_child; the parent gets the child's pid."""
    pid = os.fork()
    if pid == 0:
        end_child(work)
    return pid


# -- staleness and environment -------------------------------------------------------------


def _source_stamp() -> str:
    """etdeploy's sources as they are now: each file's path, size and mtime."""
    root = Path(etdeploy.__file__).resolve().parent
    digest = hashlib.sha256(str(root).encode())
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".fbs", ".json", ".toml")):
                info = os.stat(os.path.join(folder, name))
                digest.update(f"{folder}/{name}:{info.st_size}:{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _module_files(modules: Iterable[str]) -> dict[str, list[object] | None]:
    """Each top-level module's file as installed now (path, size, mtime, inode): an
    upgrade or a reinstall writes it anew. Found without importing the module, and
    without importlib.metadata (~0.05 s of a command that uses a keeper)."""
    found: dict[str, list[object] | None] = {}
    for name in modules:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin is None or not os.path.exists(origin):
            found[name] = None
            continue
        info = os.stat(origin)
        found[name] = [origin, info.st_size, info.st_mtime_ns, info.st_ino]
    return found


def code_stamp(modules: Iterable[str] = ()) -> str:
    """What a helper's code is: etdeploy's version and sources, the installed files of
    the modules it imports (their versions, as installed), and the interpreter. A
    helper whose stamp differs from the command's is stale."""
    stamp = {
        "etdeploy": etdeploy.__version__,
        "sources": _source_stamp(),
        "modules": _module_files(modules),
        "python": [sys.executable, sys.version, sys.implementation.cache_tag],
    }
    return hashlib.sha256(json.dumps(stamp, sort_keys=True).encode()).hexdigest()


def environment(
    extra: Iterable[str] = (), source: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The starter's environment, cut to ALLOWED_ENVIRONMENT and `extra`."""
    given = os.environ if source is None else source
    names = (*ALLOWED_ENVIRONMENT, *extra)
    return {name: given[name] for name in names if name in given}
