"""The runner contract: how etdeploy invokes a runner and reads back what it did.

Two runners speak it. Ours (android_harness/, flavor "etdeploy") takes
upstream executor_runner's flags plus `--warmup`, `--result_json`,
`--next_sample` (more samples through the program loaded once) and
`--describe` (what it can run, for preflight: runner_describe.py); upstream's
(flavor "upstream") takes only its own flags, so its warm-up runs are folded into
the timed loop and dropped again when the log is read, and shapes come from the
reference instead of a result document.

Pure Python and torch-free: a device transport builds the argv here, runs it
wherever the device is, and hands the exit status and text back to
`runner_failure` or to `parse_log` / `parse_result_json`.
"""

from __future__ import annotations

import json
import re
import signal
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from etdeploy.errors import RunnerError, UsageError
from etdeploy.et_errors import ET_ERROR_INFO, ET_ERRORS, EtErrorInfo
from etdeploy.memory.probe import RunnerMemory, parse_runner_memory

FLAVORS = ("etdeploy", "upstream")

# The schema tag our runner writes at the top of --result_json
# (android_harness/etdeploy_runner.cpp).
RESULT_SCHEMA = "etdeploy.runner_result/1"
# --batch_output BASE: BASE.json holds every sample's result document in order, and
# each tensor output's `offset` into BASE.bin, where the outputs lie back to back.
BATCH_SCHEMA = "etdeploy.runner_batch/1"


@dataclass(frozen=True)
class SampleFiles:
    """A sample after the first in one call (our runner's --next_sample): its input
    files, their shapes when not the method's, and where its outputs and result go.
    It runs once, on the program the call loaded."""

    input_paths: tuple[str, ...]
    output_base: str
    result_json_path: str
    input_shapes: tuple[tuple[int, ...], ...] | None = None


def _shapes_text(shapes: tuple[tuple[int, ...], ...]) -> str:
    return ",".join("x".join(map(str, shape)) for shape in shapes)


def _check_input_paths(paths: Iterable[str]) -> None:
    for path in paths:
        # The runner splits --inputs on commas (as upstream does), a samples file on tabs.
        if "," in path or "\t" in path or "\n" in path:
            raise UsageError(
                f"input path {path!r} contains a comma, which the runner cannot take",
                "rename the file or stage inputs in a directory without commas",
            )


@dataclass(frozen=True)
class RunnerInvocation:
    """One run of a runner. Paths are as the runner sees them (on the device)."""

    model_path: str
    input_paths: tuple[str, ...] = ()
    # The program's external data (.ptd); upstream's runner takes --data_path too.
    data_path: str | None = None
    output_base: str | None = None
    num_executions: int = 1
    warmup: int = 0
    method: str = "forward"
    etdump_path: str | None = None
    # None: the runner's default (one thread per performant core).
    cpu_threads: int | None = None
    result_json_path: str | None = None
    flavor: str = "etdeploy"
    # Each input's shape when it differs from the method's (dynamic dims); our
    # runner's --input_shapes. None: the method's shapes.
    input_shapes: tuple[tuple[int, ...], ...] | None = None
    # Our runner only: samples run once each after this one's timed executions,
    # given on the command line (--next_sample)...
    next_samples: tuple[SampleFiles, ...] = ()
    # ... or listed in a file on the device (samples_file_text), for any number.
    samples_file: str | None = None
    # Our runner only: every sample's outputs and result documents into two files,
    # BASE.bin and BASE.json (batch_files), instead of files of their own.
    batch_output: str | None = None
    # Our runner only (--memory): this sample's memory per phase, in its result.
    measure_memory: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_path", _path_text(self.model_path))
        object.__setattr__(self, "input_paths", tuple(_path_text(p) for p in self.input_paths))
        for name in ("data_path", "output_base", "etdump_path", "result_json_path"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _path_text(value))
        if self.flavor not in FLAVORS:
            raise UsageError(
                f"unknown runner flavor {self.flavor!r}", f"use one of: {', '.join(FLAVORS)}"
            )
        if self.num_executions < 1:
            raise UsageError(f"num_executions must be at least 1, got {self.num_executions}")
        if self.warmup < 0:
            raise UsageError(f"warmup must be 0 or more, got {self.warmup}")
        if self.cpu_threads is not None and self.cpu_threads < 1 and self.cpu_threads != -1:
            raise UsageError(f"cpu_threads must be positive or -1, got {self.cpu_threads}")
        _check_input_paths(self.input_paths)
        for sample in self.next_samples:
            _check_input_paths(sample.input_paths)
        if (
            self.next_samples or self.samples_file or self.batch_output
        ) and self.flavor != "etdeploy":
            raise UsageError("only etdeploy's runner takes more than one sample per call")
        if not self.method:
            raise UsageError("method name must not be empty")
        if self.input_shapes is not None and self.flavor == "upstream":
            raise UsageError(
                "upstream's executor_runner cannot take inputs of another shape than the "
                "method's (dynamic dims)",
                "run with etdeploy's runner (drop --runner), or give inputs at the exported shape",
            )

    @property
    def timed_executions_requested(self) -> int:
        """How many executions the runner is told to time (upstream times warm-ups too)."""
        if self.flavor == "upstream":
            return self.warmup + self.num_executions
        return self.num_executions


