"""What `--localize` costs: a warm `etdeploy run MODEL --localize` against a warm
`etdeploy run MODEL` (what a user runs without it), each a new process on the
local device, as the CLI is used; and the tapped program's size against the
untapped one's.

Two models: digits (the ConvNet example, 16 real samples, every tap within
tolerance) and tests/data/models/pressure_chain.py (the real layer_norm
precision loss, localised). Warm: the builds (plain and tapped), the references
and the tapped eager values are in the cache and the device already holds every
file, so the figure is what localisation adds to a run a user repeats: the
tapped program's run on the most divergent sample and the judging. The cold
first runs (the tapped build included) are printed separately.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = 5
REPO = Path(__file__).resolve().parent.parent
MODELS = {
    "digits": "digits",
    "pressure_chain": str(REPO / "tests" / "data" / "models" / "pressure_chain.py") + ":build",
}


def _run(model: str, workdir: Path, out: Path, *extra: str) -> float:
    """One `etdeploy run` in a new process; its wall time. A numeric FAIL
    (exit 1: the chain model diverges) is a result, not an error."""
    command = [
        sys.executable, "-m", "etdeploy", "run", model, "--device", "local",
        "-n", "10", "--warmup", "3", "--json", str(out), *extra,
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=1800)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-localize-") as tmp_text:
        tmp = Path(tmp_text)
        os.environ.setdefault("ETDEPLOY_CACHE_DIR", str(tmp / "cache"))
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p
        )
        for name, model in MODELS.items():
            out = tmp / f"{name}.json"
            cold_plain = _run(model, tmp, out)
            cold_localize = _run(model, tmp, out, "--localize")
            found = json.loads(out.read_text())["localization"]
            plain: list[float] = []
            localized: list[float] = []
            for _ in range(ROUNDS):  # alternating, so load drifts hit both alike
                plain.append(_run(model, tmp, out))
                localized.append(_run(model, tmp, out, "--localize"))
            program = found["program"]
            best_plain, best_localized = min(plain), min(localized)
            print(
                f"   {name}: {len(found['taps'])} taps ({program['full_taps']} whole), "
                f"localization {found['status']}; best of {ROUNDS} warm runs, each a new process"
            )
            print(
                f"     run            : {best_plain:6.2f} s   (cold, first run: {cold_plain:.1f} s)"
            )
            print(
                f"     run --localize : {best_localized:6.2f} s   "
                f"(cold, building the tapped twin: {cold_localize:.1f} s)"
            )
            print(f"     ratio warm run --localize / run: {best_localized / best_plain:.2f}x")
            print(
                f"     tapped program {program['size_bytes']} B / program "
                f"{program['untapped_size_bytes']} B: "
                f"{program['size_bytes'] / program['untapped_size_bytes']:.2f}x"
            )


if __name__ == "__main__":
    main()
