"""Per-iteration latency: etdeploy's C++ runner vs executorch.runtime in Python.

The same XNNPACK .pte, the same input, each timed over N executions after the
same warm-up; the figure is the median iteration. The runner times
Method::execute alone (its --result_json); the Python side times
`method.execute([x])` as a user would call it, so the ratio is what the Python
binding costs on top of the runtime (argument and output conversion included).
Both use their default thread pool. The runner build comes from the cache
(built first if missing; that time is printed separately).
"""

from __future__ import annotations

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


def main() -> None:
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