def _path_text(path: str | PurePath) -> str:
    return path.as_posix() if isinstance(path, PurePath) else str(path)


def runner_argv(executable: str | PurePath, invocation: RunnerInvocation) -> list[str]:
    """The command line for `invocation`. The upstream flavor never gets --warmup or
    --result_json: its warm-ups run as the first timed iterations instead."""
    argv = [_path_text(executable), f"--model_path={invocation.model_path}"]
    if invocation.data_path is not None:
        argv.append(f"--data_path={invocation.data_path}")
    if invocation.input_paths:
        argv.append(f"--inputs={','.join(invocation.input_paths)}")
    if invocation.output_base is not None:
        argv.append(f"--output_file={invocation.output_base}")
    argv.append(f"--num_executions={invocation.timed_executions_requested}")
    argv.append(f"--method_name={invocation.method}")
    if invocation.etdump_path is not None:
        argv.append(f"--etdump_path={invocation.etdump_path}")
    if invocation.cpu_threads is not None:
        argv.append(f"--cpu_threads={invocation.cpu_threads}")
    if invocation.flavor == "etdeploy":
        if invocation.warmup:
            argv.append(f"--warmup={invocation.warmup}")
        if invocation.result_json_path is not None:
            argv.append(f"--result_json={invocation.result_json_path}")
        if invocation.input_shapes is not None:
            argv.append(f"--input_shapes={_shapes_text(invocation.input_shapes)}")
        if invocation.samples_file is not None:
            argv.append(f"--samples_file={invocation.samples_file}")
        if invocation.batch_output is not None:
            argv.append(f"--batch_output={invocation.batch_output}")
        if invocation.measure_memory:
            argv.append("--memory")
        argv.extend(arg for sample in invocation.next_samples for arg in next_sample_argv(sample))
    return argv


def next_sample_argv(sample: SampleFiles) -> list[str]:
    """The flags that add `sample` to a call of our runner."""
    argv = ["--next_sample"]
    if sample.input_paths:
        argv.append(f"--inputs={','.join(sample.input_paths)}")
    if sample.input_shapes is not None:
        argv.append(f"--input_shapes={_shapes_text(sample.input_shapes)}")
    argv.append(f"--output_file={sample.output_base}")
    argv.append(f"--result_json={sample.result_json_path}")
    return argv


