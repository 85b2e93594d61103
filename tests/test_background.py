"""What a background helper trusts (etdeploy/background.py), tried as a hostile local
user would: a runtime directory that is a link, another user's, or open to others; a
socket whose other end is another user's process; a helper's work that leaves a
thread running; an environment full of secrets; a dependency upgraded under it.
"Another user" is nobody (uid 65534 here): these tests run as root, which can
chown to it and setuid to it, as CI's container does."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from etdeploy.background import (
    ALLOWED_ENVIRONMENT,
    Untrusted,
    check_peer,
    end_child,
    environment,
    fork_child,
    private_directory,
)

REPO = Path(__file__).resolve().parent.parent

needs_root = pytest.mark.skipif(os.getuid() != 0, reason="chown and setuid to nobody need root")


def nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


# -- the private directory ------------------------------------------------------------------


def test_the_directory_is_made_private_and_found_again(tmp_path: Path) -> None:
    made = private_directory(tmp_path, ["helpers", "one"])
    assert made == tmp_path / "helpers" / "one"
    for path in (made, made.parent):
        info = path.lstat()
        assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
        assert info.st_uid == os.getuid()
    assert private_directory(tmp_path, ["helpers", "one"]) == made


def test_a_symlinked_directory_is_refused_even_when_it_points_at_ones_own(
    tmp_path: Path,
) -> None:
    own = tmp_path / "own"
    own.mkdir(mode=0o700)
    (tmp_path / "helpers").symlink_to(own)
    with pytest.raises(Untrusted, match=r"helpers is a symbolic link") as caught:
        private_directory(tmp_path, ["helpers"])
    assert "\n" not in str(caught.value)


@needs_root
def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "helpers"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, nobody(), nobody())
    with pytest.raises(Untrusted, match=rf"belongs to uid {nobody()}, not to you"):
        private_directory(tmp_path, ["helpers"])
    assert foreign.stat().st_uid == nobody()  # left as found


def test_a_directory_open_to_the_group_is_refused_not_repaired(tmp_path: Path) -> None:
    shared = tmp_path / "helpers"
    shared.mkdir()
    shared.chmod(0o770)
    with pytest.raises(Untrusted, match=r"open to group or others \(mode 0770; want 0700\)"):
        private_directory(tmp_path, ["helpers"])
    assert stat.S_IMODE(shared.stat().st_mode) == 0o770  # never chmod-ed


# -- the peer ------------------------------------------------------------------------------


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(nobody())
    os.setuid(nobody())


@needs_root
def test_a_client_of_another_uid_is_refused_by_the_listener() -> None:
    # A directory anyone may enter (pytest's own are root's alone), so that nobody's
    # process can reach the socket.
    open_dir = Path(tempfile.mkdtemp(prefix="etdeploy-test-open-"))
    open_dir.chmod(0o777)
    path = open_dir / "helper.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    path.chmod(0o777)
    listener.listen(1)

    def connect_as_nobody() -> int:
        _as_nobody()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))
            # Connected until the listener has judged it and hung up (not a fixed 2 s).
            client.settimeout(30)
            client.recv(1)
        return 0

    pid = fork_child(connect_as_nobody)
    try:
        listener.settimeout(30)
        accepted, _ = listener.accept()
        with accepted, pytest.raises(Untrusted, match=rf"is a process of uid {nobody()}"):
            check_peer(accepted, "a client")
    finally:
        listener.close()
        os.waitpid(pid, 0)
        shutil.rmtree(open_dir)


@needs_root
def test_a_listener_of_another_uid_is_refused_by_the_client(tmp_path: Path) -> None:
    path = tmp_path / "helper.sock"
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound.bind(str(path))
    ready_read, ready_write = os.pipe()

    def listen_as_nobody() -> int:
        # SO_PEERCRED gives a client the credentials its listener had at listen().
        _as_nobody()
        bound.listen(1)
        os.write(ready_write, b"x")
        time.sleep(10)
        return 0

    pid = fork_child(listen_as_nobody)
    try:
        os.read(ready_read, 1)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))
            with pytest.raises(Untrusted, match=rf"is a process of uid {nobody()}"):
                check_peer(client, "the helper")
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        bound.close()
        for fd in (ready_read, ready_write):
            os.close(fd)


def test_ones_own_peer_is_trusted() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        check_peer(left, "the helper")


# -- the forked child -----------------------------------------------------------------------


def test_a_child_that_exits_with_a_thread_running_ends_at_once_and_never_unwinds_into_its_parent(
    tmp_path: Path,
) -> None:
    """The warm server's fault (issue 36): a command's sys.exit unwound into the
    server's `finally`, which removed the live server's socket. Here the parent's
    `finally` writes its pid: only the parent's may be there."""
    cleaned = tmp_path / "parent-cleanup"

    def work() -> int:
        threading.Thread(target=time.sleep, args=(30,), name="left-running").start()
        sys.exit(3)

    started = time.monotonic()
    try:
        pid = fork_child(work)
    finally:
        with cleaned.open("a") as out:
            out.write(f"{os.getpid()}\n")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 3
    assert time.monotonic() - started < 10  # not after the thread's 30 s
    assert cleaned.read_text().split() == [str(os.getpid())]


