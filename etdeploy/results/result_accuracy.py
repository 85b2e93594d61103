"""The task-accuracy block of a result: the metric three ways (float eager, quantized
eager, device) on the same labelled samples, the paired differences with their 95%
intervals, the samples where device and eager disagree, and the gate; and the
throughput block, MLPerf's single-stream and offline figures over every sample."""

from __future__ import annotations

from dataclasses import dataclass

from etdeploy.results.record import Record, omitted_if_none


@dataclass(frozen=True)
class TaskScore(Record):
    """One metric of the task (top-1, top-5, mean abs error) for each program."""

    metric: str
    eager: float
    device: float
    quantized: float | None = omitted_if_none()


@dataclass(frozen=True)
class PairedDifference(Record):
    """`program`'s metric minus `reference`'s on the same samples, with its interval."""

    metric: str
    program: str  # device | quantized eager
    reference: str  # float eager
    difference: float
    ci_low: float
    ci_high: float
    p_value: float | None
    # Classification: samples only the reference got right, and only the program.
    reference_only: int = 0
    program_only: int = 0
    method: str = ""

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < 0.05


@dataclass(frozen=True)
class Disagreement(Record):
    """A sample eager and the device answer differently, with a file to --localize on."""

    sample: str
    label: str
    eager: str
    device: str
    # How far the device's score for its own answer is above the label's (worst first).
    margin: float
    input: str | None = omitted_if_none()


@dataclass(frozen=True)
class TaskAccuracy(Record):
    task: str  # classification | regression
    output: str
    samples: int
    labels: str  # where they came from
    scores: tuple[TaskScore, ...]
    device_vs_eager: PairedDifference
    quantized_vs_eager: PairedDifference | None = omitted_if_none()
    disagreements: tuple[Disagreement, ...] = ()
    # All disagreeing samples, of which `disagreements` lists the worst.
    disagreeing: int = 0
    min_accuracy: float | None = omitted_if_none()
    max_drop: float | None = omitted_if_none()
    passed: bool = True
    reason: str = ""

    @property
    def primary(self) -> TaskScore:
        return self.scores[0]


@dataclass(frozen=True)
class Throughput(Record):
    """Every sample's one execution: MLPerf's single-stream latency percentiles and the
    offline throughput (samples per second of execution, the load excluded)."""

    samples: int
    samples_per_s: float
    p50_ms: float
    p90_ms: float
