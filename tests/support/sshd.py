"""A real OpenSSH sshd on loopback for the SSH transport tests, and a proxy that cuts.

`start_sshd()` starts /usr/sbin/sshd in the foreground (-D -e) with its own config,
host key, authorized_keys and pid file in a temporary directory, on 127.0.0.1 at a
free port, authorising a freshly generated key for the current user. It yields an
`SshServer` with the connection details and a known_hosts file that already trusts
the host key. Teardown terminates the daemon and every per-connection child it
forked, then waits for them, so no sshd outlives the tests.

`start_sshd(root, arm64=True)` stands for an aarch64 Linux host reached over
SSH (a Raspberry Pi, a Jetson, a Graviton machine): the same sshd, whose sessions
run with tests/support/arm64.py's exec shim, so every aarch64 ELF executable a
session starts runs as ARM code under `qemu-aarch64` with an empty sysroot
(binfmt_misc is not available here), and whose `uname -m` answers aarch64. The
shell and its tools stay this machine's x86_64 ones.

`CuttingProxy` is a TCP relay in front of that sshd that, once armed, drops both
sides of the connection after N more client-to-server bytes: a deterministic way to
cut an SFTP upload in the middle.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
# Debian's package puts the SFTP server here; `internal-sftp` would work too, but
# the external one is what a stock sshd_config names.
SFTP_SERVER_CANDIDATES = ("/usr/lib/openssh/sftp-server", "/usr/libexec/sftp-server")
# sshd refuses to start as root without its privilege-separation directory; Debian
# creates it from the service unit, which tests never start.
PRIVSEP_DIR = Path("/run/sshd")


def sshd_missing_reason() -> str | None:
    """Why the real-sshd tests cannot run here, or None when they can."""
    if not SSHD.exists():
        return (
            "/usr/sbin/sshd is missing: install Debian's openssh-server "
            "(make setup does this as root) to run the SSH transport tests"
        )
    if not Path(SSH_KEYGEN).exists():
        return "ssh-keygen is missing: install Debian's openssh-client"
    return None


def require_sshd() -> None:
    reason = sshd_missing_reason()
    if reason:
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def generate_key(path: Path, comment: str = "etdeploy-test") -> Path:
    """An unencrypted ed25519 key pair at path (private) and path.pub."""
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


def known_hosts_line(host: str, port: int, public_key_file: Path) -> str:
    """The known_hosts line OpenSSH writes for host:port (the [host]:port form off 22)."""
    key_type, key_b64 = public_key_file.read_text().split()[:2]
    name = host if port == 22 else f"[{host}]:{port}"
    return f"{name} {key_type} {key_b64}\n"


@dataclass(frozen=True)
class SshServer:
    """Where the test sshd listens and how to log in to it."""

    host: str
    port: int
    user: str
    key_filename: Path
    host_public_key: Path
    known_hosts: Path
    config: Path
    pid: int
    root: Path

    def known_hosts_line(self, port: int | None = None) -> str:
        return known_hosts_line(self.host, port or self.port, self.host_public_key)


def _children_of(pid: int) -> list[int]:
    """Every live descendant of pid, read from /proc (sshd forks one per connection)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces; fields follow it.
        fields = stat.rsplit(")", 1)[1].split()
        parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def process_is_running(pid: int) -> bool:
    """True while pid exists and is not a zombie (containers may not reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def _wait_for_banner(
    port: int, process: subprocess.Popen[bytes], log_path: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    last_error = ""
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = log_path.read_text(errors="replace").strip()
            raise RuntimeError(f"sshd exited with {process.returncode}: {err}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.settimeout(2)
                if sock.recv(64).startswith(b"SSH-2.0-"):
                    return
        except OSError as exc:
            last_error = str(exc)
        time.sleep(0.05)
    raise RuntimeError(f"sshd did not answer on port {port} within {timeout_s} s: {last_error}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    children = _children_of(process.pid)
    if process.poll() is None:
        process.terminate()
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)
    deadline = time.monotonic() + 5
    for pid in children:
        while process_is_running(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if process_is_running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def start_sshd(
    root: Path, *, set_env: Mapping[str, str] | None = None, arm64: bool = False
) -> Iterator[SshServer]:
    """Run a private sshd for the current user; stop it and its children on exit.

    set_env becomes sshd_config `SetEnv` (OpenSSH 8.7+): variables every session
    sees, which is how a test puts a stand-in tool first on the remote PATH.
    arm64: the aarch64 host stand-in (the module docstring); skips when qemu or
    the cross compiler is missing.
    """
    require_sshd()
    if arm64:
        from tests.support.arm64 import arm64_emulation

        emulation = arm64_emulation(root / "arm64")
        given = dict(set_env or {})
        set_env = {
            **emulation.env(),
            **given,
            "PATH": emulation.path(given.get("PATH", "/usr/local/bin:/usr/bin:/bin")),
        }
    root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0 and not PRIVSEP_DIR.exists():
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    host_key = generate_key(root / "ssh_host_ed25519_key", "etdeploy-test-host")
    user_key = generate_key(root / "id_ed25519", "etdeploy-test-user")
    authorized = root / "authorized_keys"
    authorized.write_text((root / "id_ed25519.pub").read_text())
    authorized.chmod(0o600)
    sftp_server = next((p for p in SFTP_SERVER_CANDIDATES if Path(p).exists()), "internal-sftp")
    user = getpass.getuser()
    env_line = ""
    if set_env:
        # SetEnv takes NAME=VALUE words; quote each so a PATH with spaces survives.
        env_line = "SetEnv " + " ".join(f'"{k}={v}"' for k, v in set_env.items()) + "\n"

    last_error: Exception | None = None
    for _attempt in range(5):
        port = free_port()
        config = root / "sshd_config"
        config.write_text(
            f"Port {port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {host_key}\n"
            f"PidFile {root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {authorized}\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
            "StrictModes no\n"
            "UsePAM no\n"
            "PrintMotd no\n"
            "PrintLastLog no\n"
            "UseDNS no\n"
            f"AllowUsers {user}\n"
            "LogLevel ERROR\n"
            "MaxStartups 50:30:100\n"
            "MaxSessions 50\n"
            f"Subsystem sftp {sftp_server}\n" + env_line
        )
        # sshd -e logs to stderr; a file, not a pipe, so a chatty daemon never blocks.
        log_path = root / "sshd.log"
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        try:
            _wait_for_banner(port, process, log_path, timeout_s=10)
        except RuntimeError as exc:
            # Most likely the free port was taken between probe and bind: try another.
            last_error = exc
            _stop(process)
            continue
        known_hosts = root / "known_hosts"
        known_hosts.write_text(
            known_hosts_line("127.0.0.1", port, root / "ssh_host_ed25519_key.pub")
        )
        server = SshServer(
            host="127.0.0.1",
            port=port,
            user=user,
            key_filename=user_key,
            host_public_key=root / "ssh_host_ed25519_key.pub",
            known_hosts=known_hosts,
            config=config,
            pid=process.pid,
            root=root,
        )
        try:
            yield server
        finally:
            _stop(process)
        return
    raise RuntimeError(f"could not start sshd: {last_error}")


class CuttingProxy:
    """A TCP relay 127.0.0.1:port -> target that can drop a connection mid-stream.

    Unarmed it relays faithfully. `arm(n)` makes it close both sockets of every
    open connection once n more bytes have gone from client to server, which cuts
    an upload part-way through with no timing involved. `stall(n)` instead stops
    relaying there, both ways, as a link that hangs does, until `down()`; `throttle(r)`
    relays from client to server at most r bytes a second (a slow link that works); `down()`
    cuts every connection and refuses new ones (the host is gone) until `up()`.
    """

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._budget: int | None = None
        self._stall_budget: int | None = None
        self._bytes_per_s: float | None = None
        self._down = threading.Event()
        self.stalled = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._open: set[socket.socket] = set()
        self.cuts = 0
        self.connections = 0
        accept = threading.Thread(target=self._accept_loop, name="cutting-proxy", daemon=True)
        accept.start()
        self._threads.append(accept)

    def arm(self, after_bytes: int) -> None:
        with self._lock:
            self._budget = after_bytes

    def disarm(self) -> None:
        with self._lock:
            self._budget = None

    def throttle(self, bytes_per_s: float | None) -> None:
        """Relay from client to server at most this fast (None: as fast as it comes)."""
        with self._lock:
            self._bytes_per_s = bytes_per_s

    def stall(self, after_bytes: int | None) -> None:
        """Hang once n more bytes have gone from client to server (None: do not)."""
        with self._lock:
            self._stall_budget = after_bytes

    def down(self) -> None:
        """Cut every open connection and refuse new ones."""
        self._down.set()
        with self._lock:
            sockets = list(self._open)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def up(self) -> None:
        self._down.clear()
        self.stalled.clear()

    def _accept_loop(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._down.is_set():
                client.close()
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            self.connections += 1
            relay = threading.Thread(
                target=self._relay, args=(client, server), name="cutting-proxy-relay", daemon=True
            )
            relay.start()
            self._threads.append(relay)

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        with self._lock:
            self._open.update((client, server))
        sockets = [client, server]
        try:
            while not self._stopping.is_set():
                readable, _, _ = select.select(sockets, [], [], 0.1)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        stall_at: int | None = None
                        with self._lock:
                            if self._stall_budget is not None:
                                if len(data) >= self._stall_budget:
                                    stall_at, self._stall_budget = self._stall_budget, None
                                else:
                                    self._stall_budget -= len(data)
                        if stall_at is not None:
                            server.sendall(data[:stall_at])
                            self.stalled.set()
                            # Hang: nothing more either way until the host goes.
                            while not (self._down.is_set() or self._stopping.is_set()):
                                time.sleep(0.05)
                            return
                        with self._lock:
                            if self._budget is not None:
                                if len(data) >= self._budget:
                                    # Forward what fits, then cut: a transfer half done.
                                    server.sendall(data[: self._budget])
                                    self._budget = None
                                    self.cuts += 1
                                    return
                                self._budget -= len(data)
                        server.sendall(data)
                        if self._bytes_per_s is not None:
                            time.sleep(len(data) / self._bytes_per_s)
                    else:
                        client.sendall(data)
        except OSError:
            return
        finally:
            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            with self._lock:
                self._open.difference_update(sockets)

    def close(self) -> None:
        self._stopping.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
