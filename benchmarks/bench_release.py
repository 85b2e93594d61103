"""Warm `etdeploy release build` of the example release vs warm `etdeploy build` of its
largest variant: what packaging a whole release set costs once every variant is cached.

Both run as a user runs them, in fresh processes against one cache (filled first by a
cold release build); each is the best of 3. The target is a ratio of at most 1.2x: a
release of N cached variants should cost about one cached build, not N.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "release" / "release.toml"


def _timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "etdeploy", *args], env=env, check=True,
                   capture_output=True)  # fmt: skip
    return time.perf_counter() - started


def _largest_variant_args(out: Path) -> tuple[str, list[str]]:
    """The largest variant delivered by the release just built, as `etdeploy build` flags."""
    from etdeploy.release import load_spec

    document = json.loads((out / "selection.json").read_text())
    groups = document["play"]["groups"]
    largest = max(groups, key=lambda g: sum(f["size_bytes"] for f in g["files"]))["variant"]
    variant = load_spec(EXAMPLE).variant(largest)
    flags = ["-b", variant.backend] + (["--quantize", variant.quantize] if variant.quantize else [])
    return largest, flags


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = dict(os.environ, ETDEPLOY_CACHE_DIR=str(root / "cache"))
        release = ["release", "build", str(EXAMPLE), "-o", str(root / "release")]
        cold = _timed(release, env)  # builds every variant once
        name, flags = _largest_variant_args(root / "release")
        build = ["build", "digits", *flags, "-o", str(root / "single.pte"), "--force"]
        _timed(build, env)  # its own copy written once, like the release's
        warm_release = min(_timed(release, env) for _ in range(3))
        warm_build = min(_timed(build, env) for _ in range(3))
    print(f"   cold release build        {cold:6.2f} s  (every variant built)")
    print(f"   warm release build        {warm_release:6.2f} s  (best of 3)")
    print(f"   warm build of {name:<11} {warm_build:6.2f} s  (the largest variant, best of 3)")
    print(f"   ratio release/build: {warm_release / warm_build:.2f}x  (target <= 1.2x)")


if __name__ == "__main__":
    main()
