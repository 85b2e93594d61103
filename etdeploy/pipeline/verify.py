"""verify: the device's outputs against the references, stage by stage, and the
program against the store-size limits.

The error budget follows the chain float eager -> quantized eager -> host
runtime -> device, each stage judged by the rule that fits it (etdeploy.verify):
for a quantized build, what quantization costs against the float model (the
accuracy budget), then the device against the quantized program in steps of
each output's scale; with --host-check the host runtime in between. A float
build has fewer stages. A check failed when a stage broke its limit or the file
will not ship.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from etdeploy import verify as metrics
from etdeploy.config import Config
from etdeploy.pipeline.job import RunJob
from etdeploy.pipeline.task import task_accuracy
from etdeploy.program import Program
from etdeploy.results.result import HostCheck, SizeSummary, Thresholds, Verdict
from etdeploy.results.result_accuracy import TaskAccuracy
from etdeploy.staged import Staged


@dataclass(frozen=True)
class Judged:
    verdict: Verdict
    host_check: HostCheck | None
    size: SizeSummary
    warnings: tuple[str, ...]
    # With labelled samples: the task's metric on the device beside eager, and its gate.
    accuracy: TaskAccuracy | None = None

    @property
    def passed(self) -> bool:
        task_ok = self.accuracy is None or self.accuracy.passed
        return self.verdict.passed and self.size.passed and task_ok


def thresholds_for(job: RunJob) -> Thresholds:
    """The job's limits over etdeploy.verify's defaults."""
    d = metrics.DEFAULT_THRESHOLDS

    def pick(value: float | None, default: float) -> float:
        return default if value is None else float(value)

    return Thresholds(
        atol=pick(job.atol, d.atol),
        rtol=pick(job.rtol, d.rtol),
        min_sqnr_db=pick(job.min_sqnr_db, d.min_sqnr_db),
        min_top1=pick(job.min_top1, d.min_top1),
        min_cosine=pick(job.min_cosine, d.min_cosine),
        max_abs=job.max_abs_error,
        quant_steps=pick(job.quant_steps, d.quant_steps),
        quant_rtol=d.quant_rtol,
    )


def tolerance_for(job: RunJob, program: Program) -> metrics.Tolerance:
    t = thresholds_for(job)
    return metrics.Tolerance(
        atol=t.atol,
        rtol=t.rtol,
        min_sqnr_db=t.min_sqnr_db,
        min_top1=t.min_top1,
        # A .pte built elsewhere has no manifest: then --quantize says what it is.
        quantized=is_quantized(job, program),
    )


def is_quantized(job: RunJob, program: Program) -> bool:
    return (program.quantization or job.quantize) is not None


def judge(
    job: RunJob,
    program: Program,
    staged: Staged,
    outputs: Sequence[Sequence[np.ndarray]],
    *,
    host_outputs: Sequence[Sequence[np.ndarray]] | None = None,
    size_config: Config | None = None,
    job_id: str = "",
    size: SizeSummary | None = None,
) -> Judged:
    """The verdicts of one run. `size`: the store-size verdict when the caller has it
    already (size_verdict, which needs nothing the device returns), else computed here."""
    thresholds = thresholds_for(job)
    names = program.output_names
    declared = {**program.declared_kinds, **job.declared_kinds()}  # checked at staging
    shapes = [r.shape for r in staged.references[0]] if staged.references else []
    kinds = metrics.output_kinds(names, shapes, declared) if len(shapes) == len(names) else ()

    measured = metrics.Measurements()

    def compare(
        got: Sequence[Sequence[np.ndarray]], want: Sequence[Sequence[np.ndarray]]
    ) -> Verdict:
        return metrics.verify(
            got,
            want,
            staged.sample_names,
            names,
            tolerance_for(job, program),
            on_noise=staged.on_noise,
            measured=measured,
        )

    end_to_end = compare(outputs, staged.references)
    host = None
    if host_outputs is not None:
        host = HostCheck(
            device_vs_host=compare(outputs, host_outputs),
            host_vs_reference=compare(host_outputs, staged.references),
        )
    reference = "float eager" if staged.reference_kind == "eager" else "reference file"
    # A .pte built elsewhere has no manifest to say its outputs' grids: the
    # quantized program derived from MODEL does.
    steps = (
        list(staged.quantized_steps) if staged.quantized_steps is not None else program.output_steps
    )
    stages = [
        metrics.judge_stage(c, staged.sample_names, kinds, thresholds, steps, measured)
        for c in budget_chain(job, program, staged, outputs, host_outputs, reference)
    ]
    verdict = metrics.budget_verdict(stages, end_to_end, kinds, thresholds, reference)
    if staged.quantized is not None:
        derived = staged.quantized_steps is not None
        verdict = replace(
            verdict,
            quantized_reference=staged.quantized_source,
            reason=verdict.reason
            + (f" (quantized reference: {staged.quantized_source})" if derived else ""),
        )
    warnings = []
    if is_quantized(job, program) and job.atol is not None:
        warnings.append(
            "--atol is not used for a quantized build; it is judged in quantization steps and "
            "by the accuracy budget (SQNR, top-1)"
        )
    guessed = [k for k in kinds if not k.declared]
    if guessed:
        warnings.append(
            "output kind guessed from the shape for "
            + ", ".join(f"{k.name} ({k.kind})" for k in guessed)
            + ": its kind-specific metrics are reported, not required; declare it with "
            "--output-kind NAME=KIND or ModelSpec.output_kinds"
        )
    size = size or size_verdict(program, size_config)
    task = task_accuracy(job, program, staged, outputs, job_id or "run")
    return Judged(verdict, host, size, tuple(warnings), task)


def budget_chain(
    job: RunJob,
    program: Program,
    staged: Staged,
    outputs: Sequence[Sequence[np.ndarray]],
    host_outputs: Sequence[Sequence[np.ndarray]] | None,
    reference: str,
) -> list[metrics.Comparison]:
    """The stages this run can measure, in the chain's order."""
    chain: list[metrics.Comparison] = []
    quantized = is_quantized(job, program)
    if quantized and staged.quantized is not None:
        chain.append(
            metrics.Comparison(
                "quantization", f"quantized eager vs {reference}", staged.quantized,
                staged.references, "accuracy",
            )
        )  # fmt: skip
        target, target_name, rule = staged.quantized, "quantized eager", "steps"
    elif quantized:
        # No quantized program to hold it to: the float model by the accuracy budget.
        target, target_name, rule = staged.references, reference, "accuracy"
    else:
        target, target_name, rule = staged.references, reference, "allclose"
    if host_outputs is not None:
        chain.append(
            metrics.Comparison(
                "lowering", f"host runtime vs {target_name}", host_outputs, target, rule
            )
        )
        # Both ran the same program: a quantized one to the step, a float one to fp32.
        same_program = "steps" if quantized else "allclose"
        chain.append(
            metrics.Comparison(
                "device", "device vs host runtime", outputs, host_outputs, same_program
            )
        )
    else:
        chain.append(
            metrics.Comparison("device", f"device vs {target_name}", outputs, target, rule)
        )
    return chain


