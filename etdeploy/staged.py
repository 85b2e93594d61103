"""The staged samples of a run: real inputs checked against the method, and what
each should give (the references; for a quantized build also the quantized eager
program's outputs), with the samples' labels when they came with them.

Made by the stage stage (etdeploy.pipeline.stage) or read from a job bundle
(etdeploy.bundle.job_bundle).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from etdeploy.dataset import Labels


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
    # (a float build, or a quantized .pte built elsewhere run without MODEL).
    quantized: tuple[tuple[np.ndarray, ...], ...] | None = None
    # The samples' answers, when they came with them (--labels, a labelled set),
    # and what they score: the task as given or as the model declares it.
    labels: Labels | None = None
    task: str | None = None
    # Where that program came from (the verdict says it), and, when it is not the
    # build's own (a .pte built elsewhere), each output's quantization step.
    quantized_source: str | None = None
    quantized_steps: tuple[float | None, ...] | None = None
