"""The farm's memory gate against a baseline: a planted regression fails it and
names the part that grew; the same correct build run again passes.

The regression is real: one model (a wide MLP over batches of the scikit-learn
digits, tests' real data) lowered twice the same way, once with ExecuTorch's
default memory plan (greedy: tensors whose lifetimes do not overlap share
memory) and once with its naive plan (MemoryPlanningPass with the `naive`
algorithm: every tensor its own bytes). Each .pte is run by the real pipeline on
this machine's runner; the results go through `etdeploy farm merge --baseline`,
the gate a nightly farm uses.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etdeploy.devices.local import LocalDevice
from etdeploy.pipeline import RunJob, run_job
from etdeploy.results.baseline import compare_to_baseline
from etdeploy.results.result import RunResult
from tests.cli.conftest import etdeploy

pytestmark = pytest.mark.slow

WIDE_MLP = """
import torch
from torch import nn


def build():
    from etdeploy.model import ModelSpec

    torch.manual_seed(7)
    layers = [nn.Linear(64, 256), nn.ReLU()]
    for _ in range(6):
        layers += [nn.Linear(256, 256), nn.ReLU()]
    layers.append(nn.Linear(256, 10))
    return ModelSpec(module=nn.Sequential(*layers).eval(),
                     example_inputs=(torch.zeros(32, 64),), input_names=["images"])
"""


def lower(model: Any, example: tuple[Any, ...], naive: bool, out: Path) -> Path:
    """The portable program (every activation memory-planned), greedy or naive."""
    import torch
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.memory_planning import MemoryPlanningAlgorithmSuite
    from executorch.exir.memory_planning import naive as naive_plan
    from executorch.exir.passes import MemoryPlanningPass

    edge = to_edge_transform_and_lower(torch.export.export(model, example))
    plan = (
        MemoryPlanningPass(memory_planning_algo=MemoryPlanningAlgorithmSuite([naive_plan]))
        if naive
        else MemoryPlanningPass()
    )
    out.write_bytes(edge.to_executorch(ExecutorchBackendConfig(memory_planning_pass=plan)).buffer)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunResult]:
    import importlib.util

    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("wide")
    source = root / "wide_mlp.py"
    source.write_text(WIDE_MLP)
    spec = importlib.util.spec_from_file_location("wide_mlp", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built = module.build()
    (root / "samples").mkdir()
    images = (load_digits().images.reshape(-1, 64) / 16.0).astype(np.float32)
    for i in range(2):
        np.save(root / "samples" / f"batch{i}.npy", images[32 * i : 32 * (i + 1)])
    ptes = {
        name: lower(built.module, built.example_inputs, name == "naive", root / f"{name}.pte")
        for name in ("greedy", "naive")
    }
    device = LocalDevice(workdir=root / "device")
    model = f"{source}:build"

    def run(pte: Path) -> RunResult:
        job = RunJob(model=model, pte=pte, inputs=(str(root / "samples"),), iterations=3, warmup=1)
        return run_job(job, device)

    return {"baseline": run(ptes["greedy"]), "again": run(ptes["greedy"]),
            "naive": run(ptes["naive"])}  # fmt: skip


def test_the_naive_plan_costs_more_planned_memory_and_nothing_else(
    runs: dict[str, RunResult],
) -> None:
    greedy, naive = runs["baseline"].memory, runs["naive"].memory
    assert greedy is not None and naive is not None
    assert runs["baseline"].passed and runs["naive"].passed  # the same numbers either way
    assert sum(naive.buffers) > 3 * sum(greedy.buffers)
    for phase in naive.account:
        assert phase.part_bytes("planned") == sum(naive.buffers)


def write(result: RunResult, path: Path, timings: RunResult) -> Path:
    """The result as a farm's results log, with `timings`' latency: on this shared
    machine a run's median moves past the latency gate now and then, which has its
    own tests (tests/report/test_baseline.py); here only memory is judged."""
    path.write_text(json.dumps(replace(result, latency_ms=timings.latency_ms).to_json()) + "\n")
    return path


def memory_regressions(current: RunResult, baseline: RunResult, **growth: float) -> list[Any]:
    found = compare_to_baseline([current], [baseline], **growth)
    return [r for r in found if r.kind == "memory"]


def test_the_farm_gate_fails_the_planted_regression_naming_the_part(
    runs: dict[str, RunResult], tmp_path: Path
) -> None:
    baseline = write(runs["baseline"], tmp_path / "baseline.jsonl", runs["baseline"])
    current = write(runs["naive"], tmp_path / "naive.jsonl", runs["baseline"])
    done = etdeploy("farm", "merge", current, "--out", tmp_path / "merged", "--baseline", baseline,
                    cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("regression:")]
    assert "memory, " in line and ": planned buffers " in line and "more than +10%" in line
    (regression,) = memory_regressions(runs["naive"], runs["baseline"])
    assert regression.kind == "memory" and regression.part == "planned"
    assert regression.current == float(sum(runs["naive"].memory.buffers))  # type: ignore[union-attr]


def test_the_correct_build_run_again_passes_the_gate(
    runs: dict[str, RunResult], tmp_path: Path
) -> None:
    baseline = write(runs["baseline"], tmp_path / "baseline.jsonl", runs["baseline"])
    current = write(runs["again"], tmp_path / "again.jsonl", runs["baseline"])
    done = etdeploy("farm", "merge", current, "--out", tmp_path / "merged", "--baseline", baseline,
                    cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "regression" not in done.stdout
    assert memory_regressions(runs["again"], runs["baseline"]) == []


def test_a_share_set_higher_than_the_growth_lets_it_pass(runs: dict[str, RunResult]) -> None:
    greedy, naive = runs["baseline"].memory, runs["naive"].memory
    assert greedy is not None and naive is not None
    grown = sum(naive.buffers) / sum(greedy.buffers) - 1
    assert memory_regressions(runs["naive"], runs["baseline"], memory_growth=grown + 0.01) == []