def samples_file_text(samples: Iterable[SampleFiles]) -> str:
    """The --samples_file of `samples`: one a line, its inputs, input shapes, output
    base and result document tab-separated (an empty field: not given). Every sample
    runs once, after the call's first (timed) sample."""
    lines = []
    for sample in samples:
        _check_input_paths(sample.input_paths)
        shapes = _shapes_text(sample.input_shapes) if sample.input_shapes is not None else ""
        lines.append(
            "\t".join(
                (",".join(sample.input_paths), shapes, sample.output_base, sample.result_json_path)
            )
        )
    return "".join(f"{line}\n" for line in lines)


def packed_input(path: str, offset: int) -> str:
    """An input that is `offset` bytes into a file packing many samples' inputs."""
    return f"{path}@{offset}"


def batch_files(base: str) -> tuple[str, str]:
    """What --batch_output BASE writes: the outputs' bytes, and the documents."""
    return f"{base}.bin", f"{base}.json"


def output_files(base: str | PurePath, indices: Iterable[int]) -> list[str]:
    """The files a runner writes for tensor outputs `indices`: BASE-<i>.bin."""
    text = _path_text(base)
    return [f"{text}-{index}.bin" for index in indices]


# --- the log -----------------------------------------------------------------

_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
# Searched anywhere in a line, so ExecuTorch's PAL prefix
# ("I 00:00:00.123 executorch:executor_runner.cpp:123] ") and logcat's
# ("12-02 10:00:00.000  123  123 I ExecuTorch: ") are both skipped.
_LOADED = re.compile(rf"Model loaded in {_NUMBER} ms\.")
_ITERATION = re.compile(rf"Iteration (\d+) of (\d+): {_NUMBER} ms")
_EXECUTED = re.compile(rf"Model executed successfully (\d+) time\(s\) in {_NUMBER} ms\.")


@dataclass(frozen=True)
class RunnerLog:
    """What a runner's log lines say. Fields are None when their line is absent."""

    load_ms: float | None
    iterations_ms: tuple[float, ...]
    # N of "Iteration i of N", as the runner announced it.
    iterations_announced: int | None
    executed_count: int | None
    executed_total_ms: float | None

    @property
    def completed(self) -> bool:
        return self.executed_count is not None


def parse_log(text: str) -> RunnerLog:
    """Read the timing lines out of a runner's stdout, stderr or device log.

    Other lines are ignored. An iteration reported twice (the same text seen on
    stdout and in logcat) counts once; iterations come back in their own order.
    """
    load_ms: float | None = None
    iterations: dict[int, float] = {}
    announced: int | None = None
    executed_count: int | None = None
    executed_total: float | None = None
    for line in text.splitlines():
        if (match := _LOADED.search(line)) is not None:
            if load_ms is None:
                load_ms = float(match.group(1))
        elif (match := _ITERATION.search(line)) is not None:
            index = int(match.group(1))
            iterations.setdefault(index, float(match.group(3)))
            announced = int(match.group(2))
        elif (match := _EXECUTED.search(line)) is not None:
            executed_count = int(match.group(1))
            executed_total = float(match.group(2))
    return RunnerLog(
        load_ms=load_ms,
        iterations_ms=tuple(iterations[i] for i in sorted(iterations)),
        iterations_announced=announced,
        executed_count=executed_count,
        executed_total_ms=executed_total,
    )


# --- the result document -------------------------------------------------------


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
    extra: dict[str, Any] = field(default_factory=dict)

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


def _record(raw: Any, where: str) -> TensorRecord:
    if not isinstance(raw, dict) or not isinstance(raw.get("index"), int):
        raise _bad_document(f"{where} has no integer index")
    shape = raw.get("shape")
    dim_order = raw.get("dim_order")
    if shape is not None and not (
        isinstance(shape, list) and all(isinstance(d, int) for d in shape)
    ):
        raise _bad_document(f"{where} has a shape that is not a list of integers")
    return TensorRecord(
        index=raw["index"],
        tag=str(raw.get("tag", "Tensor")),
        dtype=raw.get("dtype"),
        shape=tuple(shape) if shape is not None else None,
        dim_order=tuple(dim_order) if isinstance(dim_order, list) else None,
        nbytes=raw.get("nbytes"),
        file=raw.get("file"),
        value=raw.get("value"),
        offset=raw.get("offset") if isinstance(raw.get("offset"), int) else None,
    )


