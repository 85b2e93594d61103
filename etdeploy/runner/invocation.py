"""How etdeploy invokes a runner: the command line of one call, the samples it
runs after its first, and the files it writes. Paths are as the runner sees them
(on the device)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePath

from etdeploy.errors import UsageError

FLAVORS = ("etdeploy", "upstream")


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
