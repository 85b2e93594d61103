"""Task accuracy on a labelled test set, paired with eager PyTorch on the same samples.

Tensor closeness (etdeploy.numerics) says whether the lowering changed the numbers; this
says whether the device lost accuracy on the task. Every sample is scored three ways
(the float eager model, the quantized eager program of an int8 build, the device),
and the device is compared with eager sample by sample: a paired design, so the noise
of the test set itself (which samples are hard) cancels.

Classification: top-k correctness per sample. The paired difference of top-1 between
two programs is decided by the samples where exactly one of them is right: b (the
reference right, the other wrong) and c (the reverse).
- Significance: McNemar's exact test, a two-sided binomial test of b against c with
  p = 1/2 (McNemar 1947; the exact form as in Fagerland, Lydersen & Laake 2013, "The
  McNemar test for binary matched-pairs data", BMC Med Res Methodol 13:91, read
  2026-12-04).
- Interval: Newcombe's method 10 for the difference of paired proportions, Wilson
  score intervals combined through the phi coefficient (Newcombe 1998, Stat Med
  17:2635-2650, read 2026-12-04): unlike a Wald interval it stays within [-1, 1] and
  is not degenerate when there are no disagreements.
Regression: mean absolute error against the targets; the paired difference's interval
is a percentile bootstrap over samples (resampled with a fixed seed, so a report is
reproducible).

A gate fails a run on a drop that is significant: the device's accuracy must not be
below --min-accuracy, and the lower end of the drop's 95% interval must not exceed
--max-accuracy-drop. A drop within the noise of the test set does not fail.

Nothing here imports torch: a bundle run scores on a farm host without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from etdeploy.errors import InputError, UsageError

# The two-sided 95% normal quantile.
Z95 = 1.959963984540054
BOOTSTRAP_ROUNDS = 2000
BOOTSTRAP_SEED = 20261204

TASK_KINDS = ("classification", "regression")


@dataclass(frozen=True)
class Task:
    """What the labels score: the kind, the output that answers, and for a classifier
    which top-k to report (top-1 is the one a gate judges) and the classes' names."""

    kind: str = "classification"
    output: str | None = None  # an output name; None: the first tensor output
    top_k: tuple[int, ...] = (1,)
    label_names: tuple[str, ...] = ()

    @property
    def metric(self) -> str:
        return "top-1" if self.kind == "classification" else "mean abs error"


def parse_task(text: str, label_names: Sequence[str] = ()) -> Task:
    """ "classification", "classification:5" (top-1 and top-5), "regression"; an
    output may be named after @: "classification:5@logits"."""
    body, _, output = text.partition("@")
    kind, _, k = body.partition(":")
    kind = kind.strip()
    if kind not in TASK_KINDS:
        raise InputError(
            f"--task {text!r}: {kind!r} is not one of {', '.join(TASK_KINDS)}",
            "e.g. --task classification, --task classification:5@logits, --task regression",
        )
    top_k: tuple[int, ...] = (1,)
    if k:
        if kind != "classification" or not k.strip().isdigit() or int(k) < 1:
            raise InputError(
                f"--task {text!r}: top-k is a positive whole number after a classification",
                "e.g. --task classification:5",
            )
        top_k = tuple(sorted({1, int(k)}))
    return Task(kind, output.strip() or None, top_k, tuple(label_names))


# -- scoring one program -----------------------------------------------------------------


