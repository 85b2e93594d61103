"""AdbDevice.push against `adb push`, to the same loopback phone through the same
real adb server, with a 256 MB file of random bytes; then the re-push of that
unchanged file from a NEW process (what the next `etdeploy run` does) against
`adb push` sending it again, which is what adb does every time.

The phone is tests/support/loopback_adb.py (Python), so absolute MB/s say more
about it than about adb; the ratio is the figure: both clients drive the same
server and the same phone.

The re-push runs in a fresh interpreter that knows nothing of the first push:
the local side is recognised by its stat record (etdeploy.digests), the phone's
by the digest record in its work dir (devices/digest_records.py), so neither side reads
the 256 MB. Two figures: the device opened and the push done (what a run pays
for the file), and the whole process from exec to exit (Python and etdeploy's
imports included), each against `adb push` re-sending the file, best of ROUNDS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from etdeploy.devices.adb import AdbDevice, AdbSettings
from etdeploy.digests import RACY_MARGIN_NS
from tests.support.adb_server import adb_testbed

SIZE = 256 * 1000 * 1000
ROUNDS = 3

# The next run's push, in a process of its own: opens the device, pushes, says how long.
NEW_PROCESS = """
import json, sys, time
started = time.perf_counter()
from pathlib import Path
from etdeploy.devices.adb import AdbDevice, AdbSettings
port, serial, local, remote = sys.argv[1:5]
opened = time.perf_counter()
device = AdbDevice("bench", AdbSettings(port=int(port), serial=serial))
result = device.push(Path(local), remote)
done = time.perf_counter()
print(json.dumps({"skipped": result.skipped, "push_s": done - opened, "imports_s": opened - started}))
"""


def _random_file(path: Path, size: int) -> Path:
    chunk = 8 << 20
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(chunk, left)
            f.write(os.urandom(n))
            left -= n
    return path


def _age_past_the_racy_margin(path: Path) -> None:
    # A local digest is trusted only for a file changed more than a tick before it
    # was hashed (etdeploy.digests); a user's program was built long before.
    st = path.stat()
    wait = (max(st.st_mtime_ns, st.st_ctime_ns) + RACY_MARGIN_NS - time.time_ns()) / 1e9
    time.sleep(max(0.0, wait) + 0.1)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-adb-push-") as tmp_text:
        tmp = Path(tmp_text)
        os.environ.setdefault("ETDEPLOY_CACHE_DIR", str(tmp / "cache"))
        local = _random_file(tmp / "model.pte", SIZE)
        _age_past_the_racy_margin(local)
        with adb_testbed(tmp / "bed", ["bench"]) as bed:
            phone = bed.phones["bench"]
            settings = AdbSettings(port=bed.server.port, serial=phone.address)
            ours: list[float] = []
            theirs: list[float] = []
            for round_ in range(ROUNDS):
                remote_ours = f"/data/local/tmp/etdeploy/bench/ours-{round_}.pte"
                remote_theirs = f"/data/local/tmp/etdeploy/bench/adb-{round_}.pte"
                device = AdbDevice("bench", settings)
                started = time.perf_counter()
                device.push(local, remote_ours)
                ours.append(time.perf_counter() - started)
                started = time.perf_counter()
                bed.server.adb("-s", phone.address, "push", str(local), remote_theirs, timeout=300)
                theirs.append(time.perf_counter() - started)
                if phone.device_path(remote_theirs).stat().st_size != SIZE:
                    raise RuntimeError("adb push left a file of the wrong size")
                phone.device_path(remote_theirs).unlink()
                if round_ < ROUNDS - 1:
                    phone.device_path(remote_ours).unlink()

            # The next run of the job: a new process finds the file there.
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
            fresh_push: list[float] = []
            fresh_process: list[float] = []
            for _ in range(ROUNDS):
                started = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-c", NEW_PROCESS, str(settings.port), phone.address,
                     str(local), remote_ours],
                    capture_output=True, text=True, env=env, timeout=300, check=True,
                )  # fmt: skip
                fresh_process.append(time.perf_counter() - started)
                report = json.loads(done.stdout)
                if not report["skipped"]:
                    raise RuntimeError("the re-push from a new process was not skipped")
                fresh_push.append(report["push_s"])
            # For contrast: the same skip with the phone's record ignored (--verify-remote),
            # the file hashed on the phone as every run did before the records.
            verifying = AdbDevice("bench", settings)
            started = time.perf_counter()
            if not verifying.push(local, remote_ours, verify=True).skipped:
                raise RuntimeError("the verified re-push was not skipped")
            verify_s = time.perf_counter() - started

        mb = SIZE / 1e6
        best_ours, best_theirs = min(ours), min(theirs)
        push_s, process_s = min(fresh_push), min(fresh_process)
        print(f"   file: {mb:.0f} MB of random bytes; best of {ROUNDS} rounds")
        print(
            f"   AdbDevice.push : {best_ours:6.2f} s  {mb / best_ours:7.1f} MB/s"
            "  (includes hashing it on a second thread, for the digest records)"
        )
        print(f"   adb push       : {best_theirs:6.2f} s  {mb / best_theirs:7.1f} MB/s")
        print(f"   ratio AdbDevice.push / adb push throughput: {best_theirs / best_ours:.2f}x")
        print(
            f"   unchanged re-push, new process: device opened + push {push_s:6.3f} s, "
            f"whole process {process_s:6.3f} s (imports and interpreter included)"
        )
        print(
            f"   RATIO adb push re-sending / new-process re-push: {best_theirs / push_s:.1f}x "
            f"(push), {best_theirs / process_s:.1f}x (whole process)"
        )
        print(f"   the same re-push hashing on the phone (--verify-remote): {verify_s:6.3f} s")


if __name__ == "__main__":
    main()
