"""A warm `etdeploy run --bundle` of digits on the loopback phone against what a user
would script instead (benchmarks/scripted_bundle_run.py: the bundle's samples pushed as
one tar, `adb shell` running the runner over every sample in one call as etdeploy does,
the outputs pulled back as one tar, a numpy comparison with the bundle's references and
labels). Issue 27 wants the ratio at 1.5x or less.

The bundle is digits' own: its 360 labelled held-out images. Both run in a fresh process
each time, as typed, with bytecode cached; "warm" means the runner and the program are
on the phone already (the first, untimed etdeploy run pushes them; the script runs the
same runner and program, read off etdeploy's command line, with the same timing flags).
Rounds alternate the two; each figure is a median. The loopback phone is
tests/support/loopback_adb.py behind the real adb server; it runs what it is sent on
this machine, so the bundle carries the host runner.

etdeploy is timed as every user gets it: each command starts Python and imports what
it uses (there is no server in the background; issue 36). The start-up share:
`python -X importtime` of the same command, its modules summed (what a run of a bundle
imports), and whether torch was among them.
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
    import adbutils

    env = {k: v for k, v in os.environ.items() if not k.startswith("ANDROID_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    # The script's `adb` is the binary adbutils ships (the one serving the phone).
    env["PATH"] = os.pathsep.join([str(Path(adbutils.adb_path()).parent), env["PATH"]])
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


def _runner_call(result: dict[str, Any]) -> tuple[str, str, list[str]]:
    """The runner and program etdeploy ran (the first line of its log), and the flags of
    its call that time the first sample (warm-ups, executions, the memory account)."""
    argv = shlex.split(result["logs"][0].splitlines()[0].removeprefix("$ "))
    pte = next(a.split("=", 1)[1] for a in argv if a.startswith("--model_path="))
    timing = ("--num_executions=", "--warmup=", "--memory")
    return argv[0], pte, [a for a in argv[1:] if a.startswith(timing)]


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
    from etdeploy.pipeline.job import RunJob
    from etdeploy.pipeline.make_bundle import make_bundle
    from tests.support.adb_server import adb_testbed
    from tests.support.device_config import write_config

    with tempfile.TemporaryDirectory(prefix="bench-bundle-") as tmp_text:
        tmp = Path(tmp_text)
        bundle = make_bundle(RunJob(model="digits"), tmp / "job").path
        samples = len(json.loads((bundle / "bundle.json").read_text())["samples"]["names"])
        with adb_testbed(tmp / "bed", ["pixel"]) as bed:
            config = write_config(
                tmp / "etdeploy.toml",
                {"pixel8": {"serial": bed.serial("pixel"), "adb_port": bed.server.port}},
            )
            etdeploy = [sys.executable, "-m", "etdeploy", "run", "--bundle", str(bundle),
                        "-d", "pixel8", "--config", str(config)]  # fmt: skip
            first = tmp / "first.json"
            _timed([*etdeploy, "--json", str(first)])  # pushes the runner and the program
            runner, pte, flags = _runner_call(json.loads(first.read_text()))
            target = f"{bed.server.port}:{bed.serial('pixel')}:/data/local/tmp/scripted"
            scripted = [sys.executable, str(SCRIPT), target, runner, pte, str(bundle), *flags]
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
    print(f"     adb push/shell/pull + numpy  {b:6.3f} s  (imports {script_imports:.3f} s)")
    print(f"   ratio {a / b:.2f}x (goal: 1.5x or less)")


if __name__ == "__main__":
    main()
