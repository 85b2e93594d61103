"""A real PostgreSQL server for the history's tests, owned by the test.

Debian's postgresql package (Makefile SYSTEM_PACKAGES) installs initdb and pg_ctl
under /usr/lib/postgresql/VERSION/bin. initdb refuses to run as root, so as root the
cluster is made and run as the package's `postgres` user in a folder it owns; the
server listens on 127.0.0.1 on a free port, trusts local connections (a test
cluster, gone at teardown), and is stopped with `pg_ctl stop -m fast`.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def postgres_bin() -> Path | None:
    """The folder of initdb and pg_ctl, or None when PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


@dataclass(frozen=True)
class PostgresServer:
    port: int
    user: str = "etd"
    database: str = "postgres"

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    bin_dir = postgres_bin()
    assert bin_dir is not None, "postgres_server() needs PostgreSQL (skip before calling)"
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="etdeploy-pg-"))
    if os.geteuid() == 0:
        import pwd

        owner = pwd.getpwnam("postgres")
        os.chown(folder, owner.pw_uid, owner.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", _free_port()
    server = PostgresServer(port)

    def run(*argv: str) -> None:
        subprocess.run([*as_user, *argv], check=True, capture_output=True, timeout=120)

    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", server.user, "--no-sync")
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-w", "-t", "60",
            "-o", f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off", "start")  # fmt: skip
        try:
            yield server
        finally:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
