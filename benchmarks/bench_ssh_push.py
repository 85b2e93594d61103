"""SshDevice.push (paramiko SFTP) against OpenSSH's scp, to the same loopback sshd.

A 256 MB random file goes to a fresh remote name with each tool; both use the same
key and the same sshd (tests/support/sshd.py). SshDevice.push also hashes the file
locally and asks for the remote digest (that is how it skips unchanged files), so
its figure includes that work; the hash time is printed separately. The re-push of
an unchanged file shows what the skip saves over scp, which always re-sends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from etdeploy.devices.ssh import SshDevice, SshSettings
from etdeploy.devices.transfer import sha256_file
from tests.support.sshd import start_sshd

SIZE_MB = 256
ROUNDS = 2


def _random_file(path: Path, size_mb: int) -> Path:
    with open(path, "wb") as f:
        for _ in range(size_mb):
            f.write(os.urandom(1 << 20))
    return path


def _best(times: list[float]) -> float:
    return min(times)


def main() -> None:
    scp = shutil.which("scp")
    if scp is None:
        print("   scp not found: install Debian's openssh-client")
        return
    with tempfile.TemporaryDirectory(prefix="bench-ssh-") as tmp:
        root = Path(tmp)
        local = _random_file(root / "payload.bin", SIZE_MB)
        with start_sshd(root / "sshd") as server:
            remote_dir = root / "remote"
            remote_dir.mkdir()
            settings = SshSettings(
                host=server.host,
                port=server.port,
                user=server.user,
                key_filename=str(server.key_filename),
                known_hosts=str(server.known_hosts),
                ssh_config=str(root / "no-ssh-config"),
                workdir=str(remote_dir),
            )
            push_times: list[float] = []
            scp_times: list[float] = []
            with SshDevice(settings) as device:
                device.run(["true"], deadline_s=30)  # connect outside the timing
                for i in range(ROUNDS):
                    started = time.perf_counter()
                    device.push(local, f"push-{i}.bin")
                    push_times.append(time.perf_counter() - started)

                    started = time.perf_counter()
                    subprocess.run(
                        [
                            scp,
                            "-q",
                            "-i",
                            str(server.key_filename),
                            "-P",
                            str(server.port),
                            "-o",
                            f"UserKnownHostsFile={server.known_hosts}",
                            "-o",
                            "StrictHostKeyChecking=yes",
                            "-o",
                            "BatchMode=yes",
                            "-F",
                            "/dev/null",
                            str(local),
                            f"{server.user}@{server.host}:{remote_dir}/scp-{i}.bin",
                        ],
                        check=True,
                    )
                    scp_times.append(time.perf_counter() - started)
                    for name in (f"push-{i}.bin", f"scp-{i}.bin"):
                        (remote_dir / name).unlink()

                started = time.perf_counter()
                sha256_file(local)
                hash_s = time.perf_counter() - started

                device.push(local, "kept.bin")
                started = time.perf_counter()
                skipped = device.push(local, "kept.bin")
                skip_s = time.perf_counter() - started
                assert skipped.skipped

    push_s, scp_s = _best(push_times), _best(scp_times)
    print(f"   file: {SIZE_MB} MB random, best of {ROUNDS}, loopback sshd")
    print(
        f"   SshDevice.push : {push_s:6.2f} s  {SIZE_MB / push_s:7.1f} MB/s  (incl. local sha256 {hash_s:.2f} s)"
    )
    print(f"   scp            : {scp_s:6.2f} s  {SIZE_MB / scp_s:7.1f} MB/s")
    print(f"   RATIO push/scp throughput: {scp_s / push_s:.2f}x")
    print(
        f"   unchanged re-push (sha256 skip): {skip_s:.2f} s, scp re-sends in {scp_s:.2f} s "
        f"-> RATIO scp/skip time {scp_s / skip_s:.2f}x"
    )
