"""AdbDevice.push against `adb push`, to the same loopback phone through the same
real adb server, with a 256 MB file of random bytes; then a second push of the
same file (skipped by size and sha256) against the first.

The phone is tests/support/loopback_adb.py (Python), so absolute MB/s say more
about it than about adb; the ratio is the figure: both clients drive the same
server and the same phone.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from etdeploy.devices.adb import AdbDevice, AdbSettings
from tests.support.adb_server import adb_testbed

SIZE = 256 * 1000 * 1000
ROUNDS = 3


def _random_file(path: Path, size: int) -> Path:
    chunk = 8 << 20
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(chunk, left)
            f.write(os.urandom(n))
            left -= n
    return path


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-adb-push-") as tmp_text:
        tmp = Path(tmp_text)
        os.environ.setdefault("ETDEPLOY_CACHE_DIR", str(tmp / "cache"))
        local = _random_file(tmp / "model.pte", SIZE)
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

            # The second run of a job: a new process (no local hash cached) finds the file there.
            fresh = AdbDevice("bench", settings)
            started = time.perf_counter()
            again = fresh.push(local, remote_ours)
            skip_fresh = time.perf_counter() - started
            started = time.perf_counter()
            fresh.push(local, remote_ours)
            skip_cached = time.perf_counter() - started
            if not again.skipped:
                raise RuntimeError("the second push was not skipped")

        mb = SIZE / 1e6
        best_ours, best_theirs = min(ours), min(theirs)
        print(f"   file: {mb:.0f} MB of random bytes; best of {ROUNDS} rounds")
        print(
            f"   AdbDevice.push : {best_ours:6.2f} s  {mb / best_ours:7.1f} MB/s"
            "  (includes hashing it on a second thread, for the skip record)"
        )
        print(f"   adb push       : {best_theirs:6.2f} s  {mb / best_theirs:7.1f} MB/s")
        print(f"   ratio AdbDevice.push / adb push throughput: {best_theirs / best_ours:.2f}x")
        print(
            f"   second push (skipped, new process): {skip_fresh:6.3f} s  "
            f"= {skip_fresh / best_ours:.3f} of the first push ({best_ours / skip_fresh:.1f}x faster)"
        )
        print(f"   second push (skipped, same process, local hash cached): {skip_cached:6.3f} s")


if __name__ == "__main__":
    main()
