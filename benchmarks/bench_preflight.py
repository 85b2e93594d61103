"""What preflight costs a warm run: `run_job` on the local device with the
runner's description cached, against the same run with the preflight stage
replaced by nothing (what a run cost before it existed); interleaved rounds,
median of each. Also the stage alone, warm (the cached description and the
program read torch-free) and cold (the runner asked with --describe).

The run is the shortest a user makes (one timed execution, no warm-up), so
preflight's share is as large as it gets; longer runs dilute it. Two programs:
digits lowered to XNNPACK (one delegate, no operator outside it) and digits
without a delegate (every operator a kernel call to look up). The build, the
reference and the runner come from the etdeploy cache (built on the first
round if missing; that round is not counted).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROUNDS = 15
STAGE_REPEATS = 50


def _timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _measure(backend: str, device: Any, bundle: Any) -> None:
    import etdeploy.preflight as stage
    from etdeploy.builder import BuildOptions, build
    from etdeploy.pipeline import RunJob, run_job
    from etdeploy.preflight.describe_runner import _cache_path

    real_preflight = stage.preflight

    def without_preflight(device: Any, bundle: Any, pte: Path, *_: Any, **__: Any) -> Any:
        return stage.PreflightReport(status="skipped", device=device.name, notes=("benchmark",))

    job = RunJob(model="digits", backend=backend, iterations=1, warmup=0)
    pte = build("digits", BuildOptions(backend=backend)).pte
    run_job(job, device)  # warms every cache: build, reference, files, description
    with_stage: list[float] = []
    without: list[float] = []
    for _ in range(ROUNDS):
        with_stage.append(_timed(lambda: run_job(job, device)))
        stage.preflight = without_preflight
        try:
            without.append(_timed(lambda: run_job(job, device)))
        finally:
            stage.preflight = real_preflight
    warm = statistics.median(
        _timed(lambda: stage.check(device, bundle, pte)) for _ in range(STAGE_REPEATS)
    )
    _cache_path(bundle).unlink(missing_ok=True)
    cold = _timed(lambda: stage.check(device, bundle, pte))
    ops = len(stage.program_needs(pte).operators)
    run_with, run_without = statistics.median(with_stage), statistics.median(without)
    print(f"   digits/{backend} ({ops} operator(s) outside delegates), median of {ROUNDS}:")
    print(f"     warm run with preflight    {run_with * 1000:8.1f} ms")
    print(f"     warm run without it        {run_without * 1000:8.1f} ms")
    print(
        f"     ratio with/without: {run_with / run_without:.3f}x (side by side; the run's own "
        f"spread is {statistics.pstdev(without) / run_without:.1%})"
    )
    print(f"     the stage alone: warm (cached description) {warm * 1000:.2f} ms "
          f"= {warm / run_without:.1%} of the run; cold (runner asked) {cold * 1000:.1f} ms")  # fmt: skip


def main() -> None:
    from etdeploy.devices.local import LocalDevice
    from etdeploy.runner_build import ensure_runner

    bundle = ensure_runner()
    with tempfile.TemporaryDirectory(prefix="bench-preflight-") as tmp:
        device = LocalDevice(workdir=Path(tmp) / "device")
        for backend in ("xnnpack", "portable"):
            _measure(backend, device, bundle)


if __name__ == "__main__":
    main()