def size_verdict(program: Program, config: Config | None) -> SizeSummary:
    """The store-size verdict for the delivery set in etdeploy.toml (sizecheck), of the
    .pte and its .ptd together: measured once per content, then read back by its sha256
    (known since build). The verdict itself is kept too, by everything it depends on
    (size_verdict_key): a warm run reads it without importing sizecheck or the .pte
    reader (~0.015 s of every run)."""
    from etdeploy.atomic import keep_json, read_json_object
    from etdeploy.paths import cache_dir

    cached = cache_dir("size-verdicts") / f"{size_verdict_key(program, config)}.json"
    kept = read_json_object(cached)
    if kept is not None:
        with contextlib.suppress(KeyError, TypeError, ValueError):  # else worked out again
            return SizeSummary.from_json(kept)
    from etdeploy.sizecheck import summary_for_result

    data = program.data
    document = summary_for_result(
        program.pte, config, sha256=program.sha256,
        data=data.path if data else None, data_sha256=data.sha256 if data else None,
    )  # fmt: skip
    keep_json(cached, dict(document))
    return SizeSummary.from_json(document)


def size_verdict_key(program: Program, config: Config | None) -> str:
    """What a size verdict depends on: the files (where they are and their bytes, by
    sha256), etdeploy.toml's [sizecheck] and [limits] and where it is, and the code
    that judges (etdeploy's version, and each sizecheck module's size and mtime, so an
    edited source tree judges again)."""
    import hashlib
    import json

    import etdeploy

    data = program.data
    parts = [
        etdeploy.__version__,
        _sizecheck_stamp(),
        str(program.pte), program.sha256,
        str(data.path) if data else None, data.sha256 if data else None,
        str(config.path) if config and config.path else None,
        config.sizecheck if config else None,
        config.limits if config else None,
    ]  # fmt: skip
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _sizecheck_stamp() -> list[tuple[str, int, int]]:
    """Each module of etdeploy.sizecheck (its limits table among them) by name, size
    and mtime, found without importing the package."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("etdeploy.sizecheck")
    if spec is None or not spec.submodule_search_locations:
        return []
    with os.scandir(next(iter(spec.submodule_search_locations))) as entries:
        return sorted(
            (e.name, e.stat().st_size, e.stat().st_mtime_ns)
            for e in entries
            if e.name.endswith(".py")
        )
