"""verify: the device's outputs against the reference, and the program against
the store-size limits.

Per output and sample, the metrics of etdeploy.verify and a verdict; with
--host-check also the host runtime against the reference and the device
against the host, which tells "the lowering changed the numbers" from "the
device differs from this host". A check failed when the numbers diverge or the
file will not ship.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from etdeploy import verify as metrics
from etdeploy.config import Config
from etdeploy.pipeline.build import Program
from etdeploy.pipeline.job import RunJob
from etdeploy.pipeline.stage import Staged
from etdeploy.report.result import HostCheck, SizeSummary, Verdict


@dataclass(frozen=True)
class Judged:
    verdict: Verdict
    host_check: HostCheck | None
    size: SizeSummary
    warnings: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return self.verdict.passed and self.size.passed


def tolerance_for(job: RunJob, program: Program) -> metrics.Tolerance:
    return metrics.Tolerance(
        atol=metrics.FP32_ATOL if job.atol is None else job.atol,
        rtol=metrics.FP32_RTOL if job.rtol is None else job.rtol,
        # A .pte built elsewhere has no manifest: then --quantize says what it is.
        quantized=(program.quantization or job.quantize) is not None,
    )


def judge(
    job: RunJob,
    program: Program,
    staged: Staged,
    outputs: Sequence[Sequence[np.ndarray]],
    host_outputs: Sequence[Sequence[np.ndarray]] | None,
    size_config: Config | None,
) -> Judged:
    tolerance = tolerance_for(job, program)
    names = program.output_names

    def compare(
        got: Sequence[Sequence[np.ndarray]],
        want: Sequence[Sequence[np.ndarray]],
        *,
        noise: bool = False,
    ) -> Verdict:
        return metrics.verify(got, want, staged.sample_names, names, tolerance, on_noise=noise)

    verdict = compare(outputs, staged.references, noise=staged.on_noise)
    host = None
    if host_outputs is not None:
        host = HostCheck(
            device_vs_host=compare(outputs, host_outputs),
            host_vs_reference=compare(host_outputs, staged.references),
        )
    warnings = []
    if program.quantization and job.atol is not None:
        warnings.append("--atol is not used for a quantized build; it is judged by SQNR and top-1")
    return Judged(verdict, host, size_verdict(program.pte, size_config), tuple(warnings))


def size_verdict(pte: Path, config: Config | None) -> SizeSummary:
    """The store-size verdict for the delivery set in etdeploy.toml (sizecheck)."""
    from etdeploy.sizecheck import summary_for_result

    return SizeSummary.from_json(summary_for_result(pte, config))
