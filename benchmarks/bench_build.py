"""Cold build vs cached build of `digits`: what the content-addressed cache saves.

Both run as a user would run them, `etdeploy build digits`, in fresh processes
against one empty cache directory; the ratio is cold / cached wall time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _timed_build(cache: Path, out: Path) -> float:
    env = dict(os.environ, ETDEPLOY_CACHE_DIR=str(cache))
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "etdeploy", "build", "digits", "-o", str(out / "digits.pte")],
        env=env,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # Train the example first so "cold" measures export+lower, not training.
        env = dict(os.environ, ETDEPLOY_CACHE_DIR=str(root / "cache"))
        subprocess.run(
            [
                sys.executable,
                "-c",
                "from etdeploy.model.examples.digits import ensure_trained; ensure_trained()",
            ],
            env=env,
            check=True,
        )
        cold = _timed_build(root / "cache", root)
        cached = min(_timed_build(root / "cache", root) for _ in range(3))
    print(f"   cold build   {cold:6.2f} s  (export + lower + serialise)")
    print(f"   cached build {cached:6.2f} s  (cache hit, best of 3)")
    print(f"   ratio cold/cached: {cold / cached:.1f}x")


if __name__ == "__main__":
    main()
