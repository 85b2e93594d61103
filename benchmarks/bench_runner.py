"""Per-iteration latency: etdeploy's C++ runner vs executorch.runtime in Python;
and the overhead of a warm `etdeploy run --device local` over the bare runner.

The same XNNPACK .pte, the same input, each timed over N executions after the
same warm-up; the figure is the median iteration. The runner times
Method::execute alone (its --result_json); the Python side times
`method.execute([x])` as a user would call it, so the ratio is what the Python
binding costs on top of the runtime (argument and output conversion included).
Both use their default thread pool. The runner build comes from the cache
(built first if missing; that time is printed separately).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

WARMUP = 10
ITERATIONS = 100


def _build_program(directory: Path) -> tuple[Path, Path, Any]:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    class ConvNet(torch.nn.Module):
        """A small image classifier: four conv blocks, pooled, one linear layer."""

        def __init__(self) -> None:
            super().__init__()
            layers: list[torch.nn.Module] = []
            channels = 3
            for width in (16, 32, 64, 64):
                layers += [
                    torch.nn.Conv2d(channels, width, 3, stride=2, padding=1),
                    torch.nn.ReLU(),
                ]
                channels = width
            self.features = torch.nn.Sequential(*layers)
            self.head = torch.nn.Linear(channels, 10)

        def forward(self, x: Any) -> Any:
            return self.head(self.features(x).mean(dim=(2, 3)))

    torch.manual_seed(0)
    model = ConvNet().eval()
    grid = torch.linspace(-1.0, 1.0, 96)
    image = (torch.sin(grid[:, None] * 5) * torch.cos(grid[None, :] * 3)).expand(1, 3, 96, 96)
    image = image.contiguous()
    exported = torch.export.export(model, (image,))
    program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    pte = directory / "convnet.pte"
    pte.write_bytes(program.to_executorch().buffer)
    raw = directory / "input-0.bin"
    raw.write_bytes(image.numpy().tobytes())
    return pte, raw, image


def _runner_median(pte: Path, raw: Path, directory: Path) -> tuple[float, float]:
    from etdeploy.runner import RunnerInvocation, parse_result_json, runner_argv
    from etdeploy.runner_build import ensure_runner

    started = time.perf_counter()
    bundle = ensure_runner()
    how = "built" if bundle.fresh else "cached"
    print(f"   runner bundle {how} in {time.perf_counter() - started:.1f} s: {bundle.directory}")
    invocation = RunnerInvocation(
        model_path=str(pte),
        input_paths=(str(raw),),
        num_executions=ITERATIONS,
        warmup=WARMUP,
        result_json_path=str(directory / "result.json"),
    )
    subprocess.run(runner_argv(bundle.executable_path, invocation), check=True, capture_output=True)
    result = parse_result_json((directory / "result.json").read_text())
    assert result.median_ms is not None and result.load_ms is not None
    return result.median_ms, result.load_ms


def _python_median(pte: Path, image: Any) -> tuple[float, float]:
    from executorch.runtime import Runtime

    runtime = Runtime.get()
    started = time.perf_counter()
    method = runtime.load_program(pte).load_method("forward")
    load_ms = (time.perf_counter() - started) * 1000
    for _ in range(WARMUP):
        method.execute([image])
    times = []
    for _ in range(ITERATIONS):
        begin = time.perf_counter()
        method.execute([image])
        times.append((time.perf_counter() - begin) * 1000)
    return statistics.median(times), load_ms


def _run_overhead(directory: Path) -> tuple[float, float, int]:
    """A warm `etdeploy run digits --device local` (build, reference and files all
    cached) against the same runner commands it issued, replayed bare. Both are
    wall-clock for the whole thing, best of three."""
    import json
    import shlex
    import sys

    result_path = directory / "run.json"
    command = [sys.executable, "-m", "etdeploy", "run", "digits", "--device", "local",
               "--keep", "--json", str(result_path)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True)  # warms every cache
    runs = []
    for _ in range(3):
        begin = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        runs.append(time.perf_counter() - begin)
    logs = json.loads(result_path.read_text())["logs"]
    replay = [shlex.split(log.splitlines()[0].removeprefix("$ ")) for log in logs]
    bare = []
    for _ in range(3):
        begin = time.perf_counter()
        for argv in replay:
            subprocess.run(argv, check=True, capture_output=True)
        bare.append(time.perf_counter() - begin)
    # --keep left each run's job dir behind; they are ours to remove.
    for argv in replay:
        for arg in argv:
            if arg.startswith("--output_file="):
                shutil.rmtree(Path(arg.removeprefix("--output_file=")).parent, ignore_errors=True)
    return min(runs), min(bare), len(replay)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        etdeploy_s, bare_s, invocations = _run_overhead(Path(tmp))
    print(f"   warm `etdeploy run digits --device local`: {etdeploy_s:.3f} s; the same {invocations} "
          f"runner commands bare: {bare_s:.3f} s")  # fmt: skip
    print(
        f"   ratio etdeploy/bare: {etdeploy_s / bare_s:.1f}x ({etdeploy_s - bare_s:.3f} s of overhead)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        pte, raw, image = _build_program(directory)
        runner_ms, runner_load = _runner_median(pte, raw, directory)
        python_ms, python_load = _python_median(pte, image)
    print(f"   model: 4-block ConvNet, 1x3x96x96, XNNPACK; {WARMUP} warm-up, {ITERATIONS} timed")
    print(f"   etdeploy runner     median {runner_ms:8.4f} ms/iter   load {runner_load:7.2f} ms")
    print(f"   executorch.runtime  median {python_ms:8.4f} ms/iter   load {python_load:7.2f} ms")
    print(f"   ratio python/runner: {python_ms / runner_ms:.2f}x per iteration")


if __name__ == "__main__":
    main()