def top_k_correct(scores: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Per sample: is the label among the k highest scores? scores is [N, classes]."""
    if k == 1:
        return np.asarray(np.argmax(scores, axis=1) == labels)
    top = np.argpartition(-scores, min(k, scores.shape[1]) - 1, axis=1)[:, :k]
    return np.asarray((top == labels[:, None]).any(axis=1))


def stack_output(rows: Sequence[Sequence[np.ndarray]], index: int) -> np.ndarray:
    """One output of every sample as an [N, ...] array with the batch dim of one dropped
    (the task's scores for a classifier: [N, classes])."""
    arrays = [np.asarray(row[index], dtype=np.float64) for row in rows]
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise InputError(
            f"output {index} has several shapes across samples ({sorted(shapes)})",
            "a task needs one score vector per sample: declare a fixed-size output with --task",
        )
    stacked = np.stack(arrays)
    return stacked.reshape(len(arrays), -1)


def check_labels(task: Task, scores: np.ndarray, labels: np.ndarray) -> None:
    """Labels that fit the task and the output, or one InputError that says which do not."""
    if task.kind == "classification":
        classes = scores.shape[1]
        if not np.issubdtype(labels.dtype, np.integer):
            raise InputError(
                "classification labels must be class indices (whole numbers)",
                "give the label as the index of the class in the model's output, or name the "
                "classes (ModelSpec.label_names) and label by name",
            )
        bad = np.flatnonzero((labels < 0) | (labels >= classes))
        if bad.size:
            raise InputError(
                f"label {int(labels[bad[0]])} of sample {int(bad[0])} is outside the model's "
                f"{classes} classes (0..{classes - 1})",
                "check that the labels number the classes as the model's output does",
            )
        if max(task.top_k) > classes:
            raise InputError(
                f"top-{max(task.top_k)} asked of an output with {classes} classes",
                f"ask for top-k with k at most {classes}",
            )
    elif scores.shape[1] != 1 and labels.ndim == 1:
        raise InputError(
            f"a regression output of {scores.shape[1]} values per sample, one target each",
            "give one target per output value (a labels .npy of shape [N, values]), or name "
            "a one-value output with --task regression@NAME",
        )


@dataclass(frozen=True)
class Scored:
    """One program's answers on the test set."""

    correct: dict[int, np.ndarray]  # top-k -> per-sample correctness (classification)
    errors: np.ndarray | None  # per-sample absolute error (regression)

    def value(self, task: Task, k: int = 1) -> float:
        if task.kind == "classification":
            return float(np.mean(self.correct[k])) if self.correct[k].size else math.nan
        assert self.errors is not None
        return float(np.mean(self.errors)) if self.errors.size else math.nan


def score(task: Task, scores: np.ndarray, labels: np.ndarray) -> Scored:
    if task.kind == "classification":
        return Scored({k: top_k_correct(scores, labels, k) for k in task.top_k}, None)
    targets = labels.reshape(len(labels), -1).astype(np.float64)
    return Scored({}, np.mean(np.abs(scores - targets), axis=1))


# -- comparing two programs on the same samples -------------------------------------------


@dataclass(frozen=True)
class Paired:
    """The other program's metric minus the reference's, on the same samples."""

    difference: float
    low: float
    high: float
    p_value: float | None
    # Classification: samples only the reference got right (b) and only the other (c).
    reference_only: int = 0
    other_only: int = 0
    method: str = ""


def paired_classification(reference: np.ndarray, other: np.ndarray) -> Paired:
    """Accuracy of `other` minus `reference` (per-sample correctness of each)."""
    n = int(reference.size)
    if n == 0:
        return Paired(math.nan, math.nan, math.nan, None, method="no samples")
    a = int(np.sum(reference & other))
    b = int(np.sum(reference & ~other))
    c = int(np.sum(~reference & other))
    d = n - a - b - c
    p_ref, p_other = (a + b) / n, (a + c) / n
    l_ref, u_ref = wilson(a + b, n)
    l_oth, u_oth = wilson(a + c, n)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    phi = (a * d - b * c) / math.sqrt(margins) if margins > 0 else 0.0
    diff = p_other - p_ref
    below = (
        (p_other - l_oth) ** 2
        - 2 * phi * (p_other - l_oth) * (u_ref - p_ref)
        + (u_ref - p_ref) ** 2
    )
    above = (
        (u_oth - p_other) ** 2
        - 2 * phi * (u_oth - p_other) * (p_ref - l_ref)
        + (p_ref - l_ref) ** 2
    )
    low = max(-1.0, diff - math.sqrt(max(below, 0.0)))
    high = min(1.0, diff + math.sqrt(max(above, 0.0)))
    return Paired(
        diff, low, high, mcnemar_exact(b, c), b, c, "McNemar exact test; Newcombe interval"
    )


def paired_regression(reference: np.ndarray, other: np.ndarray) -> Paired:
    """Mean absolute error of `other` minus `reference`, with a bootstrap interval."""
    n = int(reference.size)
    if n == 0:
        return Paired(math.nan, math.nan, math.nan, None, method="no samples")
    deltas = other - reference
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = deltas[rng.integers(0, n, size=(BOOTSTRAP_ROUNDS, n))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    # Two-sided bootstrap p: how often the resampled mean lands on the other side of 0.
    p = 2 * min(float(np.mean(means <= 0)), float(np.mean(means >= 0)))
    return Paired(
        float(deltas.mean()), float(low), float(high), min(1.0, p),
        method=f"paired percentile bootstrap, {BOOTSTRAP_ROUNDS} rounds",
    )  # fmt: skip


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a proportion (Wilson 1927)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: b of b + c discordant pairs under p = 1/2."""
    m = b + c
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(min(b, c) + 1)) / (1 << m)
    return min(1.0, 2 * tail)


# -- the gate -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Gate:
    """--min-accuracy (a fraction) and --max-accuracy-drop (a fraction: 0.005 = 0.5 pp)."""

    min_accuracy: float | None = None
    max_drop: float | None = None


def gate_reason(task: Task, device: float, paired: Paired, gate: Gate) -> str | None:
    """Why the device's accuracy fails the gate, or None. A drop fails only when its
    95% interval lies wholly beyond the allowed drop: noise does not fail a run."""
    if task.kind != "classification":
        return None
    if gate.min_accuracy is not None and device < gate.min_accuracy:
        return f"device {task.metric} {device:.2%} is below --min-accuracy {gate.min_accuracy:.2%}"
    if gate.max_drop is not None and math.isfinite(paired.high):
        drop_low = -paired.high  # the smallest drop the interval allows
        if drop_low > gate.max_drop:
            return (
                f"device {task.metric} is {-paired.difference * 100:.2f} pp below eager "
                f"(95% CI of the drop {-paired.high * 100:.2f}..{-paired.low * 100:.2f} pp), "
                f"more than --max-accuracy-drop {gate.max_drop * 100:g} pp"
            )
    return None


# -- the whole comparison -----------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """One metric of the task (top-k, or mean abs error) three ways."""

    name: str
    eager: float
    device: float
    quantized: float | None


@dataclass(frozen=True)
class Compared:
    """The task scored on the device, in float eager and (when there is one) in the
    quantized eager program; the paired differences from eager and the gate's verdict."""

    metrics: tuple[Metric, ...]  # top-1 (or the regression's metric) first
    device_vs_eager: Paired
    quantized_vs_eager: Paired | None
    reason: str | None  # why the gate fails; None: it passes
    # The stacked scores of the output that answers (samples x classes for a
    # classifier): where the samples the device and eager disagree on are read.
    eager_scores: np.ndarray
    device_scores: np.ndarray


def compare(
    task: Task,
    index: int,
    eager: Sequence[Sequence[np.ndarray]],
    device: Sequence[Sequence[np.ndarray]],
    quantized: Sequence[Sequence[np.ndarray]] | None,
    labels: np.ndarray,
    gate: Gate,
) -> Compared:
    """Output `index` of every sample three ways against the labels, paired with eager,
    and judged by the gate."""
    eager_scores = stack_output(eager, index)
    check_labels(task, eager_scores, labels)
    device_scores = stack_output(device, index)
    scored_eager = score(task, eager_scores, labels)
    scored_device = score(task, device_scores, labels)
    scored_quantized = (
        score(task, stack_output(quantized, index), labels) if quantized is not None else None
    )
    ks = task.top_k if task.kind == "classification" else (1,)
    metrics = tuple(
        Metric(
            f"top-{k}" if task.kind == "classification" else task.metric,
            scored_eager.value(task, k), scored_device.value(task, k),
            scored_quantized.value(task, k) if scored_quantized else None,
        )
        for k in ks
    )  # fmt: skip
    device_vs = _paired(task, scored_eager, scored_device)
    quantized_vs = _paired(task, scored_eager, scored_quantized) if scored_quantized else None
    reason = gate_reason(task, metrics[0].device, device_vs, gate)
    return Compared(metrics, device_vs, quantized_vs, reason, eager_scores, device_scores)


def _paired(task: Task, reference: Scored, other: Scored) -> Paired:
    if task.kind == "classification":
        return paired_classification(reference.correct[1], other.correct[1])
    assert reference.errors is not None and other.errors is not None
    return paired_regression(reference.errors, other.errors)


def parse_drop(value: str | float, where: str) -> float:
    """ "0.5pp" or "0.5%" -> 0.005; a bare number is a fraction."""
    if isinstance(value, bool):
        raise UsageError(f"{where}: expected a drop, got {value!r}", "e.g. 0.5pp")
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().lower()
    scale = 1.0
    for suffix in ("pp", "%"):
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)].strip(), 0.01
            break
    try:
        number = float(text) * scale
    except ValueError:
        raise UsageError(
            f"{where}: cannot read {value!r} as an accuracy drop",
            "percentage points, e.g. 0.5pp (or a fraction: 0.005)",
        ) from None
    if not 0 <= number <= 1:
        raise UsageError(f"{where}: {value!r} is not between 0 and 100 pp", "e.g. 0.5pp")
    return number
