"""Level-6 download-size estimate: etdeploy's parallel chunked deflate vs `gzip -6 -c FILE | wc -c`,
and the sampled estimate (`etdeploy sizecheck --estimate sample`) vs the same, in one run.

The file is 1.0 GB of real float weights: each 16 MiB block is a 2048x2048 weight initialised
the way torch.nn.Linear initialises it (kaiming-uniform), each with its own seed, so the
bytes have a trained-from-scratch model's entropy, not zeros or a repeated tile. It is
written to a temporary directory and deleted afterwards. Both tools read it from the page
cache. Peak memory is each process's VmHWM from /proc/PID/status, sampled while it runs (the
kernel keeps it per program image; wait4's ru_maxrss would also count the benchmark's own
memory at fork), the Python interpreter included for ours. ETDEPLOY_BENCH_SIZECHECK_MIB sets
another size; the default, 960 MiB (1.0 GB), takes about 70 s on 2 cores, gzip most of it.

Then the sampled estimate, on that file and on two payloads of real trained weights of the
same size (tests/sizecheck/weights.py: an MLP trained on scikit-learn's digits, in copies
with their hidden units permuted): float32, and per-channel int8 as XNNPACK stores it. Each is
timed as a user runs it, `python -m etdeploy sizecheck FILE --any-file --estimate sample`
from a cold start with an empty cache, against `gzip -6` and against etdeploy's exact figure
on the same bytes; it prints the speed ratio, the error against each and the bound the
estimate stated. The trained payloads add about 4 minutes on 2 cores (gzip and the exact
figure twice; training the MLP, 15 s).
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

# Trained weights, float and int8, `mib` each (in a child: torch stays out of this process).
_WRITE_TRAINED = """
import sys
from pathlib import Path
from tests.sizecheck.weights import train_digits_mlp, write_payload
params = train_digits_mlp()
nbytes = int(sys.argv[3]) * 1024 * 1024
write_payload(Path(sys.argv[1]), params, nbytes)
write_payload(Path(sys.argv[2]), params, nbytes, int8=True)
"""

_REPO = Path(__file__).resolve().parent.parent


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


def _sampled(path: Path, cache: Path) -> tuple[float, int, float, int]:
    """`etdeploy sizecheck --estimate sample` from a cold start: wall seconds, its level-6
    figure, its stated bound and the bytes it deflated."""
    import json

    env = {**os.environ, "ETDEPLOY_CACHE_DIR": str(cache), "PYTHONPATH": str(_REPO)}
    argv = [
        sys.executable, "-m", "etdeploy", "sizecheck", str(path), "--any-file",
        "--estimate", "sample", "--no-level9", "--json", "-",
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cache)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):  # 1: over a store limit, a verdict, not a failure
        raise RuntimeError(f"etdeploy sizecheck exited {done.returncode}: {done.stderr}")
    (f,) = json.loads(done.stdout)["files"]
    return elapsed, f["download_bytes"], f["error_bound"], f["deflated_bytes"]


def _report_sampled(label: str, path: Path, cache: Path, gzip_s: float, gzip_bytes: int,
                    exact_bytes: int) -> None:  # fmt: skip
    sampled_s, figure, bound, deflated = _sampled(path, cache)
    size = path.stat().st_size
    print(
        f"{label}: --estimate sample {sampled_s:5.2f} s ({deflated / size:.1%} of the bytes "
        f"deflated) vs gzip -6 {gzip_s:5.1f} s: RATIO speed sampled/gzip "
        f"{gzip_s / sampled_s:.1f}x"
    )
    print(
        f"{label}: sampled {figure} bytes, stated bound ±{bound * 100:.2f}%; vs etdeploy exact "
        f"{exact_bytes}: {(figure - exact_bytes) / exact_bytes * 100:+.3f}%; vs gzip -6 "
        f"{gzip_bytes}: {(figure - gzip_bytes) / gzip_bytes * 100:+.3f}%",
        flush=True,
    )


def main() -> None:
    mib = int(os.environ.get("ETDEPLOY_BENCH_SIZECHECK_MIB", "960"))
    with tempfile.TemporaryDirectory(prefix="bench-sizecheck-") as tmp:
        path = Path(tmp) / "weights.pte-like.bin"
        cache = Path(tmp) / "cache"
        cache.mkdir()
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

        _report_sampled("kaiming-init float", path, cache, gzip_s, reference, estimate)
        path.unlink()

        trained_float = Path(tmp) / "trained-float.bin"
        trained_int8 = Path(tmp) / "trained-int8.bin"
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", _WRITE_TRAINED, str(trained_float), str(trained_int8),
             str(mib)],
            check=True, cwd=_REPO, env={**os.environ, "PYTHONPATH": str(_REPO)},
        )  # fmt: skip
        print(
            f"trained weights: {trained_float.stat().st_size / 1e9:.2f} GB float32 and "
            f"{trained_int8.stat().st_size / 1e9:.2f} GB int8, trained and written in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        for label, payload in (("trained float", trained_float), ("trained int8", trained_int8)):
            t_gzip, _, gz_out = _run(["gzip", "-6", "-c"], stdin_path=payload)
            _, _, exact_out = _run([sys.executable, "-c", _OURS, str(payload)])
            exact_bytes = int(exact_out.split()[0])
            _report_sampled(label, payload, cache, t_gzip, int(gz_out), exact_bytes)
            payload.unlink()


if __name__ == "__main__":
    main()
