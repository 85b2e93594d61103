"""localize's runs of a tapped program: on the device, as the program ran (deployed
the same way, the chosen samples once each), and eagerly through its
ExportedProgram, for the same node's value to judge each tap against."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from etdeploy import numerics as metrics
from etdeploy.builder.tapped import TappedBuild, load_reference
from etdeploy.devices.base import ProgressCallback
from etdeploy.devices.workdir import held_for_job
from etdeploy.digests import sha256_file
from etdeploy.pipeline.deploy import Target, deploy
from etdeploy.pipeline.execute import Timing, execute
from etdeploy.pipeline.job import StatusCallback
from etdeploy.pipeline.plan import LocalizeRequest
from etdeploy.pipeline.references import _cached, reference_key
from etdeploy.pipeline.verify import Judged
from etdeploy.program import Program, describe_program
from etdeploy.results.result_localization import TapTolerance
from etdeploy.scratch import scratch_dir
from etdeploy.staged import Staged

# Per sample, per output of the tapped program (by output index).
Values = list[dict[int, np.ndarray]]


def eager_values(
    tapped: TappedBuild, samples: Sequence[tuple[np.ndarray, ...]], use_cache: bool
) -> Values:
    """Each sample through the tapped ExportedProgram: every output by index,
    cached per (the program's bytes, the inputs) like the other references."""
    path = tapped.reference_program
    key = reference_key(sha256_file(path), samples)[:32]
    table, _ = _cached(
        f"tapped-{key}", lambda: (_run_tapped_eagerly(path, samples), []), use_cache=use_cache
    )
    return [dict(enumerate(row)) for row in table]


def _run_tapped_eagerly(
    path: Path, samples: Sequence[tuple[np.ndarray, ...]]
) -> list[list[np.ndarray]]:
    import torch

    module = load_reference(path)
    rows = []
    with torch.no_grad():
        for sample in samples:
            result = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in sample))
            leaves = _leaves(result)
            rows.append(
                [
                    t.detach().contiguous().numpy()
                    if isinstance(t, torch.Tensor)
                    else np.asarray(t)
                    for t in leaves
                ]
            )
    return rows


def _leaves(value: object) -> list[object]:
    """An exported module's outputs in the order torch's pytree flattens them (tuples,
    lists and dicts in order, dicts by insertion), without its private module."""
    if isinstance(value, tuple | list):
        return [leaf for item in value for leaf in _leaves(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    return [value]


@dataclasses.dataclass(frozen=True)
class LocalizeContext:
    """What running a tapped program on the device, and judging it, needs from the run."""

    request: LocalizeRequest
    target: Target
    program: Program
    staged: Staged
    judged: Judged
    chosen: list[int]
    job_id: str
    say: StatusCallback
    progress: ProgressCallback | None
    tolerance: TapTolerance
    # Whether the lowering or device stages failed (what taps can localise).
    diverged: bool

    @property
    def names(self) -> tuple[str, ...]:
        """The chosen samples' names, the most divergent first."""
        return tuple(self.staged.sample_names[i] for i in self.chosen)

    def run(self, tapped: TappedBuild, eager: Values) -> Values:
        """The tapped program on the device, each chosen sample once: every output
        by index. Deployed like the program itself: content-addressed, so the
        runner and the inputs already there are not sent again."""
        manifest = tapped.manifest
        program = describe_program(tapped.pte, manifest.sha256, manifest.as_build_manifest(), ())
        indices = program.tensor_outputs
        staged = dataclasses.replace(
            self.staged,
            sample_names=self.names,
            samples=tuple(self.staged.samples[i] for i in self.chosen),
            # The tapped program's outputs: what upstream's runner takes its shapes from.
            references=tuple(tuple(eager[k][i] for i in indices) for k in range(len(self.chosen))),
        )
        job_id = f"{self.job_id}-localize"
        device = self.target.device
        # Journaled as a run's own directory: one a killed localization left goes
        # with the next run on the device.
        with (
            held_for_job(device, job_id, keep=self.request.keep),
            scratch_dir("localize") as tmp,
        ):
            deployed = deploy(
                self.target, program, staged, job_id, self.progress,
                verify=self.request.verify_remote,
            )  # fmt: skip
            executed = execute(
                self.target, deployed, program, staged, self.request.execute, Path(tmp),
                Timing(),
            )  # fmt: skip
            return [
                {i: np.array(a) for i, a in zip(indices, row, strict=True)}
                for row in executed.outputs
            ]

    def reproduces(self, tapped: TappedBuild, got: Values, eager: Values) -> bool:
        """Do the tapped program's own outputs fail the check the untapped ones
        failed? Against the float reference for a float build; for a quantized
        one against the tapped quantized program's outputs, to its steps."""
        count = tapped.model_outputs
        mine = [[row[i] for i in range(count)] for row in got]
        if self.staged.quantized is not None:
            want = [[row[i] for i in range(count)] for row in eager]
            rule, measured = "steps", "tapped device vs quantized eager"
        else:
            want = [list(self.staged.references[i]) for i in self.chosen]
            rule, measured = "allclose", "tapped device vs reference"
        verdict = self.judged.verdict
        assert verdict.thresholds is not None
        stage = metrics.judge_stage(
            metrics.Comparison("device", measured, mine, want, rule),
            list(self.names),
            verdict.kinds,
            verdict.thresholds,
            self.program.output_steps,
        )
        return not stage.passed
