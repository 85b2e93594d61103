"""What `--localize` costs: a warm `etdeploy run MODEL --localize` against a warm
`etdeploy run MODEL` (what a user runs without it), each a new process on the
local device, as the CLI is used; and the tapped program's size against the
untapped one's.

Four models: digits (the ConvNet example, 16 real samples, every tap within
tolerance), tests/data/models/pressure_chain.py (the real layer_norm precision
loss: an operator over its float32 bound), conditioning.py:detrend (a mean's
rounding amplified by a subtraction: ill-conditioned, no operator wrong) and
gait_transformer.py (a stock TransformerEncoderLayer on XNNPACK, dynamic
length). Warm: the builds (plain and tapped), the references, the tapped eager
values and each operator's own error (keyed by the device's values) are in the
cache and the device already holds every file, so the figure is what
localisation adds to a run a user repeats: the tapped program's run on the
most divergent samples and the judging. The target is at most 1.5x. The cold
first runs (the tapped build and the operators' own errors included) are
printed separately.
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
_TEST_MODELS = REPO / "tests" / "data" / "models"
MODELS = {
    "digits": "digits",
    "pressure_chain": f"{_TEST_MODELS / 'pressure_chain.py'}:build",
    "detrend": f"{_TEST_MODELS / 'conditioning.py'}:detrend",
    "gait_transformer": f"{_TEST_MODELS / 'gait_transformer.py'}:build",
}
# What a warm run --localize may cost against a warm run (issue 30).
TARGET = 1.5


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
                f"localization {found['status']}"
                + (f" (origin {found['origin']['op']})" if found.get("origin") else "")
                + f"; best of {ROUNDS} warm runs, each a new process"
            )
            print(
                f"     run            : {best_plain:6.2f} s   (cold, first run: {cold_plain:.1f} s)"
            )
            print(
                f"     run --localize : {best_localized:6.2f} s   "
                f"(cold, building the tapped twin: {cold_localize:.1f} s)"
            )
            ratio = best_localized / best_plain
            verdict = "within" if ratio <= TARGET else "OVER"
            print(
                f"     ratio warm run --localize / run: {ratio:.2f}x "
                f"({verdict} the {TARGET}x target)"
            )
            print(
                f"     tapped program {program['size_bytes']} B / program "
                f"{program['untapped_size_bytes']} B: "
                f"{program['size_bytes'] / program['untapped_size_bytes']:.2f}x"
            )


if __name__ == "__main__":
    main()
