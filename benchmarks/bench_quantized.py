"""What the quantized reference costs a run of an int8 build.

The same int8 digits program run with `etdeploy run --pte` on this machine, on
its 16 held-out digits, judged two ways in one process each, alternated:

- with its quantized reference: the converted program (model.quantized.pt2)
  beside the .pte, so the device is also judged against it step by step;
- float only: the same .pte and manifest copied without the .pt2, so only the
  float model judges it (what a run did before the quantized reference).

Warm: every reference cached (the usual nightly run). Cold: the reference cache
emptied before each run, so the float eager model (and, with the quantized
reference, the converted program too) run on every sample. The figures are
ratios of medians; the build and the runner come from the cache throughout.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = 5


def _run(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "etdeploy", "run", *args, "-n", "3", "--warmup", "1"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(
            f"etdeploy run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return elapsed


def main() -> None:
    from etdeploy.builder import quantized_program_path

    with tempfile.TemporaryDirectory(prefix="bench-quantized-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "ETDEPLOY_CACHE_DIR": str(root / "cache")}
        out = root / "first.json"
        # Builds int8 digits (and the runner) into this benchmark's own cache.
        subprocess.run(
            [sys.executable, "-m", "etdeploy", "run", "digits", "--quantize", "int8", "-n", "1",
             "--json", str(out)], env=env, capture_output=True, check=True,
        )  # fmt: skip
        pte = Path(json.loads(out.read_text())["artifact"]["pte"])
        with_ref = root / "with" / "digits.pte"
        float_only = root / "float" / "digits.pte"
        for target, keep_reference in ((with_ref, True), (float_only, False)):
            target.parent.mkdir()
            shutil.copyfile(pte, target)
            shutil.copyfile(f"{pte}.json", f"{target}.json")
            if keep_reference:
                shutil.copyfile(quantized_program_path(pte), quantized_program_path(target))
        references = root / "cache" / "references"
        timings: dict[str, list[float]] = {k: [] for k in ("warm+q", "warm", "cold+q", "cold")}
        for _ in range(ROUNDS):
            for label, target in (("+q", with_ref), ("", float_only)):
                shutil.rmtree(references, ignore_errors=True)
                timings["cold" + label].append(_run(["digits", "--pte", str(target)], env))
                timings["warm" + label].append(_run(["digits", "--pte", str(target)], env))
        median = {k: statistics.median(v) for k, v in timings.items()}
        print(
            f"   warm run, with quantized reference {median['warm+q']:.2f} s vs float only "
            f"{median['warm']:.2f} s: {median['warm+q'] / median['warm']:.2f}x"
        )
        print(
            f"   cold references, with quantized reference {median['cold+q']:.2f} s vs float only "
            f"{median['cold']:.2f} s: {median['cold+q'] / median['cold']:.2f}x"
        )


if __name__ == "__main__":
    main()