def test_a_child_whose_work_raises_ends_with_ex_software(tmp_path: Path) -> None:
    def work() -> int:
        raise RuntimeError("a bug in the helper")

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its stderr is the pipe (not pytest's capture), for the traceback
        sys.stderr = os.fdopen(write, "w")
        end_child(work)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 70  # sysexits.h EX_SOFTWARE
    with os.fdopen(read) as err:
        assert "RuntimeError: a bug in the helper" in err.read()


# -- environment and staleness --------------------------------------------------------------


def test_only_allowed_variables_reach_a_helper() -> None:
    given = {"HOME": "/home/u", "PATH": "/bin", "AWS_SECRET_ACCESS_KEY": "x", "CI_JOB_TOKEN": "y",
             "SSH_AUTH_SOCK": "/tmp/agent", "LANG": "C.UTF-8"}  # fmt: skip
    assert environment(source=given) == {"HOME": "/home/u", "PATH": "/bin", "LANG": "C.UTF-8"}
    with_agent = environment(extra=("SSH_AUTH_SOCK",), source=given)
    assert with_agent["SSH_AUTH_SOCK"] == "/tmp/agent" and "CI_JOB_TOKEN" not in with_agent
    assert "SSH_AUTH_SOCK" not in ALLOWED_ENVIRONMENT


_STAMP = "from etdeploy.background import code_stamp; print(code_stamp(['paramiko']))"


def _stamp(pythonpath: list[Path]) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in pythonpath)}
    # From the root (`-c` puts the working directory first on the path).
    done = subprocess.run([sys.executable, "-c", _STAMP], env=env, cwd="/", capture_output=True,
                          text=True, check=True, timeout=60)  # fmt: skip
    return done.stdout.strip()


def test_a_helper_is_stale_after_an_upgrade_of_etdeploy_or_of_a_dependency(tmp_path: Path) -> None:
    code = tmp_path / "checkout"
    shutil.copytree(REPO / "etdeploy", code / "etdeploy",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    first = _stamp([code])
    assert _stamp([code]) == first  # nothing changed: the same helper serves
    # An edited source file (a checkout pulled, a wheel reinstalled in place).
    edited = code / "etdeploy" / "units.py"
    edited.write_text(edited.read_text() + "\n# changed\n")
    assert _stamp([code]) != first
    after_edit = _stamp([code])
    # paramiko upgraded: another installation of it found first on the path.
    upgraded = tmp_path / "site"
    (upgraded / "paramiko").mkdir(parents=True)
    (upgraded / "paramiko" / "__init__.py").write_text('__version__ = "99.0"\n')
    assert _stamp([upgraded, code]) != after_edit
    assert json.dumps(first)  # a plain hex digest
