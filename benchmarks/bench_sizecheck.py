"""Level-6 download-size estimate: etdeploy's parallel chunked deflate vs `gzip -6 -c FILE | wc -c`.

The file is 1.0 GB of real float weights: each 16 MiB block is a 2048x2048 weight initialised
the way torch.nn.Linear initialises it (kaiming-uniform), each with its own seed, so the
bytes have a trained-from-scratch model's entropy, not zeros or a repeated tile. It is
written to a temporary directory and deleted afterwards. Both tools read it from the page
cache. Peak memory is each process's VmHWM from /proc/PID/status, sampled while it runs (the
kernel keeps it per program image; wait4's ru_maxrss would also count the benchmark's own
memory at fork), the Python interpreter included for ours. ETDEPLOY_BENCH_SIZECHECK_MIB sets
another size; the default, 960 MiB (1.0 GB), takes about 70 s on 2 cores, gzip most of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_BLOCK_SIDE = 2048  # 2048 * 2048 * 4 bytes = 16 MiB per block

_WRITE = """
import math, sys, torch
blocks, side = int(sys.argv[2]), int(sys.argv[3])
with open(sys.argv[1], "wb") as fh:
    for i in range(blocks):
        torch.manual_seed(i)
        w = torch.empty(side, side)
        torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5))  # nn.Linear's default init
        fh.write(w.numpy().tobytes())
"""

_OURS = """
import sys
from etdeploy.sizecheck.compress import measure
m = measure(sys.argv[1], levels=(6,))
print(m.gzip_bytes(6), m.workers, m.chunks)
"""


def _write_weights(path: Path, mib: int) -> int:
    # In a child process, so this one stays small and torch-free.
    blocks = max(1, mib // 16)
    subprocess.run(
        [sys.executable, "-c", _WRITE, str(path), str(blocks), str(_BLOCK_SIDE)], check=True
    )
    return path.stat().st_size


def _peak_rss(pid: int, stop: threading.Event, out: list[int]) -> None:
    status = Path(f"/proc/{pid}/status")
    while not stop.is_set():
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    out[0] = max(out[0], int(line.split()[1]) * 1024)
        except OSError:
            return
        stop.wait(0.05)


def _run(argv: list[str], stdin_path: Path | None = None) -> tuple[float, int, str]:
    """Wall seconds, peak RSS in bytes, and stdout (text, or for gzip its byte count)."""
    stdin = stdin_path.open("rb") if stdin_path else None
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    peak = [0]
    stop = threading.Event()
    sampler = threading.Thread(target=_peak_rss, args=(proc.pid, stop, peak), daemon=True)
    sampler.start()
    if stdin_path is None:
        text = proc.stdout.read().decode()
    else:  # count gzip's output as `wc -c` would, without keeping it
        count = 0
        while chunk := proc.stdout.read(1 << 20):
            count += len(chunk)
        text = str(count)
    stop.set()
    code = proc.wait()
    elapsed = time.perf_counter() - started
    sampler.join()
    if stdin:
        stdin.close()
    if code != 0:
        raise RuntimeError(f"{argv[0]} exited {code}")
    return elapsed, peak[0], text


def main() -> None:
    mib = int(os.environ.get("ETDEPLOY_BENCH_SIZECHECK_MIB", "960"))
    with tempfile.TemporaryDirectory(prefix="bench-sizecheck-") as tmp:
        path = Path(tmp) / "weights.pte-like.bin"
        t0 = time.perf_counter()
        size = _write_weights(path, mib)
        print(f"file: {size / 1e9:.2f} GB of float weights, written in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)  # fmt: skip

        ours_s, ours_rss, out = _run([sys.executable, "-c", _OURS, str(path)])
        estimate, workers, chunks = (int(x) for x in out.split())
        gzip_s, gzip_rss, gz = _run(["gzip", "-6", "-c"], stdin_path=path)
        reference = int(gz)

    mb = size / 1e6
    print(
        f"etdeploy level-6 estimate: {ours_s:6.1f} s  {mb / ours_s:6.1f} MB/s  "
        f"peak RSS {ours_rss / 1e6:6.1f} MB  ({workers} threads, {chunks} chunks of 8 MiB)"
    )
    print(
        f"gzip -6 -c | wc -c:        {gzip_s:6.1f} s  {mb / gzip_s:6.1f} MB/s  "
        f"peak RSS {gzip_rss / 1e6:6.1f} MB  (single-threaded)"
    )
    print(f"RATIO speed etdeploy/gzip: {gzip_s / ours_s:.2f}x")
    print(
        f"estimate {estimate} vs gzip {reference} bytes: "
        f"{(estimate - reference) / reference * 100:+.3f}% (zlib memLevel 8, as bundletool)"
    )
    print(f"compressed/raw: {reference / size:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
