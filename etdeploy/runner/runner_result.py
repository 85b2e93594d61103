"""What a finished run reports: our runner's --result_json (and --batch_output)
documents, or, for upstream's runner, what its log lines say."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field

from etdeploy.errors import RunnerError
from etdeploy.jsonvalue import JsonObject
from etdeploy.memory.probe import RunnerMemory, parse_runner_memory
from etdeploy.runner.invocation import RunnerInvocation
from etdeploy.runner.log import RunnerLog, parse_log

# The schema tag our runner writes at the top of --result_json
# (android_harness/etdeploy_runner.cpp).
RESULT_SCHEMA = "etdeploy.runner_result/1"
# --batch_output BASE: BASE.json holds every sample's result document in order, and
# each tensor output's `offset` into BASE.bin, where the outputs lie back to back.
BATCH_SCHEMA = "etdeploy.runner_batch/1"


@dataclass(frozen=True)
class TensorRecord:
    """One input or output as the runner saw it. Non-tensor outputs have tag other
    than "Tensor", no dtype/shape/file, and a `value` for scalars."""

    index: int
    tag: str = "Tensor"
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    dim_order: tuple[int, ...] | None = None
    nbytes: int | None = None
    file: str | None = None
    value: float | int | bool | None = None
    # Where its bytes start in the call's batch data file (--batch_output).
    offset: int | None = None

    @property
    def is_tensor(self) -> bool:
        return self.tag == "Tensor"


@dataclass(frozen=True)
class RunnerResult:
    """A finished run, from --result_json (ours) or from the log (upstream)."""

    flavor: str
    method: str
    load_ms: float | None
    iterations_ms: tuple[float, ...]
    warmup: int = 0
    # The process's CPU time of each timed iteration (our runner's iterations_cpu_ms;
    # empty from upstream's runner and from ours before it wrote them).
    iterations_cpu_ms: tuple[float, ...] = ()
    inputs: tuple[TensorRecord, ...] = ()
    # Empty for the upstream runner, which reports no shapes.
    outputs: tuple[TensorRecord, ...] = ()
    peak_rss_bytes: int | None = None
    cpu_threads: int | None = None
    runner_version: str | None = None
    executorch_version: str | None = None
    etdump_path: str | None = None
    # Our runner with --memory: what it measured per phase (etdeploy.memory.probe).
    memory: RunnerMemory | None = None
    extra: JsonObject = field(default_factory=dict)

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.iterations_ms) if self.iterations_ms else None

    def tensor_outputs(self) -> tuple[TensorRecord, ...]:
        return tuple(o for o in self.outputs if o.is_tensor)


def _bad_document(problem: str) -> RunnerError:
    return RunnerError(
        f"runner result json is not usable: {problem}",
        "the runner and etdeploy disagree on the result format; rebuild the runner "
        "with `etdeploy runner build --rebuild`",
    )


def _record(raw: object, where: str) -> TensorRecord:
    # Exact types (what json.loads makes), read once each: a batch has two a sample.
    if type(raw) is not dict or type(raw.get("index")) is not int:
        raise _bad_document(f"{where} has no integer index")
    get = raw.get
    shape = get("shape")
    if shape is not None and (type(shape) is not list or not all(type(d) is int for d in shape)):
        raise _bad_document(f"{where} has a shape that is not a list of integers")
    dim_order = get("dim_order")
    offset = get("offset")
    return TensorRecord(
        raw["index"],
        str(get("tag", "Tensor")),
        get("dtype"),
        tuple(shape) if shape is not None else None,
        tuple(dim_order) if type(dim_order) is list else None,
        get("nbytes"),
        get("file"),
        get("value"),
        offset if type(offset) is int else None,
    )


_KNOWN_KEYS = {
    "schema", "runner_version", "executorch_version", "model_path", "method",
    "cpu_threads", "load_ms", "warmup", "num_executions", "iterations_ms", "total_ms",
    "iterations_cpu_ms",
    "peak_rss_bytes", "inputs", "outputs", "etdump_path", "memory",
}  # fmt: skip


def parse_batch_json(text: str | bytes) -> list[RunnerResult]:
    """Read the documents of a --batch_output call: one per sample, in order."""
    try:
        raw = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad_document(f"not JSON ({exc})") from exc
    if not isinstance(raw, dict) or raw.get("schema") != BATCH_SCHEMA:
        raise _bad_document(f"the batch document's schema is not {BATCH_SCHEMA!r}")
    samples = raw.get("samples")
    if not isinstance(samples, list):
        raise _bad_document("the batch document has no list of samples")
    return [_result_of(sample) for sample in samples]


def parse_result_json(text: str | bytes) -> RunnerResult:
    """Read our runner's --result_json document."""
    try:
        raw = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad_document(f"not JSON ({exc})") from exc
    return _result_of(raw)


