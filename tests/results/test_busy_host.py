"""A one-file baseline on a busy host, for real: the same program run twice, the second
time while processes burn every core, does not regress (its CPU time did not grow;
the baseline says the host was busy), while a heavier program under the same name,
run under the same load, does.

The programs are real lowerings (XNNPACK) of one model file whose depth changes
between the runs, so the job's key stays the same; the runs are real `etdeploy run`
calls on this machine with the real runner, on one thread (so a run's wall time is
its CPU time plus its waiting: the test can tell that the load took); the load is
real processes, started and stopped here. With the thread pool (2 threads here) the
CPU time held as well under load (9.62 -> 9.60 ms, measured 2026-12-05): XNNPACK's
workers did not spin it up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.results import Regression, compare_to_baseline
from etdeploy.results.baseline import BUSY_HOST, CPU_GROWTH
from etdeploy.results.result import RunResult

# serial: its burners take every core, which would slow the tests beside it.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

WIDTH, BATCH = 256, 1024
LIGHT, HEAVY = 6, 18  # layers: the planted regression is three times the work
# Burning processes per core: the runner gets about a quarter of a core's time.
BURNERS_PER_CORE = 3

MODEL = """\
import torch

WIDTH, BATCH, LAYERS = {width}, {batch}, {layers}


def build():
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).eval(), (torch.zeros(BATCH, WIDTH),)
"""


@contextmanager
def busy_host() -> Iterator[None]:
    """Every core kept busy by processes that do nothing but spin."""
    # Each in a session of its own, as other users' work is: with autogroup scheduling
    # (Linux's sched_autogroup, on here) CPU time is shared between sessions first, and
    # the runner, which etdeploy starts in its own session, would otherwise get a whole
    # core against any number of burners in the test's session.
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(BURNERS_PER_CORE * (os.cpu_count() or 1))
    ]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()


def run(folder: Path, layers: int, name: str) -> RunResult:
    """`etdeploy run` of the model file at this depth (same path, same job key)."""
    (folder / "model.py").write_text(MODEL.format(width=WIDTH, batch=BATCH, layers=layers))
    out = folder / f"{name}.json"
    done = CliRunner().invoke(
        app,
        ["run", f"{folder / 'model.py'}:build", "--device", "local", "--inputs",
         str(folder / "sample.npy"), "-n", "30", "--warmup", "3", "--cpu-threads", "1",
         "--json", str(out)],
        catch_exceptions=False,
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    return RunResult.from_json(json.loads(out.read_text()))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunResult]:
    folder = tmp_path_factory.mktemp("busy")
    # A real sample: a smooth ramp, not noise.
    ramp = np.linspace(-1.0, 1.0, BATCH * WIDTH, dtype=np.float32).reshape(BATCH, WIDTH)
    np.save(folder / "sample.npy", np.sin(3.0 * ramp))
    found = {"quiet": run(folder, LIGHT, "quiet")}
    with busy_host():
        found["busy"] = run(folder, LIGHT, "busy")
        found["heavier"] = run(folder, HEAVY, "heavier")
    return found


def medians(result: RunResult) -> tuple[float, float]:
    latency = result.latency_ms
    assert latency is not None and latency.median is not None
    assert latency.cpu_median is not None, "the runner measured no CPU time"
    return latency.median, latency.cpu_median


def test_the_same_program_on_a_busy_host_does_not_regress_and_says_why(
    runs: dict[str, RunResult],
) -> None:
    wall_quiet, cpu_quiet = medians(runs["quiet"])
    wall_busy, cpu_busy = medians(runs["busy"])
    print(f"quiet: wall {wall_quiet:.3f} ms, CPU {cpu_quiet:.3f} ms; "
          f"busy: wall {wall_busy:.3f} ms, CPU {cpu_busy:.3f} ms")  # fmt: skip
    # One thread: its wall time is its CPU time plus the time it waited for a core. The
    # "quiet" run may be slowed by other processes of this shared machine too; the busy
    # one must have waited at least a third of its time, or nothing was tested.
    assert wall_busy > 1.5 * cpu_busy, "the load did not take: nothing was tested"
    found = compare_to_baseline([runs["busy"]], [runs["quiet"]])
    assert not [r for r in found if r.is_regression], [r.line for r in found]
    # Where the wall time grew past the threshold, the floor and both runs' spread, the
    # report says why it does not fail (when the busy run's own spread covers it, it
    # is noise and nothing is said).
    for note in found:
        assert note.kind == "latency" and note.alarm == BUSY_HOST, note
        assert "the host was busy" in note.message and note.to_json()["alarm"] == BUSY_HOST
    assert cpu_busy <= cpu_quiet * (1 + CPU_GROWTH)


def test_a_heavier_program_under_the_same_load_regresses(runs: dict[str, RunResult]) -> None:
    wall_quiet, cpu_quiet = medians(runs["quiet"])
    wall_heavy, cpu_heavy = medians(runs["heavier"])
    print(f"heavier, busy: wall {wall_heavy:.3f} ms, CPU {cpu_heavy:.3f} ms "
          f"(quiet: {wall_quiet:.3f}, {cpu_quiet:.3f})")  # fmt: skip
    # A deeper model also plans more memory (its own regression): latency is the one here.
    (found,) = latency_of(compare_to_baseline([runs["heavier"]], [runs["quiet"]]))
    assert found.is_regression and found.alarm is None, found
    assert "CPU time" in found.message
    # Against the busy run of the light program (both under load) as well.
    (against_busy,) = latency_of(compare_to_baseline([runs["heavier"]], [runs["busy"]]))
    assert against_busy.is_regression


def latency_of(found: list[Regression]) -> list[Regression]:
    return [r for r in found if r.kind == "latency"]
