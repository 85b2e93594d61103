"""verify: the device's outputs against the references, stage by stage, and the
program against the store-size limits.

The error budget follows the chain float eager -> quantized eager -> host
runtime -> device, each stage judged by the rule that fits it (etdeploy.numerics):
for a quantized build, what quantization costs against the float model (the
accuracy budget), then the device against the quantized program in steps of
each output's scale; with --host-check the host runtime in between. A float
build has fewer stages. A check failed when a stage broke its limit or the file
will not ship.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

import etdeploy
from etdeploy import numerics as metrics
from etdeploy.accuracy import Gate
from etdeploy.atomic import keep_json, read_json_object
from etdeploy.config import Config
from etdeploy.memory.limit import JudgedMemory
from etdeploy.paths import cache_dir
from etdeploy.pipeline.task import task_accuracy
from etdeploy.program import Program
from etdeploy.results.result import HostCheck, SizeSummary, Thresholds, Verdict
from etdeploy.results.result_accuracy import TaskAccuracy
from etdeploy.staged import Staged


@dataclass(frozen=True)
class VerifySettings:
    """What verify takes of a run's settings: the limits over etdeploy.numerics's
    defaults, the output kinds declared, the task's gate, and what the run asked
    for (--quantize says what a .pte built elsewhere is; --atol, given, is warned
    about for a quantized build)."""

    thresholds: Thresholds = metrics.DEFAULT_THRESHOLDS
    declared_kinds: Mapping[str, str] = field(default_factory=dict)
    quantize: str | None = None
    atol_given: bool = False
    gate: Gate = field(default_factory=Gate)
    labels: Path | None = None  # --labels


@dataclass(frozen=True)
class Judged:
    """Every verdict of one run, decided here once: the outputs (the error budget),
    the task's gate, the store size, and the memory limit and shape points."""

    verdict: Verdict
    host_check: HostCheck | None
    size: SizeSummary
    warnings: tuple[str, ...]
    # With labelled samples: the task's metric on the device beside eager, and its gate.
    accuracy: TaskAccuracy | None = None
    memory: JudgedMemory | None = None

    @property
    def passed(self) -> bool:
        task_ok = self.accuracy is None or self.accuracy.passed
        memory_ok = self.memory is None or self.memory.passed
        return self.verdict.passed and self.size.passed and task_ok and memory_ok


def tolerance_for(settings: VerifySettings, program: Program) -> metrics.Tolerance:
    t = settings.thresholds
    return metrics.Tolerance(
        atol=t.atol,
        rtol=t.rtol,
        min_sqnr_db=t.min_sqnr_db,
        min_top1=t.min_top1,
        # A .pte built elsewhere has no manifest: then --quantize says what it is.
        quantized=is_quantized(settings.quantize, program),
    )


def is_quantized(quantize: str | None, program: Program) -> bool:
    """Whether the program is quantized: its manifest says, else --quantize."""
    return (program.quantization or quantize) is not None


def judge(
    settings: VerifySettings,
    program: Program,
    staged: Staged,
    outputs: Sequence[Sequence[np.ndarray]],
    *,
    host_outputs: Sequence[Sequence[np.ndarray]] | None = None,
    size_config: Config | None = None,
    job_id: str = "",
    size: SizeSummary | None = None,
    memory: JudgedMemory | None = None,
) -> Judged:
    """The verdicts of one run, memory's among them. `size`: the store-size verdict
    when the caller has it already (size_verdict, which needs nothing the device
    returns), else computed here; `memory`: the memory account judged against the
    limit, and the shape points (etdeploy.memory.limit.judge_memory)."""
    # What is judged, and by which limits, before anything is measured.
    thresholds, tolerance = settings.thresholds, tolerance_for(settings, program)
    reference = "float eager" if staged.reference_kind == "eager" else "reference file"
    chain = budget_chain(settings.quantize, program, staged, outputs, host_outputs, reference)
    size = size or size_verdict(program, size_config)
    names = program.output_names
    declared = {**program.declared_kinds, **settings.declared_kinds}  # checked at staging
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
            tolerance,
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
    # A .pte built elsewhere has no manifest to say its outputs' grids: the
    # quantized program derived from MODEL does.
    steps = (
        list(staged.quantized_steps) if staged.quantized_steps is not None else program.output_steps
    )
    stages = [
        metrics.judge_stage(c, staged.sample_names, kinds, thresholds, steps, measured)
        for c in chain
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
    if is_quantized(settings.quantize, program) and settings.atol_given:
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
    task = task_accuracy(settings.gate, program, staged, outputs, job_id or "run")
    if memory is not None:
        warnings.extend(memory.warnings)
    return Judged(verdict, host, size, tuple(warnings), task, memory)


def budget_chain(
    quantize: str | None,
    program: Program,
    staged: Staged,
    outputs: Sequence[Sequence[np.ndarray]],
    host_outputs: Sequence[Sequence[np.ndarray]] | None,
    reference: str,
) -> list[metrics.Comparison]:
    """The stages this run can measure, in the chain's order."""
    chain: list[metrics.Comparison] = []
    quantized = is_quantized(quantize, program)
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