_KNOWN_KEYS = {
    "schema", "runner_version", "executorch_version", "model_path", "method",
    "cpu_threads", "load_ms", "warmup", "num_executions", "iterations_ms", "total_ms",
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


def _result_of(raw: Any) -> RunnerResult:
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


# --- failures -------------------------------------------------------------------

# Our runner: "error: method load failed: OperatorMissing (0x14)".
_OUR_ERROR = re.compile(r"^error: (.+)$", re.MULTILINE)
_NAMED_CODE = re.compile(r"\b([A-Z][A-Za-z]+) \(0x([0-9a-fA-F]+)\)")
# Upstream: "... failed with status 0x14", "Could not prepare inputs: 0x12".
_UPSTREAM_CODE = re.compile(
    r"(?P<what>(?:[A-Za-z][^\]\n]*?)?(?:failed|Could not [a-z ]+))(?: with status)?:? 0x(?P<code>[0-9a-fA-F]+)"
)
_MISSING_OPERATOR = re.compile(r"Missing operator: \[\d+\] (\S+)")
_MISSING_BACKEND = re.compile(r"Backend (\S+) is not registered")
# The dynamic loader, when a library the runner links is not beside it.
_MISSING_LIBRARY = re.compile(r"error while loading shared libraries: ([^:\s]+)")
_INPUT_SIZE = re.compile(r"input (\d+) \(.*\) has (\d+) bytes, expected (\d+) bytes")


@dataclass(frozen=True)
class EtError:
    """An ExecuTorch runtime error named in a runner's output."""

    name: str
    code: int

    def __str__(self) -> str:
        return f"{self.name} (0x{self.code:x})"

    @property
    def info(self) -> EtErrorInfo | None:
        return ET_ERROR_INFO.get(self.code)

    @property
    def cause(self) -> str | None:
        return self.info.cause if self.info else None

    @property
    def hint(self) -> str | None:
        return self.info.hint if self.info else None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "code": self.code, "cause": self.cause, "hint": self.hint}


class RunnerFailure(RunnerError):
    """A runner that exited non-zero, with what its output says went wrong."""

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        exit_code: int | None,
        et_error: EtError | None = None,
        missing_operators: Sequence[str] = (),
        missing_backends: Sequence[str] = (),
        device: str | None = None,
        command: str | None = None,
        log: str | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(
            message, hint, device=device, command=command, log=log, retryable=retryable
        )
        self.runner_exit_code = exit_code
        self.et_error = et_error
        self.missing_operators = tuple(missing_operators)
        self.missing_backends = tuple(missing_backends)


def find_et_error(text: str) -> EtError | None:
    """The first ExecuTorch error a runner's output names, from either runner."""
    for line in _OUR_ERROR.findall(text):
        if (match := _NAMED_CODE.search(line)) is not None:
            return EtError(match.group(1), int(match.group(2), 16))
    if (match := _UPSTREAM_CODE.search(text)) is not None:
        code = int(match.group("code"), 16)
        return EtError(ET_ERRORS.get(code, "Unknown"), code)
    return None


