"""A warm `etdeploy run --bundle` of digits on the loopback phone against what a user
would script instead (benchmarks/scripted_bundle_run.py: `adb shell` running the
runner with the same argv, `adb pull` of its outputs, a numpy comparison with the
bundle's references). Issue 27 wants the ratio at 1.5x or less.

Both run in a fresh process each time, as typed, with bytecode cached; "warm" means
the runner, the program and the inputs are on the phone already (the first, untimed
etdeploy run pushes them and, with --keep, leaves the samples file the scripted call
reads). Rounds alternate the two; each figure is a median. The loopback phone is
tests/support/loopback_adb.py behind the real adb server; it runs what it is sent on
this machine, so the bundle carries the host runner.

ETDEPLOY_BENCH_ONE_SAMPLE=1 makes the bundle of one digits sample instead of its
held-out set: the loopback phone maps /data/local/tmp in a command line only, so a
runner call that reads other samples' paths from its samples file fails there (the
same for `etdeploy run digits -d pixel8` on i27-core today).

The start-up share: `python -X importtime` of the same command, its modules summed
(what a run of a bundle imports), and whether torch was among them.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ROUNDS = 7
SCRIPT = REPO / "benchmarks" / "scripted_bundle_run.py"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANDROID_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _timed(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=_env(), cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(
            f"{shlex.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}"
        )
    return elapsed


def _runner_call(result: dict[str, Any]) -> tuple[list[str], str]:
    """The runner argv etdeploy ran (the first line of its log) and its --batch_output."""
    argv = shlex.split(result["logs"][0].splitlines()[0].removeprefix("$ "))
    batch = next(a.split("=", 1)[1] for a in argv if a.startswith("--batch_output="))
    return argv, batch


def _import_seconds(command: list[str]) -> tuple[float, bool]:
    """Seconds of imports in `command` (python -X importtime, top-level modules summed)
    and whether torch was imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *command[1:]],
        env=_env(), cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    total, torch = 0, False
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if not cumulative.strip().isdigit():
            continue
        torch = torch or name.strip().split(".")[0] == "torch"
        if not name.startswith("  "):  # a top-level import: its cumulative time counts once
            total += int(cumulative)
    return total / 1e6, torch


def main() -> None:
    import adbutils

    from etdeploy.bundle.make import make_bundle
    from etdeploy.model.loader import load_model, parse_model_ref
    from etdeploy.pipeline.job import RunJob
    from tests.support.adb_server import adb_testbed
    from tests.support.device_config import write_config

    inputs: tuple[str, ...] = ()
    if os.environ.get("ETDEPLOY_BENCH_ONE_SAMPLE"):
        folder = Path(load_model(parse_model_ref("digits")).samples[0])
        inputs = (str(sorted(folder.glob("*.npy"))[5]),)
    with tempfile.TemporaryDirectory(prefix="bench-bundle-") as tmp_text:
        tmp = Path(tmp_text)
        bundle = make_bundle(RunJob(model="digits", inputs=inputs), tmp / "job").path
        samples = len(json.loads((bundle / "bundle.json").read_text())["samples"]["names"])
        with adb_testbed(tmp / "bed", ["pixel"]) as bed:
            config = write_config(
                tmp / "etdeploy.toml",
                {"pixel8": {"serial": bed.serial("pixel"), "adb_port": bed.server.port}},
            )
            etdeploy = [sys.executable, "-m", "etdeploy", "run", "--bundle", str(bundle),
                        "-d", "pixel8", "--config", str(config)]  # fmt: skip
            first = tmp / "first.json"
            _timed([*etdeploy, "--keep", "--json", str(first)])  # pushes; keeps the job dir
            argv, batch = _runner_call(json.loads(first.read_text()))
            scripted = [sys.executable, str(SCRIPT), adbutils.adb_path(), bed.serial("pixel"),
                        str(bed.server.port), str(bundle), batch, "--", *argv]  # fmt: skip
            _timed(scripted)  # compiles its bytecode
            ours, theirs = [], []
            for _ in range(ROUNDS):
                ours.append(_timed([*etdeploy, "-q"]))
                theirs.append(_timed(scripted))
            imports, torch = _import_seconds([*etdeploy, "-q"])
            script_imports, _ = _import_seconds(scripted)
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"   digits bundle ({samples} sample(s)) on the loopback phone, median of {ROUNDS}:")
    print(
        f"     etdeploy run --bundle        {a:6.3f} s  (imports {imports:.3f} s; torch: {torch})"
    )
    print(f"     adb shell + adb pull + numpy {b:6.3f} s  (imports {script_imports:.3f} s)")
    print(f"   ratio {a / b:.2f}x (goal: 1.5x or less)")


if __name__ == "__main__":
    main()
