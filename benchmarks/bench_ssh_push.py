"""SshDevice.push (paramiko SFTP) against OpenSSH's scp, to the same loopback sshd;
then the re-push of the unchanged file from a NEW process against scp re-sending it.

A 256 MB random file goes to a fresh remote name with each tool; both use the same
key and the same sshd (tests/support/sshd.py). SshDevice.push also hashes the file
locally (that is how it knows it next time); the hash time is printed separately.

The re-push runs in a fresh interpreter, as the next `etdeploy run` would: it
connects (key exchange and authentication, as scp does), and neither side reads
the file: the local one is recognised by its stat record (etdeploy.digests), the
remote one by its digest record in the work dir (devices/digest_records.py). Two
figures against scp sending it again: connect + push, and the whole process from
exec to exit (Python and etdeploy's imports included). Best of ROUNDS each.

Every session both tools open starts the account's login shell, and Debian's
bash sources ~/.bashrc for a command sshd runs: this machine's runs `pyenv init`
(0.15 s a session). The sessions here get an empty HOME, so the figures are the
tools', not that file's; the cost of one session (`ssh HOST true`) is printed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from etdeploy.devices.ssh import SshDevice, SshSettings
from etdeploy.digests import RACY_MARGIN_NS, sha256_file
from tests.support.sshd import start_sshd

SIZE_MB = 256
ROUNDS = 3

# The next run's push, in a process of its own: connects, pushes, says how long.
NEW_PROCESS = """
import json, sys, time
started = time.perf_counter()
from pathlib import Path
from etdeploy.devices.ssh import SshDevice, SshSettings
settings = SshSettings(**json.loads(sys.argv[1]))
opened = time.perf_counter()
with SshDevice(settings) as device:
    result = device.push(Path(sys.argv[2]), sys.argv[3])
done = time.perf_counter()
print(json.dumps({"skipped": result.skipped, "push_s": done - opened, "imports_s": opened - started}))
"""


def _random_file(path: Path, size_mb: int) -> Path:
    with open(path, "wb") as f:
        for _ in range(size_mb):
            f.write(os.urandom(1 << 20))
    return path


def main() -> None:
    scp = shutil.which("scp")
    if scp is None:
        print("   scp not found: install Debian's openssh-client")
        return
    with tempfile.TemporaryDirectory(prefix="bench-ssh-") as tmp:
        root = Path(tmp)
        os.environ.setdefault("ETDEPLOY_CACHE_DIR", str(root / "cache"))
        local = _random_file(root / "payload.bin", SIZE_MB)
        # A local digest is trusted only for a file changed more than a tick before it
        # was hashed (etdeploy.digests); a user's program was built long before.
        st = local.stat()
        time.sleep(max(0.0, (st.st_ctime_ns + RACY_MARGIN_NS - time.time_ns()) / 1e9) + 0.1)
        home = root / "home"
        home.mkdir()
        with start_sshd(root / "sshd", set_env={"HOME": str(home)}) as server:
            remote_dir = root / "remote"
            remote_dir.mkdir()
            values = {
                "host": server.host,
                "port": server.port,
                "user": server.user,
                "key_filename": str(server.key_filename),
                "known_hosts": str(server.known_hosts),
                "ssh_config": str(root / "no-ssh-config"),
                "workdir": str(remote_dir),
                "allow_agent": False,
            }
            settings = SshSettings(**values)  # type: ignore[arg-type]
            push_times: list[float] = []
            scp_times: list[float] = []
            scp_command = [
                scp, "-q", "-i", str(server.key_filename), "-P", str(server.port),
                "-o", f"UserKnownHostsFile={server.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-F", "/dev/null",
                str(local),
            ]  # fmt: skip
            ssh = shutil.which("ssh")
            session_s = float("nan")
            if ssh is not None:
                sessions = []
                for _ in range(ROUNDS):
                    started = time.perf_counter()
                    subprocess.run(
                        [ssh, "-i", str(server.key_filename), "-p", str(server.port),
                         "-o", f"UserKnownHostsFile={server.known_hosts}",
                         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                         "-F", "/dev/null", f"{server.user}@{server.host}", "true"],
                        check=True,
                    )  # fmt: skip
                    sessions.append(time.perf_counter() - started)
                session_s = min(sessions)
            with SshDevice(settings) as device:
                device.run(["true"], deadline_s=30)  # connect outside the timing
                for i in range(ROUNDS):
                    started = time.perf_counter()
                    device.push(local, f"push-{i}.bin")
                    push_times.append(time.perf_counter() - started)

                    started = time.perf_counter()
                    subprocess.run(
                        [*scp_command, f"{server.user}@{server.host}:{remote_dir}/scp-{i}.bin"],
                        check=True,
                    )
                    scp_times.append(time.perf_counter() - started)
                    for name in (f"push-{i}.bin", f"scp-{i}.bin"):
                        (remote_dir / name).unlink()

                started = time.perf_counter()
                sha256_file(local)
                hash_s = time.perf_counter() - started
                device.push(local, "kept.bin")

            env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
            fresh_push: list[float] = []
            fresh_process: list[float] = []
            for _ in range(ROUNDS):
                started = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-c", NEW_PROCESS, json.dumps(values), str(local),
                     "kept.bin"],
                    capture_output=True, text=True, env=env, timeout=300, check=True,
                )  # fmt: skip
                fresh_process.append(time.perf_counter() - started)
                report = json.loads(done.stdout)
                if not report["skipped"]:
                    raise RuntimeError("the re-push from a new process was not skipped")
                fresh_push.append(report["push_s"])

    push_s, scp_s = min(push_times), min(scp_times)
    repush_s, process_s = min(fresh_push), min(fresh_process)
    print(f"   file: {SIZE_MB} MB random, best of {ROUNDS}, loopback sshd")
    print(f"   one ssh session here (ssh HOST true, connect included): {session_s:.3f} s")
    print(
        f"   SshDevice.push : {push_s:6.2f} s  {SIZE_MB / push_s:7.1f} MB/s  (incl. local sha256 {hash_s:.2f} s)"
    )
    print(f"   scp            : {scp_s:6.2f} s  {SIZE_MB / scp_s:7.1f} MB/s")
    print(f"   RATIO push/scp throughput: {scp_s / push_s:.2f}x")
    print(
        f"   unchanged re-push, new process: connect + push {repush_s:.3f} s, "
        f"whole process {process_s:.3f} s (imports and interpreter included)"
    )
    print(
        f"   RATIO scp re-sending / new-process re-push: {scp_s / repush_s:.1f}x (connect + push), "
        f"{scp_s / process_s:.1f}x (whole process)"
    )


if __name__ == "__main__":
    main()
