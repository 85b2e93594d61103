"""A result as one job of many: the key that matches it across runs, the planned
jobs that have no result, the counts by status, and why a failed job failed, in
words. Every report format and the farm read these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, TypeVar

from etdeploy.jsonvalue import JsonObject
from etdeploy.results.result import RunResult

FailureKind = Literal["numerics", "size", "memory", "accuracy"]

T = TypeVar("T")


class JobKey(NamedTuple):
    """What makes two results the same job across runs: a baseline is matched on it.

    `backend` or `quantization` is None when the result does not say (a .pte
    without a manifest, or an error result of a run that never built).
    """

    model: str
    backend: str | None
    quantization: str | None
    device: str

    @property
    def variant(self) -> str:
        """backend and quantization as one token: "xnnpack", "xnnpack+int8"."""
        backend = self.backend or "?"
        return f"{backend}+{self.quantization}" if self.quantization else backend

    @property
    def label(self) -> str:
        return f"{self.model}[{self.variant}] on {self.device}"

    @property
    def short_label(self) -> str:
        """The label with a model file named by its file alone, where space is short
        (a plot's axis): "two_io.py:build[xnnpack] on local"."""
        return f"{short_model(self.model)}[{self.variant}] on {self.device}"

    def to_json(self) -> JsonObject:
        return dict(self._asdict())


def short_model(model: str) -> str:
    """A model file reference as its file name and factory ("../models/two_io.py:build"
    reads "two_io.py:build"); other references as they are."""
    path, sep, factory = model.rpartition(":")
    if sep and "/" in path:
        return f"{path.rsplit('/', 1)[-1]}{sep}{factory}"
    return model


@dataclass(frozen=True)
class NotRun:
    """A planned job that has no result, and why.

    `skipped`: left out on purpose before it started, because the combination
    cannot run (int8 on a backend without the quantizer); it does not count
    against the farm. Otherwise the job should have run and did not (a shard that
    never reported, a farm interrupted before it): a nightly run must not pass
    over it.
    """

    key: JobKey
    reason: str
    skipped: bool = False

    @property
    def status(self) -> str:
        """As reports name it: "skipped" or "not run"."""
        return "skipped" if self.skipped else "not run"

    def to_json(self) -> JsonObject:
        return {**self.key.to_json(), "reason": self.reason}

    @classmethod
    def from_json(cls, data: Mapping[str, str | None], *, skipped: bool) -> NotRun:
        key = JobKey(str(data["model"]), data.get("backend"), data.get("quantization"),
                     str(data["device"]))  # fmt: skip
        return cls(key, str(data.get("reason") or ""), skipped)


def job_key(result: RunResult) -> JobKey:
    """The key of one result.

    The artifact says what was built; an error result may have none, so the job
    block is the fallback (where the pipeline records backend and quantization too).
    """
    built = result.artifact if result.artifact is not None else result.job
    return JobKey(result.model_label, built.backend, built.quantization, result.device.name or "?")


def failure_kind(result: RunResult) -> FailureKind:
    """For a failed result: "numerics" when the outputs diverged (at the samples' own
    shapes or at a --shapes point), "accuracy" when the task's metric failed its gate,
    "size" when a store limit was exceeded, "memory" when the peak passed its limit."""
    if result.verdict is not None and not result.verdict.passed:
        return "numerics"
    if result.accuracy is not None and not result.accuracy.passed:
        return "accuracy"
    if result.size is not None and not result.size.passed:
        return "size"
    memory = result.memory
    if memory is not None and memory.limit is not None and not memory.limit.passed:
        return "memory"
    return "numerics"


def failure_message(result: RunResult) -> str:
    """One line saying why a failed result failed."""
    if failure_kind(result) == "accuracy" and result.accuracy is not None:
        return f"accuracy: {result.accuracy.reason}"
    if failure_kind(result) == "size":
        verdicts = result.size.verdicts if result.size is not None else ()
        over = [f"{v.label}: {v.text or 'over'}" for v in verdicts if v.status == "over"]
        return "size: " + ("; ".join(over) or "a size limit is exceeded")
    if failure_kind(result) == "memory":
        limit = result.memory.limit if result.memory is not None else None
        return "memory: " + (limit.message if limit is not None else "over its limit")
    failed = [p for p in result.shapes or () if not p.passed]
    if failed and (result.verdict is None or result.verdict.passed):
        return f"at shapes {failed[0].point} ({failed[0].shape_text}): {failed[0].reason}"
    reason = result.verdict.reason if result.verdict is not None else ""
    return reason or "the outputs differ from the reference"


def error_type(result: RunResult) -> str:
    """The error's type as a report names it, infrastructure.<Kind> or
    input.<Kind>: a CI reader sees at once whether the phone or the model is to blame."""
    kind = (result.error.kind if result.error is not None else "") or "Error"
    return f"{'infrastructure' if result.is_infrastructure else 'input'}.{kind}"


def unique(items: Iterable[T]) -> list[T]:
    """Items in first-seen order, each once."""
    return list(dict.fromkeys(items))


def summarize(results: Sequence[RunResult]) -> dict[str, int]:
    """Counts by status. `errors` counts every status "error"; `infrastructure_errors`
    is the part of them that a device, transport or runner caused (exit code 3)."""
    summary = {
        "total": len(results),
        "passed": 0,
        "failed": 0,
        "errors": 0,
        "infrastructure_errors": 0,
    }
    for result in results:
        if result.status == "passed":
            summary["passed"] += 1
        elif result.status == "failed":
            summary["failed"] += 1
        else:
            summary["errors"] += 1
            if result.is_infrastructure:
                summary["infrastructure_errors"] += 1
    return summary
