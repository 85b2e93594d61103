"""stage: real inputs, checked against the method, and what they should give.

The samples come from --inputs, the model's own samples, or noise only when the
user asks (--random, and the verdict says so). Each is checked against the
program's input metadata before anything runs, paired with its expected outputs
(etdeploy.pipeline.references), and with its label when the samples carry them
(etdeploy.dataset: --labels, a labelled .npz, a folder a class).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from etdeploy.builder.options import BuildOptions
from etdeploy.dataset import Labels, load_labelled
from etdeploy.errors import InputError
from etdeploy.inputs import Sample, check_against, parse_preprocess
from etdeploy.numerics import check_kinds
from etdeploy.pipeline.build import SampleSource
from etdeploy.pipeline.references import expected_outputs
from etdeploy.program import Program
from etdeploy.staged import Staged


@dataclass(frozen=True)
class StageRequest:
    """What stage takes: the samples' source, what they should give (--reference, or
    MODEL's eager outputs), the options MODEL is built with (a .pte built elsewhere
    derives its quantized eager program with them), the output kinds declared and the
    task the labels score (--task)."""

    model: str | None
    options: BuildOptions = field(default_factory=BuildOptions)
    samples: SampleSource = field(default_factory=SampleSource)
    reference: Path | None = None
    declared_kinds: Mapping[str, str] = field(default_factory=dict)
    task: str | None = None


def stage(request: StageRequest, program: Program) -> Staged:
    """Real inputs -> arrays checked against the method, then the reference."""
    if any(not value.is_tensor for value in program.inputs):
        raise InputError(
            f"{program.method} takes non-tensor inputs, which the runner cannot be given",
            "export a wrapper whose inputs are all tensors",
        )
    # A kind for an output the program does not have is a typo: say so before running.
    check_kinds(
        {**program.declared_kinds, **request.declared_kinds}, program.output_names, "--output-kind"
    )
    samples, labels = _samples(request.samples, program)
    arrays = [s.arrays for s in samples]
    sample_names = [s.name for s in samples]
    expected = expected_outputs(request.model, request.reference, request.options, program, arrays)
    warnings: list[str] = []
    reused = [sample_names[i] for i, hit in enumerate(expected.example_hits) if hit]
    if reused:
        warnings.append(
            f"sample(s) {', '.join(reused)} are the model's example inputs: those fix shapes "
            "for export, they are not a test set; verify on held-out data"
        )
    if request.samples.random_inputs:
        warnings.append(
            "verifying on random inputs (--random): noise exercises the middle of a network's "
            "range and can pass a lowering that breaks real data"
        )
    source, quantized = expected.quantized, expected.quantized_outputs
    if source is None and (program.quantization or request.options.quantize):
        warnings.append(
            "no quantized program beside the .pte (a build from elsewhere) and no MODEL to "
            "derive it from: the device is judged against the float model by the accuracy "
            "budget only, which forgives errors the quantization step would catch; name "
            "MODEL, or build it with `etdeploy build`"
        )
    _, declared, _ = program.declared_task
    return Staged(
        tuple(sample_names),
        tuple(arrays),
        _table(expected.outputs),
        expected.kind,
        bool(request.samples.random_inputs),
        tuple(warnings),
        _table(quantized) if quantized is not None else None,
        labels,
        request.task or declared,
        source.source if source is not None else None,
        source.steps if source is not None and source.derived else None,
    )


def _samples(source: SampleSource, program: Program) -> tuple[list[Sample], Labels | None]:
    """The samples to verify on (--inputs, the model's own, or noise on request), each
    checked against the method, with their labels when they have them."""
    metas = program.input_metas
    labels: Labels | None = None
    if source.random_inputs:
        if source.labels is not None:
            raise InputError("--labels with --random", "noise has no answers: give real --inputs")
        rng = np.random.default_rng(0)
        samples = [
            Sample(
                f"random{i}",
                tuple(_noise(rng, v.dtype or "float32", v.shape) for v in program.inputs),
            )
            for i in range(source.random_inputs)
        ]
    else:
        paths = list(source.inputs) or program.own_samples
        if not paths:
            raise InputError(
                "no inputs to verify with",
                "give --inputs FILE|DIR|GLOB of real samples, or --random N to verify on noise",
            )
        declared_labels, _, names = program.declared_task
        # The model's own labels go with the model's own samples only.
        labels_file = source.labels or (declared_labels if not source.inputs else None)
        labelled = load_labelled(
            paths, metas, parse_preprocess(source.preprocess), labels_file, names
        )
        samples, labels = labelled.samples, labelled.labels
    for sample in samples:
        check_against(sample, metas)
    return samples, labels


def _table(rows: Sequence[Sequence[np.ndarray]]) -> tuple[tuple[np.ndarray, ...], ...]:
    return tuple(tuple(row) for row in rows)


def _noise(rng: np.random.Generator, dtype: str, shape: Sequence[int]) -> np.ndarray:
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.integers(0, 10, size=shape).astype(dtype)
