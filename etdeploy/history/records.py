"""One farm job as the history keeps it: what ran, and what it measured.

"What ran" (the inputs) is a flat map of names to strings: the model's digest,
the backend and quantization, the build's versions, the runner, the device and
its class and OS build. When a series shifts, the inputs of the nights around
the shift are compared, and the ones that differ are named.

"What it measured" is (name, value) pairs: latency, the memory account's parts,
sizes, numerics, task accuracy, pass/fail. A metric a later release adds (a
language model's token agreement, say) is one more name: the store keeps rows,
not columns, so it needs no migration.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from etdeploy.jsonvalue import as_object
from etdeploy.results.jobs import short_model
from etdeploy.results.result import RunResult

# The series name's separator: model|backend|quantization|device|metric.
SEP = "|"
NO_QUANT = "none"
PASSED = "passed"  # the metric that is 1.0 for a pass, 0.0 otherwise

# What each metric's unit is, by its name's ending: the trend page and the CLI
# show values in it, and the change-point floors are set per unit.
UNIT_SUFFIXES = (("_ms", "ms"), ("_bytes", "bytes"), ("_db", "dB"), ("_share", "share"))


@dataclass(frozen=True)
class JobKey:
    """The job a series belongs to: model x backend x quantization x device."""

    model: str
    backend: str
    quantization: str
    device: str

    @property
    def text(self) -> str:
        return SEP.join((self.model, self.backend, self.quantization, self.device))


class Inputs:
    """What ran: (name, value) pairs in name order. Read from a store it keeps the
    row's JSON text and parses it when first asked: a year of nights is read for its
    metrics, and only the nights around a change point are asked what ran."""

    __slots__ = ("_items", "_text")

    def __init__(self, items: Iterable[tuple[str, str]] = (), *, text: str | None = None) -> None:
        self._items: tuple[tuple[str, str], ...] | None = (
            None if text is not None else tuple(sorted(items))
        )
        self._text = text

    @property
    def items(self) -> tuple[tuple[str, str], ...]:
        if self._items is None:
            parsed = as_object(json.loads(self._text or "{}"), "a history job's inputs")
            self._items = tuple(sorted((name, str(value)) for name, value in parsed.items()))
        return self._items

    def as_dict(self) -> dict[str, str]:
        return dict(self.items)

    def json_text(self) -> str:
        """As the store keeps them: a JSON object."""
        return self._text if self._text is not None else json.dumps(dict(self.items))

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Inputs) and self.items == other.items

    def __hash__(self) -> int:
        return hash(self.items)

    def __repr__(self) -> str:
        return f"Inputs({self.items!r})"


@dataclass(frozen=True)
class JobRecord:
    """One job of one night: its identity, what ran, and what it measured."""

    job_uid: str  # the job's id in its result: recording it twice keeps one row
    key: JobKey
    started_at: str  # ISO 8601 UTC, to the second: the night's order
    status: str
    inputs: Inputs
    metrics: tuple[tuple[str, float], ...]

    def metric(self, name: str) -> float | None:
        return next((v for n, v in self.metrics if n == name), None)

    @property
    def input_map(self) -> dict[str, str]:
        return self.inputs.as_dict()


def unit_of(metric: str) -> str:
    for suffix, unit in UNIT_SUFFIXES:
        if metric.endswith(suffix):
            return unit
    return ""


def job_key_of(result: RunResult) -> JobKey:
    artifact = result.artifact
    backend = result.job.backend or (artifact.backend if artifact else None) or "?"
    quant = result.job.quantization or (artifact.quantization if artifact else None)
    return JobKey(short_model(result.model_label), backend, quant or NO_QUANT, result.device.name)


def record_of(result: RunResult) -> JobRecord:
    """The history's record of one result (a farm job's, or any run's)."""
    return JobRecord(
        job_uid=result.job.id or f"{job_key_of(result).text}@{result.started_at}",
        key=job_key_of(result),
        started_at=result.started_at,
        status=result.status,
        inputs=Inputs(inputs_of(result).items()),
        metrics=tuple((name, value) for name, value in metrics_of(result) if math.isfinite(value)),
    )


