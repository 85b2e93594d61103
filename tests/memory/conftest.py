"""The real runner's memory readings, taken once per session: the host runner
built from android_harness/ against the installed executorch, run with --memory
on digits (fp32 for XNNPACK, int8 for XNNPACK, fp32 portable) on digits' own
held-out images."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from etdeploy.runner_build import RunnerBundle

Reading = Callable[..., dict[str, Any]]


@pytest.fixture(scope="session")
def host_runner() -> RunnerBundle:
    from etdeploy.runner_build import ensure_runner

    return ensure_runner("host")


@pytest.fixture(scope="session")
def digits_programs() -> dict[str, Path]:
    """digits built by etdeploy (cached): xnnpack, xnnpack+int8, portable."""
    from etdeploy.pipeline import RunJob
    from etdeploy.pipeline.build import build_program
    from etdeploy.pipeline.plan import plan_of

    builds = {
        "xnnpack": ("xnnpack", None),
        "int8": ("xnnpack", "int8"),
        "portable": ("portable", None),
    }
    return {
        name: build_program(
            plan_of(RunJob(model="digits", backend=b, quantize=q)).build, lambda _: None
        ).pte
        for name, (b, q) in builds.items()
    }


@pytest.fixture(scope="session")
def digit_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One of digits' held-out images as the runner's raw input file."""
    from etdeploy.dataset import load_labelled
    from etdeploy.inputs import raw_bytes
    from etdeploy.pipeline import RunJob
    from etdeploy.pipeline.build import build_program
    from etdeploy.pipeline.plan import plan_of

    program = build_program(plan_of(RunJob(model="digits")).build, lambda _: None)
    labelled = load_labelled(program.own_samples, program.input_metas, None)
    sample = labelled.samples[0]
    path = tmp_path_factory.mktemp("digit") / "image.bin"
    path.write_bytes(raw_bytes(sample.arrays[0]))
    return path


@pytest.fixture(scope="session")
def run_runner(
    host_runner: RunnerBundle, digit_image: Path, tmp_path_factory: pytest.TempPathFactory
) -> Reading:
    """The runner on a program with the flags given; its result document."""
    directory = tmp_path_factory.mktemp("runs")
    counter = iter(range(1_000_000))

    def run(pte: Path, *flags: str) -> dict[str, Any]:
        result = directory / f"r{next(counter)}.json"
        subprocess.run(
            [str(host_runner.executable_path), f"--model_path={pte}", f"--inputs={digit_image}",
             f"--result_json={result}", *flags],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        document: dict[str, Any] = json.loads(result.read_text())
        return document

    return run