def _signal_name(exit_code: int) -> str | None:
    # subprocess reports a signal as -N; a shell (adb shell, ssh) as 128+N.
    number = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 160 else 0
    if not number:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _dedupe(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def runner_failure(
    exit_code: int | None,
    stdout: str,
    stderr: str,
    *,
    device_log: str = "",
    timed_out: bool = False,
    command: str | None = None,
    device: str | None = None,
    silent_for_s: float | None = None,
) -> RunnerFailure:
    """Turn a failed run into one error line and a hint, the log attached.

    The message names the ExecuTorch error when the output has one, plus the
    missing operators or backends the runtime logged; `exit_code` None means
    the runner never reported one (it was killed on a deadline). `silent_for_s`
    (with timed_out): it was stopped by --idle-timeout after that much silence.
    """
    text = "\n".join(part for part in (stdout, stderr, device_log) if part)
    log = "\n".join(
        part
        for part in (
            f"$ {command}" if command else "",
            f"--- stdout\n{stdout.rstrip()}" if stdout.strip() else "",
            f"--- stderr\n{stderr.rstrip()}" if stderr.strip() else "",
            f"--- device log\n{device_log.rstrip()}" if device_log.strip() else "",
        )
        if part
    )
    et_error = find_et_error(text)
    operators = _dedupe(_MISSING_OPERATOR.findall(text))
    backends = _dedupe(_MISSING_BACKEND.findall(text))
    our_lines = _OUR_ERROR.findall(text)
    library = _MISSING_LIBRARY.search(text)

    if timed_out:
        message = (
            "runner timed out"
            if silent_for_s is None
            else f"runner said nothing for {silent_for_s:g} s and was stopped (--idle-timeout)"
        )
        if (parsed := parse_log(text)).iterations_ms:
            message += f" after {len(parsed.iterations_ms)} iteration(s)"
    elif our_lines:
        message = f"runner: {our_lines[-1].strip()}"
    elif library is not None:
        message = f"runner cannot load {library.group(1)}"
    elif et_error is not None:
        message = f"runner failed: {et_error}"
    elif exit_code is not None and (sig := _signal_name(exit_code)) is not None:
        message = f"runner was killed by {sig}"
    else:
        message = f"runner exited with status {exit_code}"

    if operators:
        shown = ", ".join(operators[:3]) + (
            f" and {len(operators) - 3} more" if len(operators) > 3 else ""
        )
        message += f"; missing operator(s): {shown}"
    if backends:
        message += f"; backend not linked: {', '.join(backends)}"
    if et_error is not None and str(et_error) not in message:
        message += f" [{et_error}]"
    if et_error is not None and et_error.cause and not timed_out and library is None:
        message += f"; likely cause: {et_error.cause}"

    hint: str
    if timed_out and silent_for_s is not None:
        hint = (
            "it may be hung (the log shows how far it got); if it is only slow to print, "
            "e.g. loading a large program, raise --idle-timeout"
        )
    elif timed_out:
        hint = "raise the deadline, lower --iterations, or check the device is not throttled"
    elif library is not None:
        hint = (
            "push the whole runner bundle: its shared libraries must sit in the same "
            "directory as the executable"
        )
    elif backends:
        hint = (
            f"the program was lowered for {', '.join(backends)}, which this runner does not "
            "link; build the .pte for a backend the runner has (xnnpack, portable), or build "
            "the runner with it (etdeploy runner build --backends ...)"
        )
    elif operators or (et_error is not None and et_error.name == "OperatorMissing"):
        hint = (
            "the runner has no kernel for that operator; build the runner with the library "
            "that registers it (etdeploy runner build --kernels ...), or lower with a "
            "partitioner that covers it"
        )
    elif _INPUT_SIZE.search(text) or "--inputs has" in text:
        hint = (
            "each input file must hold exactly the tensor's bytes in its default dim "
            "order; re-stage the inputs from the model's example shapes"
        )
    elif et_error is not None and et_error.hint:
        hint = et_error.hint
    elif exit_code is not None and _signal_name(exit_code) is not None:
        hint = "the runner crashed; the log below shows how far it got"
    else:
        hint = "see the runner log (--verbose shows it in full)"

    return RunnerFailure(
        message,
        hint,
        exit_code=exit_code,
        et_error=et_error,
        missing_operators=operators,
        missing_backends=backends,
        device=device,
        command=command,
        log=log,
    )