def _result_of(raw: object) -> RunnerResult:
    if not isinstance(raw, dict):
        raise _bad_document("the top level is not an object")
    if raw.get("schema") != RESULT_SCHEMA:
        raise _bad_document(f"schema is {raw.get('schema')!r}, expected {RESULT_SCHEMA!r}")
    iterations = raw.get("iterations_ms")
    if not isinstance(iterations, list) or not all(
        isinstance(ms, (int, float)) for ms in iterations
    ):
        raise _bad_document("iterations_ms is not a list of numbers")
    if raw.get("num_executions") is not None and raw["num_executions"] != len(iterations):
        raise _bad_document(
            f"num_executions is {raw['num_executions']} but {len(iterations)} times are listed"
        )
    cpu = raw.get("iterations_cpu_ms", [])
    if not isinstance(cpu, list) or not all(isinstance(ms, (int, float)) for ms in cpu):
        raise _bad_document("iterations_cpu_ms is not a list of numbers")
    if cpu and len(cpu) != len(iterations):
        raise _bad_document(
            f"iterations_cpu_ms lists {len(cpu)} times for {len(iterations)} iterations"
        )
    inputs = raw.get("inputs", [])
    outputs = raw.get("outputs", [])
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise _bad_document("inputs and outputs must be lists")
    return RunnerResult(
        flavor="etdeploy",
        method=str(raw.get("method", "forward")),
        load_ms=float(raw["load_ms"]) if raw.get("load_ms") is not None else None,
        iterations_ms=tuple(float(ms) for ms in iterations),
        warmup=int(raw.get("warmup", 0)),
        iterations_cpu_ms=tuple(float(ms) for ms in cpu),
        inputs=tuple(_record(r, f"inputs[{i}]") for i, r in enumerate(inputs)),
        outputs=tuple(_record(r, f"outputs[{i}]") for i, r in enumerate(outputs)),
        peak_rss_bytes=raw.get("peak_rss_bytes"),
        cpu_threads=raw.get("cpu_threads"),
        runner_version=raw.get("runner_version"),
        executorch_version=raw.get("executorch_version"),
        etdump_path=raw.get("etdump_path"),
        memory=parse_runner_memory(raw.get("memory")),
        extra={k: v for k, v in raw.items() if k not in _KNOWN_KEYS},
    )


def result_from_log(log: RunnerLog | str, invocation: RunnerInvocation) -> RunnerResult:
    """A result from the log lines alone: what an upstream runner gives.

    The upstream flavor ran `warmup` extra iterations first; they are dropped
    here. A log that never reached "Model executed successfully" or lacks
    iterations is an error: the run did not finish.
    """
    parsed = parse_log(log) if isinstance(log, str) else log
    requested = invocation.timed_executions_requested
    if not parsed.completed or len(parsed.iterations_ms) < requested:
        raise RunnerError(
            f"the runner log shows {len(parsed.iterations_ms)} of {requested} iterations "
            "and no completion line",
            "the runner stopped early or logs elsewhere (upstream's Android build logs "
            "to logcat, tag ExecuTorch)",
        )
    skipped = invocation.warmup if invocation.flavor == "upstream" else 0
    return RunnerResult(
        flavor=invocation.flavor,
        method=invocation.method,
        load_ms=parsed.load_ms,
        iterations_ms=parsed.iterations_ms[skipped:],
        warmup=invocation.warmup,
        etdump_path=invocation.etdump_path,
    )
