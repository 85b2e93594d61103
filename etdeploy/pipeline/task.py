"""verify (task accuracy): when the samples have labels, what the task's metric is on
the device, in the float eager model and (for an int8 build) in the quantized eager
program, on the same samples; the paired difference of the device from eager with its
95% interval; the samples they disagree on, worst first, each written to a file that
`--inputs FILE --localize` takes; and the gate (--min-accuracy, --max-accuracy-drop).
The statistics are etdeploy.accuracy's.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from etdeploy import accuracy
from etdeploy.atomic import atomic_write
from etdeploy.dataset import Labels
from etdeploy.errors import InputError
from etdeploy.paths import cache_dir
from etdeploy.program import Program
from etdeploy.results.result_accuracy import (
    Disagreement,
    PairedDifference,
    TaskAccuracy,
    TaskScore,
)
from etdeploy.staged import Staged

# The disagreeing samples a report lists (the worst); the count says how many there were.
DISAGREEMENTS_LISTED = 10


def task_of(program: Program, staged: Staged) -> accuracy.Task:
    """The task the labels score: --task, else the model's, else a classification of the
    first output; checked against the program's outputs."""
    _, _, names = program.declared_task
    task = accuracy.parse_task(staged.task or "classification", names)
    outputs = program.output_names
    if task.output is not None and task.output not in outputs:
        raise InputError(
            f"--task names output {task.output!r}, which the program does not have",
            f"its outputs are: {', '.join(outputs)}",
        )
    return task


def check_task(gate: accuracy.Gate, labels: Path | None, program: Program, staged: Staged) -> None:
    """The labels against the task and the eager model's own outputs, before anything
    is pushed: a label outside the classes, or a task the outputs cannot answer, is bad
    input found in milliseconds rather than after a run on the device."""
    if staged.labels is None:
        if labels is None and (gate.min_accuracy is not None or gate.max_drop is not None):
            raise InputError(
                "--min-accuracy and --max-accuracy-drop need labelled samples",
                "give --labels FILE, a labelled .npz (x and y) or a folder a class as --inputs",
            )
        return
    task = task_of(program, staged)
    index = program.output_names.index(task.output) if task.output else 0
    accuracy.check_labels(
        task, accuracy.stack_output(staged.references, index), staged.labels.values
    )


def task_accuracy(
    gate: accuracy.Gate,
    program: Program,
    staged: Staged,
    outputs: Sequence[Sequence[np.ndarray]],
    job_id: str,
) -> TaskAccuracy | None:
    """The task's metric three ways, paired; None when the samples have no labels."""
    labels = staged.labels
    if labels is None:
        return None
    task = task_of(program, staged)
    index = program.output_names.index(task.output) if task.output else 0
    found = accuracy.compare(
        task, index, staged.references, outputs, staged.quantized, labels.values, gate
    )
    scores = tuple(TaskScore(m.name, m.eager, m.device, m.quantized) for m in found.metrics)
    device_vs = _paired(task, found.device_vs_eager, "device")
    quant_vs = (
        _paired(task, found.quantized_vs_eager, "quantized eager")
        if found.quantized_vs_eager is not None
        else None
    )
    disagreeing = _disagreements(
        task, found.eager_scores, found.device_scores, labels, staged, job_id
    )
    return TaskAccuracy(
        task=task.kind, output=program.output_names[index], samples=len(labels.values),
        labels=labels.source, scores=scores, device_vs_eager=device_vs,
        quantized_vs_eager=quant_vs,
        disagreements=tuple(disagreeing[:DISAGREEMENTS_LISTED]), disagreeing=len(disagreeing),
        min_accuracy=gate.min_accuracy, max_drop=gate.max_drop, passed=found.reason is None,
        reason=found.reason or _summary(task, scores[0], device_vs),
    )  # fmt: skip


def _paired(task: accuracy.Task, found: accuracy.Paired, program: str) -> PairedDifference:
    """A paired difference as the result records it."""
    return PairedDifference(
        metric=task.metric, program=program, reference="float eager",
        difference=found.difference, ci_low=found.low, ci_high=found.high,
        p_value=found.p_value, reference_only=found.reference_only,
        program_only=found.other_only, method=found.method,
    )  # fmt: skip


def _summary(task: accuracy.Task, score: TaskScore, paired: PairedDifference) -> str:
    if task.kind != "classification":
        return (
            f"device {task.metric} {score.device:.4g} vs eager {score.eager:.4g} "
            f"(difference {paired.difference:+.3g}, 95% CI {paired.ci_low:+.3g}..{paired.ci_high:+.3g})"
        )
    moved = "no significant change" if not paired.significant else "a significant change"
    return (
        f"device {score.metric} {score.device:.2%} vs eager {score.eager:.2%}: "
        f"{paired.difference * 100:+.2f} pp (95% CI {paired.ci_low * 100:+.2f}..{paired.ci_high * 100:+.2f} pp), "
        f"{moved}"
    )


def _disagreements(
    task: accuracy.Task,
    eager: np.ndarray,
    device: np.ndarray,
    labels: Labels,
    staged: Staged,
    job_id: str,
) -> list[Disagreement]:
    """Samples whose answer differs, worst first (the device's score for its own answer
    furthest above the label's), each saved as a file to --localize on."""
    if task.kind != "classification":
        return []
    values = labels.values
    said_eager, said_device = eager.argmax(axis=1), device.argmax(axis=1)
    rows = np.flatnonzero(said_eager != said_device)
    margins = device[rows, said_device[rows]] - device[rows, values[rows]]
    order = rows[np.argsort(-margins, kind="stable")]
    folder: Path | None = None
    found = []
    for rank, s in enumerate(order):
        path = None
        if rank < DISAGREEMENTS_LISTED:
            folder = folder or _folder(job_id)
            path = _save_sample(folder, staged.sample_names[s], staged.samples[s])
        found.append(
            Disagreement(
                sample=staged.sample_names[s], label=_class(values[s], labels.names),
                eager=_class(said_eager[s], labels.names),
                device=_class(said_device[s], labels.names),
                margin=float(device[s, said_device[s]] - device[s, values[s]]), input=path,
            )
        )  # fmt: skip
    return found


def _class(index: int | np.integer, names: Sequence[str]) -> str:
    i = int(index)
    return f"{i} ({names[i]})" if names and 0 <= i < len(names) else str(i)


def _folder(job_id: str) -> Path:
    folder = cache_dir("disagreements") / job_id
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _save_sample(folder: Path, name: str, arrays: tuple[np.ndarray, ...]) -> str:
    """A sample as --inputs reads it (.npy for one input, .npz by input order for
    several), written whole or not at all."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    buffer = io.BytesIO()
    if len(arrays) == 1:
        np.save(buffer, arrays[0])
        path = folder / f"{safe}.npy"
    else:
        np.savez(buffer, *arrays)
        path = folder / f"{safe}.npz"
    atomic_write(path, buffer.getvalue())
    return str(path)
