"""stage: real inputs, checked against the method, and what they should give.

The samples come from --inputs, the model's own samples, or noise only when the
user asks (--random, and the verdict says so). Each is checked against the
program's input metadata before anything runs, encoded to the raw files the
runner reads, and paired with its expected outputs (etdeploy.pipeline.references).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from etdeploy.errors import InputError
from etdeploy.pipeline.build import Program, default_sample_paths
from etdeploy.pipeline.job import RunJob
from etdeploy.pipeline.references import (
    eager_reference,
    load_reference_file,
    quantized_reference,
)


@dataclass(frozen=True)
class Staged:
    sample_names: tuple[str, ...]
    samples: tuple[tuple[np.ndarray, ...], ...]
    # references[s][k]: the expected value of the k-th tensor output of sample s.
    references: tuple[tuple[np.ndarray, ...], ...]
    reference_kind: str  # eager | file
    on_noise: bool
    warnings: tuple[str, ...] = ()
    # For a quantized build: the converted program's eager outputs, what the
    # device must reproduce to the quantization step. None when there is none
    # (a float build, or a quantized .pte built elsewhere).
    quantized: tuple[tuple[np.ndarray, ...], ...] | None = None


def stage(job: RunJob, program: Program) -> Staged:
    """Real inputs -> arrays checked against the method, then the reference."""
    from etdeploy.inputs import Sample, check_against, load_samples, parse_preprocess

    if any(not value.is_tensor for value in program.inputs):
        raise InputError(
            f"{program.method} takes non-tensor inputs, which the runner cannot be given",
            "export a wrapper whose inputs are all tensors",
        )
    from etdeploy.verify import check_kinds

    # A kind for an output the program does not have is a typo: say so before running.
    check_kinds(
        {**program.declared_kinds, **job.declared_kinds()}, program.output_names, "--output-kind"
    )
    metas = program.input_metas
    if job.random_inputs:
        rng = np.random.default_rng(0)
        samples = [
            Sample(
                f"random{i}",
                tuple(_noise(rng, v.dtype or "float32", v.shape) for v in program.inputs),
            )
            for i in range(job.random_inputs)
        ]
    else:
        paths = list(job.inputs) or default_sample_paths(program)
        if not paths:
            raise InputError(
                "no inputs to verify with",
                "give --inputs FILE|DIR|GLOB of real samples, or --random N to verify on noise",
            )
        samples = load_samples(paths, metas, parse_preprocess(job.preprocess))
    for sample in samples:
        check_against(sample, metas)
    arrays = [s.arrays for s in samples]
    sample_names = [s.name for s in samples]
    warnings: list[str] = []
    if job.reference is not None:
        references = load_reference_file(job.reference, len(samples), len(program.tensor_outputs))
        kind = "file"
    else:
        assert job.model is not None
        references, example_hits = eager_reference(job.model, arrays, use_cache=job.use_cache)
        kind = "eager"
        reused = [sample_names[i] for i, hit in enumerate(example_hits) if hit]
        if reused:
            warnings.append(
                f"sample(s) {', '.join(reused)} are the model's example inputs: those fix shapes "
                "for export, they are not a test set; verify on held-out data"
            )
    if job.random_inputs:
        warnings.append(
            "verifying on random inputs (--random): noise exercises the middle of a network's "
            "range and can pass a lowering that breaks real data"
        )
    quantized = None
    if program.quantized_program is not None:
        quantized = quantized_reference(program.quantized_program, arrays, use_cache=job.use_cache)
    elif program.quantization or job.quantize:
        warnings.append(
            "no quantized program beside the .pte (a build from elsewhere): the device is "
            "judged against the float model by the accuracy budget only, which forgives "
            "errors the quantization step would catch; build it with `etdeploy build`"
        )
    return Staged(
        tuple(sample_names),
        tuple(arrays),
        _table(references),
        kind,
        bool(job.random_inputs),
        tuple(warnings),
        _table(quantized) if quantized is not None else None,
    )


def _table(rows: Sequence[Sequence[np.ndarray]]) -> tuple[tuple[np.ndarray, ...], ...]:
    return tuple(tuple(row) for row in rows)


def _noise(rng: np.random.Generator, dtype: str, shape: Sequence[int]) -> np.ndarray:
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.integers(0, 10, size=shape).astype(dtype)


def staged_input_file(array: np.ndarray) -> Path:
    """The raw runner file for `array`, named by its content (cached locally too,
    so a transport's hash cache sees the same file each run). One already there is
    used only when it holds exactly these bytes (etdeploy.quarantine): a damaged or
    linked one is moved aside and written again."""
    from etdeploy.inputs import raw_bytes
    from etdeploy.paths import cache_dir
    from etdeploy.quarantine import file_damage, quarantine

    data = raw_bytes(array)
    digest = hashlib.sha256(data).hexdigest()
    name = digest[:32] + ".bin"
    path = cache_dir("staged-inputs") / name
    if os.path.lexists(path):
        damage = file_damage(path, digest)
        if damage is None:
            return path
        quarantine(path, "staged input", damage)
    tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path