def inputs_of(result: RunResult) -> dict[str, str]:
    """What ran, as named strings; an input the result does not know is left out."""
    found: dict[str, str | None] = {"etdeploy": result.etdeploy or None}
    artifact = result.artifact
    if artifact is not None:
        found["model digest"] = artifact.sha256[:16]
        for name, version in sorted((artifact.built_with or {}).items()):
            # The etdeploy that built the program, beside the one that ran it.
            found["built with etdeploy" if name == "etdeploy" else name] = version
        if artifact.delegation is not None:
            found["delegated share"] = f"{artifact.delegation.share:.3f}"
    runner = result.runner
    if runner is not None:
        found["runner"] = " ".join(
            str(p) for p in (runner.flavor, runner.kind, runner.version) if p
        )
    if result.preflight is not None and result.preflight.runner is not None:
        found["runner executorch"] = result.preflight.runner.executorch_version
    device = result.device
    found["device class"] = " ".join(p for p in (device.model, device.soc) if p) or None
    found["os build"] = " ".join(p for p in (device.os, device.os_version) if p) or None
    found["abi"] = device.abi
    job = result.job
    found["iterations"] = str(job.iterations) if job.iterations is not None else None
    found["warmup"] = str(job.warmup) if job.warmup is not None else None
    if result.inputs is not None:
        found["samples"] = str(len(result.inputs.samples))
    return {name: value for name, value in found.items() if value}


def metrics_of(result: RunResult) -> Iterable[tuple[str, float]]:
    """What the job measured, as (name, value); non-finite values are dropped by the caller."""
    yield PASSED, 1.0 if result.status == "passed" else 0.0
    latency = result.latency_ms
    if latency is not None and latency.n:
        # cpu_median: the CPU time, which a busy host does not stretch (our runner).
        for name in ("median", "p90", "min", "max", "stdev", "trimmed_mean", "load", "cpu_median"):
            value = getattr(latency, name)
            if value is not None:
                yield f"latency.{name}_ms", float(value)
    yield from _memory_metrics(result)
    if result.artifact is not None:
        yield "size.program_bytes", float(result.artifact.size_bytes)
    if result.size is not None:
        yield "size.download_bytes", float(result.size.download_bytes)
    yield from _numerics(result)
    if result.accuracy is not None:
        score = result.accuracy.primary
        yield f"accuracy.{score.metric}.device_share", float(score.device)
        yield f"accuracy.{score.metric}.eager_share", float(score.eager)


def _memory_metrics(result: RunResult) -> Iterable[tuple[str, float]]:
    memory = result.memory
    if memory is None:
        return
    if memory.planned_bytes is not None:
        yield "memory.planned_bytes", float(memory.planned_bytes)
    if memory.peak_bytes is not None:
        yield "memory.peak_bytes", float(memory.peak_bytes)
    for phase in memory.account:
        yield f"memory.{phase.phase}.peak_bytes", float(phase.peak_bytes)
        for part in phase.parts:
            yield f"memory.{phase.phase}.{part.part}_bytes", float(part.bytes)


def _numerics(result: RunResult) -> Iterable[tuple[str, float]]:
    if result.verdict is None:
        return
    worst_sqnr: dict[str, float] = {}
    worst_abs: dict[str, float] = {}
    for row in result.verdict.metrics:
        worst_sqnr[row.name] = min(worst_sqnr.get(row.name, math.inf), row.sqnr_db)
        worst_abs[row.name] = max(worst_abs.get(row.name, 0.0), row.max_abs)
    for name, value in worst_sqnr.items():
        yield f"numerics.{name}.sqnr_db", value  # an exact match (+inf) is dropped
    for name, value in worst_abs.items():
        yield f"numerics.{name}.max_abs", value
