"""A warm `etdeploy run` of a program with 261 MB of real float weights against a warm
`etdeploy run digits` (3.2 KB of code, 40 KB of weights), side by side (issue 20: nothing
on a warm run grows with the file); on the local device and on the loopback phone; and
the warm `run digits` against a cold rebuild (`run digits --no-cache`: torch.export,
lowering and the eager reference again), the ratio the issue wants at 20x or more.

The big model is tests/data/models/digits_ensemble.py (fifteen permuted copies of an MLP
trained on the digits: real trained weights, see its docstring), built once for XNNPACK
with its weights inside the .pte and once with `--external-weights` (a 21 KB .pte and a
261 MB .ptd). Every run is `python -m etdeploy run ...` in a fresh process, as a user
runs it, with bytecode caching on (the first, untimed run of each writes the .pyc files);
"second run" means every cache is warm: build, reference, runner, size verdict, files on
the device. Rounds interleave the models, so load on the machine hits them alike; the
figure is each one's median.

Two sets of flags, the same for both models:
  - as a user types it: each model's own samples (digits ships 360, the ensemble 4), 10
    timed executions after 3 warm-ups. The device's own work differs here: XNNPACK packs
    261 MB of weights each time the runner loads the program (twice: the timed sample's
    call and the one that takes the other samples) and each execution streams them, so
    the runner's reported load and execution times are shown beside the wall time;
  - the fixed cost of a run: one sample, `-n 1 --warmup 0`, where what remains is
    etdeploy's own work (start-up, build and reference lookups, preflight, the size
    verdict, deploy's skips) plus one load and one execution.

A per-stage breakdown (from the pipeline's status callbacks, in-process, warm) shows
where the rest of the time goes. The push skip of an unchanged file on the device side
(re-hashing it there) belongs to the device layer; its share is the `deploying` stage.

The loopback phone is tests/support/loopback_adb.py behind the real adb server; it runs
what it is sent on this machine, so it gets the host runner.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ENSEMBLE = f"{REPO / 'tests' / 'data' / 'models' / 'digits_ensemble.py'}:build"
ROUNDS = 5
COLD_ROUNDS = 2
ONE_SAMPLE = ("-n", "1", "--warmup", "0")
# The first word of each status the pipeline reports -> the stage it starts. Nothing is
# reported between the runner's last execution and the result: "execute+verify" holds the
# executions, the pulls, the comparison and the size verdict.
_STAGE_NAMES = {
    "building": "build", "staging": "stage", "preparing": "runner", "checking": "preflight",
    "waiting": "lock", "deploying": "deploy", "running": "execute+verify",
}  # fmt: skip


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # As a user runs it: compiled bytecode cached beside the sources.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _run(args: Sequence[str], result: Path) -> tuple[float, dict[str, Any]]:
    """One `etdeploy run` in a fresh process: its wall time and its result document."""
    command = [sys.executable, "-m", "etdeploy", "run", *args, "--json", str(result)]
    started = time.perf_counter()
    done = subprocess.run(command, env=_env(), cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}"
        )
    return elapsed, json.loads(result.read_text())


def _runner_seconds(doc: dict[str, Any]) -> float:
    """What the runner itself reported for its timed sample: load plus every execution."""
    latency = doc["latency_ms"]
    return ((latency.get("load") or 0.0) + sum(latency.get("iterations") or ())) / 1000


def _sample_of(model: str, folder: Path) -> str:
    """The first of a model's own samples (the build manifest records them), as a file
    of its own: one --inputs FILE."""
    import numpy as np

    from etdeploy.builder import BuildOptions, build
    from etdeploy.dataset import load_labelled

    manifest = build(model, BuildOptions()).manifest
    first = Path(manifest.samples[0])
    if first.is_dir():
        return str(sorted(first.iterdir())[0])
    metas = [value.to_json() for value in manifest.methods[0].inputs]
    sample = load_labelled([first], metas, None).samples[0]
    path = folder / f"{Path(model).stem.split(':')[0]}-sample.npy"
    np.save(path, sample.arrays[0])
    return str(path)


def _stages(model: str, device: Any, **job: Any) -> dict[str, float]:
    """Seconds per pipeline stage of one warm in-process run (status callback times)."""
    from etdeploy.pipeline import RunContext, RunJob, run_job

    marks: list[tuple[str, float]] = []

    def status(text: str) -> None:
        word = text.split(" ")[0]
        marks.append((_STAGE_NAMES.get(word, word), time.perf_counter()))

    started = time.perf_counter()
    run_job(RunJob(model=model, **job), device, RunContext(status=status))
    marks.append(("end", time.perf_counter()))
    out: dict[str, float] = {}
    for (name, at), (_, end) in itertools.pairwise(marks):
        out[name] = out.get(name, 0.0) + end - at
    out["total"] = time.perf_counter() - started
    return out


def _side_by_side(
    label: str, device_args: Sequence[str], tmp: Path, samples: dict[str, str]
) -> None:
    cases = {
        "digits": ["digits"],
        "ensemble (261 MB in the .pte)": [ENSEMBLE],
        "ensemble (21 KB .pte + 261 MB .ptd)": [ENSEMBLE, "--external-weights"],
    }
    for flags_label, flags in (("as typed", ()), ("one sample, -n 1", ONE_SAMPLE)):
        walls: dict[str, list[float]] = {name: [] for name in cases}
        runner: dict[str, list[float]] = {name: [] for name in cases}
        for round_ in range(ROUNDS + 1):  # round 0 warms everything and is not counted
            for name, args in cases.items():
                model = args[0]
                extra = ["--inputs", samples[model]] if flags else []
                elapsed, doc = _run(
                    [*args, *device_args, *flags, *extra], tmp / f"{label}-{round_}.json"
                )
                if doc["status"] != "passed":
                    raise RuntimeError(f"{name} on {label} did not pass: {doc['verdict']}")
                if round_:
                    walls[name].append(elapsed)
                    runner[name].append(_runner_seconds(doc))
                    if doc["deploy"]["bytes_sent"]:
                        raise RuntimeError(f"a warm run of {name} sent {doc['deploy']}")
        base = statistics.median(walls["digits"])
        print(f"   {label}, {flags_label}: second runs, median of {ROUNDS}")
        for name in cases:
            wall = statistics.median(walls[name])
            print(
                f"     {name:36s} {wall:6.2f} s  ratio {wall / base:4.2f}x  "
                f"(runner's own load + executions {statistics.median(runner[name]):6.3f} s)"
            )


def main() -> None:
    from etdeploy.builder import BuildOptions, build
    from etdeploy.devices.local import LocalDevice
    from etdeploy.runner_build import ensure_runner
    from tests.support.adb_server import adb_testbed
    from tests.support.device_config import write_config

    runner = ensure_runner("host")
    for options in (BuildOptions(), BuildOptions(external_weights=True)):
        started = time.perf_counter()
        built = build(ENSEMBLE, options)
        how = "cached" if built.cached else f"built in {time.perf_counter() - started:.0f} s"
        data = built.data.stat().st_size if built.data else 0
        print(
            f"   digits_ensemble{' --external-weights' if options.external_weights else ''}: "
            f".pte {built.pte.stat().st_size / 1e6:.3f} MB, .ptd {data / 1e6:.1f} MB ({how})"
        )
    with tempfile.TemporaryDirectory(prefix="bench-warm-run-") as tmp_text:
        tmp = Path(tmp_text)
        samples = {"digits": _sample_of("digits", tmp), ENSEMBLE: _sample_of(ENSEMBLE, tmp)}
        with adb_testbed(tmp / "bed", ["pixel"]) as bed:
            config = write_config(
                tmp / "etdeploy.toml",
                {
                    "here": {"transport": "local", "workdir": str(tmp / "local-device")},
                    "pixel8": {
                        "serial": bed.serial("pixel"),
                        "adb_port": bed.server.port,
                        "runner": str(runner.directory),
                    },
                },
            )
            for label, device in (("local", "here"), ("loopback phone", "pixel8")):
                _side_by_side(label, ["--device", device, "--config", str(config)], tmp, samples)

        # The side by side's own local device, warm for minutes: a file pushed within
        # the 2 s racy window of its hash is hashed again (etdeploy.digests), which a
        # fresh device would show as deploy time no second run pays.
        device = LocalDevice(workdir=tmp / "local-device")
        print("   where a warm local run's time goes (in-process, seconds per stage):")
        for name, model, job in (
            ("digits", "digits", {}),
            ("ensemble", ENSEMBLE, {}),
            ("ensemble --external-weights", ENSEMBLE, {"external_weights": True}),
        ):
            _stages(model, device, **job)  # warms this device's files
            stages = _stages(model, device, **job)
            print(f"     {name:28s} " + "  ".join(f"{k} {v:.3f}" for k, v in stages.items()))

        warm = [
            _run(["digits", "--device", "local"], tmp / f"warm-{i}.json")[0]
            for i in range(ROUNDS + 1)
        ][1:]
        cold = [
            _run(["digits", "--device", "local", "--no-cache"], tmp / f"cold-{i}.json")[0]
            for i in range(COLD_ROUNDS)
        ]
    warm_s, cold_s = statistics.median(warm), statistics.median(cold)
    print(f"   run digits: cold rebuild (--no-cache) {cold_s:6.2f} s (median of {COLD_ROUNDS})")
    print(f"               warm second run           {warm_s:6.2f} s (median of {ROUNDS})")
    print(f"   ratio cold/warm: {cold_s / warm_s:.1f}x (goal: 20x)")


if __name__ == "__main__":
    main()
