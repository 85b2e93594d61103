"""The C++ runner (android_harness/) speaks the contract (etdeploy/runner/): built
against the installed executorch, run on .pte files lowered here with torch.export
and to_edge_transform_and_lower, its outputs compared with executorch's Python
runtime and eager torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etdeploy.runner import (
    EtError,
    RunnerFailure,
    RunnerInvocation,
    SampleFiles,
    output_files,
    parse_log,
    parse_result_json,
    result_from_log,
    runner_argv,
    runner_failure,
)
from etdeploy.runner_build import RunnerBundle, ensure_runner

RUN_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def runner_bundle() -> RunnerBundle:
    """The runner of the session's etdeploy cache (tests/conftest.py): the same build
    every other test runs, built once per session."""
    return ensure_runner()


@dataclass(frozen=True)
class Program:
    """A .pte lowered here, the eager module it came from, and its inputs."""

    path: Path
    eager: Any
    inputs: tuple[Any, ...]
    input_files: tuple[Path, ...]


def _image_like(*shape: int) -> Any:
    # Structured values (gradients and waves), not noise; deterministic.
    import torch

    n = 1
    for size in shape:
        n *= size
    ramp = torch.linspace(-1.0, 1.0, n)
    return (ramp + 0.25 * torch.sin(ramp * 17.0)).reshape(shape)


def _define_missing_op() -> None:
    """An operator (with the out variant to_executorch wants) that no kernel
    library in the runner registers."""
    import torch
    from torch.library import Library, impl

    library = Library("etdeploy_test", "DEF")
    library.define("twice(Tensor x) -> Tensor")
    library.define("twice.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
    impl(library, "twice", "CompositeExplicitAutograd")(lambda x: x * 2)

    def twice_out(x: Any, *, out: Any) -> Any:
        out.copy_(x * 2)
        return out

    impl(library, "twice.out", "CompositeExplicitAutograd")(twice_out)
    impl(library, "twice", "Meta")(lambda x: torch.empty_like(x))
    impl(library, "twice.out", "Meta")(lambda x, *, out: out)
    # Kept alive for the session: dropping the Library unregisters the op.
    _define_missing_op.library = library  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Program]:
    import executorch.kernels.quantized  # noqa: F401  registers the quantized out variants
    import torch
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    directory = tmp_path_factory.mktemp("programs")
    torch.manual_seed(0)

    class SmallCnn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8 * 8 * 8, 10)

        def forward(self, x: Any) -> Any:
            return self.fc(torch.relu(self.conv(x)).flatten(1))

    class TwoInTwoOut(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(6, 4)

        def forward(self, a: Any, b: Any) -> Any:
            return self.fc(a) * b, (a - 1.0).abs().sum(dim=1)

    class UsesMissingOp(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.ops.etdeploy_test.twice(x) + 1

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x: Any) -> Any:
            return torch.relu(self.fc(x))

    _define_missing_op()
    built: dict[str, Program] = {}

    def lower(name: str, module: Any, inputs: tuple[Any, ...], partitioner: list[Any],
              exported: Any = None, **kwargs: Any) -> None:  # fmt: skip
        exported = exported if exported is not None else torch.export.export(module, inputs)
        program = to_edge_transform_and_lower(exported, partitioner=partitioner, **kwargs)
        path = directory / f"{name}.pte"
        path.write_bytes(program.to_executorch().buffer)
        files = []
        for index, tensor in enumerate(inputs):
            file = directory / f"{name}-in-{index}.bin"
            file.write_bytes(tensor.contiguous().numpy().tobytes())
            files.append(file)
        built[name] = Program(path, module, inputs, tuple(files))

    cnn = SmallCnn().eval()
    image = (_image_like(1, 3, 8, 8),)
    lower("cnn_xnnpack", cnn, image, [XnnpackPartitioner()])
    lower("cnn_portable", cnn, image, [])
    two = TwoInTwoOut().eval()
    lower("two_io", two, (_image_like(2, 6), _image_like(2, 4) + 0.5), [XnnpackPartitioner()])

    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True)
    )
    prepared = prepare_pt2e(torch.export.export(cnn, image).module(), quantizer)
    prepared(*image)
    quantized = convert_pt2e(prepared)
    quantized_export = torch.export.export(quantized, image)
    lower("cnn_int8_xnnpack", quantized, image, [XnnpackPartitioner()], quantized_export)
    # Unpartitioned, the quantize/dequantize ops run on the quantized kernels library.
    lower("cnn_int8_portable", quantized, image, [], quantized_export)

    lower(
        "missing_op",
        UsesMissingOp(),
        (_image_like(4),),
        [],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    lower("vulkan", Tiny().eval(), (_image_like(1, 8),), [VulkanPartitioner()])
    return built


def run_runner(bundle: RunnerBundle, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bundle.executable_path), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def run_invocation(
    bundle: RunnerBundle, invocation: RunnerInvocation
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        runner_argv(bundle.executable_path, invocation),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def python_runtime_outputs(program: Program) -> list[np.ndarray]:
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(program.path).load_method("forward")
    return [t.numpy() for t in method.execute(list(program.inputs))]


def read_outputs(result_json: Path) -> tuple[list[np.ndarray], Any]:
    result = parse_result_json(result_json.read_text())
    arrays = [
        np.fromfile(o.file, dtype=np.dtype(o.dtype)).reshape(o.shape)
        for o in result.tensor_outputs()
    ]
    return arrays, result


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "eager_atol"),
    [
        ("cnn_xnnpack", 1e-4),
        ("cnn_portable", 1e-5),
        # int8 kernels against the converted (fake-quantized) eager graph: identical
        # here; 0.01 leaves about three output quantization steps for other CPUs.
        ("cnn_int8_xnnpack", 0.01),
        ("cnn_int8_portable", 0.01),
    ],
)
def test_runner_outputs_equal_python_runtime_and_match_eager(
    runner_bundle: RunnerBundle,
    programs: dict[str, Program],
    tmp_path: Path,
    name: str,
    eager_atol: float,
) -> None:
    program = programs[name]
    invocation = RunnerInvocation(
        model_path=str(program.path),
        input_paths=tuple(map(str, program.input_files)),
        output_base=str(tmp_path / "out"),
        result_json_path=str(tmp_path / "result.json"),
    )
    done = run_invocation(runner_bundle, invocation)
    assert done.returncode == 0, done.stderr
    (got,), result = read_outputs(tmp_path / "result.json")
    (reference,) = python_runtime_outputs(program)
    # Same kernels, same inputs, same thread count policy: identical bits.
    np.testing.assert_array_equal(got, reference)
    eager = program.eager(*program.inputs).detach().numpy()
    np.testing.assert_allclose(got, eager, atol=eager_atol, rtol=0)
    assert result.outputs[0].dtype == "float32"
    assert result.outputs[0].shape == (1, 10)


@pytest.mark.slow
def test_two_inputs_and_two_outputs_each_get_their_file(
    runner_bundle: RunnerBundle, programs: dict[str, Program], tmp_path: Path
) -> None:
    program = programs["two_io"]
    base = tmp_path / "out"
    done = run_runner(
        runner_bundle,
        f"--model_path={program.path}",
        f"--inputs={program.input_files[0]},{program.input_files[1]}",
        f"--output_file={base}",
        f"--result_json={tmp_path / 'r.json'}",
    )
    assert done.returncode == 0, done.stderr
    got, result = read_outputs(tmp_path / "r.json")
    assert [o.file for o in result.outputs] == output_files(base, [0, 1])
    assert [o.shape for o in result.outputs] == [(2, 4), (2,)]
    assert [i.shape for i in result.inputs] == [(2, 6), (2, 4)]
    for mine, reference in zip(got, python_runtime_outputs(program), strict=True):
        np.testing.assert_array_equal(mine, reference)
    eager = [t.detach().numpy() for t in program.eager(*program.inputs)]
    for mine, expected in zip(got, eager, strict=True):
        np.testing.assert_allclose(mine, expected, atol=1e-5)


@pytest.mark.slow
def test_result_json_agrees_with_the_log_lines(
    runner_bundle: RunnerBundle, programs: dict[str, Program], tmp_path: Path
) -> None:
    program = programs["cnn_xnnpack"]
    invocation = RunnerInvocation(
        model_path=str(program.path),
        input_paths=tuple(map(str, program.input_files)),
        num_executions=4,
        warmup=2,
        result_json_path=str(tmp_path / "r.json"),
    )
    done = run_invocation(runner_bundle, invocation)
    assert done.returncode == 0, done.stderr
    result = parse_result_json((tmp_path / "r.json").read_text())
    log = parse_log(done.stdout + done.stderr)
    assert log.completed and log.executed_count == 4
    # Warm-up runs are not timed iterations.
    assert len(result.iterations_ms) == 4 and result.warmup == 2
    assert log.iterations_ms == pytest.approx(result.iterations_ms, abs=1e-6)
    assert log.load_ms == pytest.approx(result.load_ms, abs=1e-6)
    # Each iteration's CPU time beside its wall time: positive, and no more than the
    # wall time times the threads that can run at once (the pool's workers count).
    assert len(result.iterations_cpu_ms) == 4
    threads = result.cpu_threads or 1
    for wall, cpu in zip(result.iterations_ms, result.iterations_cpu_ms, strict=True):
        assert 0 < cpu <= wall * threads * 1.05 + 0.05, (wall, cpu, threads)
    assert result.peak_rss_bytes is not None and result.peak_rss_bytes > 1 << 20
    assert result.runner_version and result.executorch_version
    assert result.cpu_threads is not None and result.cpu_threads >= 1
    assert result.method == "forward"
    assert result.inputs[0].file == str(program.input_files[0])
    assert not list(tmp_path.glob("*.tmp*")), "a temporary file was left behind"


@pytest.mark.slow
def test_flags_take_both_spellings_and_one_thread(
    runner_bundle: RunnerBundle, programs: dict[str, Program], tmp_path: Path
) -> None:
    program = programs["cnn_portable"]
    done = run_runner(
        runner_bundle,
        "--model_path", program.path,
        f"--inputs={program.input_files[0]}",
        "--num_executions", "2",
        "-cpu_threads=1",
        "--result_json", tmp_path / "r.json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = parse_result_json((tmp_path / "r.json").read_text())
    assert len(result.iterations_ms) == 2
    assert result.cpu_threads == 1


@pytest.mark.slow
def test_upstream_flavor_reads_timings_from_the_log_alone(
    runner_bundle: RunnerBundle, programs: dict[str, Program], tmp_path: Path
) -> None:
    """Our binary stands in for upstream's executor_runner here: the argv is
    upstream's (no --warmup, no --result_json), and only the log is read."""
    program = programs["cnn_xnnpack"]
    invocation = RunnerInvocation(
        model_path=str(program.path),
        input_paths=tuple(map(str, program.input_files)),
        output_base=str(tmp_path / "out"),
        num_executions=3,
        warmup=2,
        flavor="upstream",
    )
    done = run_invocation(runner_bundle, invocation)
    assert done.returncode == 0, done.stderr
    result = result_from_log(done.stdout + done.stderr, invocation)
    assert len(result.iterations_ms) == 3
    assert result.load_ms is not None and result.load_ms > 0
    assert (tmp_path / "out-0.bin").stat().st_size == 40


@pytest.mark.slow
def test_wrong_input_size_names_index_expected_and_given_bytes(
    runner_bundle: RunnerBundle, programs: dict[str, Program], tmp_path: Path
) -> None:
    program = programs["two_io"]
    short = tmp_path / "short.bin"
    short.write_bytes(b"\0" * 12)
    done = run_runner(
        runner_bundle, f"--model_path={program.path}", f"--inputs={program.input_files[0]},{short}"
    )
    assert done.returncode == 2
    assert "input 1" in done.stderr and "has 12 bytes, expected 32 bytes" in done.stderr
    failure = runner_failure(done.returncode, done.stdout, done.stderr)
    assert "input 1" in failure.message and "expected 32 bytes" in failure.message
    assert "dim order" in (failure.hint or "")
    assert failure.log and "has 12 bytes" in failure.log


@pytest.mark.slow
def test_wrong_input_count_is_refused(
    runner_bundle: RunnerBundle, programs: dict[str, Program]
) -> None:
    program = programs["two_io"]
    done = run_runner(
        runner_bundle, f"--model_path={program.path}", f"--inputs={program.input_files[0]}"
    )
    assert done.returncode == 2
    assert "--inputs has 1 file(s) but method forward has 2 input(s)" in done.stderr


@pytest.mark.slow
def test_truncated_program_fails_with_invalid_program(
    runner_bundle: RunnerBundle, programs: dict[str, Program], tmp_path: Path
) -> None:
    truncated = tmp_path / "truncated.pte"
    data = programs["cnn_xnnpack"].path.read_bytes()
    truncated.write_bytes(data[: len(data) // 3])
    done = run_runner(runner_bundle, f"--model_path={truncated}")
    assert done.returncode == 1
    failure = runner_failure(done.returncode, done.stdout, done.stderr)
    assert failure.et_error == EtError("InvalidProgram", 0x23)
    assert "program load failed: InvalidProgram (0x23)" in failure.message
    assert "truncated" in (failure.hint or "")


@pytest.mark.slow
def test_missing_operator_is_named(
    runner_bundle: RunnerBundle, programs: dict[str, Program]
) -> None:
    program = programs["missing_op"]
    done = run_runner(
        runner_bundle, f"--model_path={program.path}", f"--inputs={program.input_files[0]}"
    )
    assert done.returncode == 1
    assert "error: method load failed: OperatorMissing (0x14)" in done.stderr
    failure = runner_failure(done.returncode, done.stdout, done.stderr, command="etdeploy_runner")
    assert isinstance(failure, RunnerFailure)
    assert failure.missing_operators == ("etdeploy_test::twice.out",)
    assert "etdeploy_test::twice.out" in failure.message
    assert "likely cause:" in failure.message and "--kernels" in (failure.hint or "")
    assert failure.command == "etdeploy_runner"


@pytest.mark.slow
def test_backend_the_runner_does_not_link_is_named(
    runner_bundle: RunnerBundle, programs: dict[str, Program]
) -> None:
    program = programs["vulkan"]
    done = run_runner(runner_bundle, f"--model_path={program.path}")
    assert done.returncode == 1
    failure = runner_failure(done.returncode, done.stdout, done.stderr)
    assert failure.et_error == EtError("NotFound", 0x20)
    assert failure.missing_backends == ("VulkanBackend",)
    assert "VulkanBackend" in failure.message and "VulkanBackend" in (failure.hint or "")


@pytest.mark.slow
def test_etdump_records_every_execution(
    runner_bundle: RunnerBundle, programs: dict[str, Program], tmp_path: Path
) -> None:
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    program = programs["cnn_portable"]
    etdump = tmp_path / "run.etdump"
    done = run_runner(
        runner_bundle,
        f"--model_path={program.path}",
        f"--inputs={program.input_files[0]}",
        "--num_executions=2",
        "--warmup=1",
        f"--etdump_path={etdump}",
    )
    assert done.returncode == 0, done.stderr
    dump = deserialize_from_etdump_flatcc(etdump.read_bytes())
    executions = [
        event.profile_event.name
        for block in dump.run_data
        for event in block.events
        if event.profile_event is not None and event.profile_event.name == "Method::execute"
    ]
    assert len(executions) == 3  # one warm-up and two timed


@pytest.mark.slow
def test_later_samples_run_on_the_program_loaded_once_with_the_same_bits_as_calls_of_their_own(
    runner_bundle: RunnerBundle, programs: dict[str, Program], tmp_path: Path
) -> None:
    program = programs["cnn_xnnpack"]
    # Three different real-valued images: the first, mirrored, and darkened.
    image = program.inputs[0].numpy()
    files = []
    for k, variant in enumerate((image, image[..., ::-1], image * 0.25)):
        files.append(tmp_path / f"in{k}.bin")
        files[-1].write_bytes(np.ascontiguousarray(variant).tobytes())
    samples = tuple(
        SampleFiles((str(files[k]),), str(tmp_path / f"s{k}-out"), str(tmp_path / f"s{k}.json"))
        for k in (1, 2)
    )
    invocation = RunnerInvocation(
        model_path=str(program.path), input_paths=(str(files[0]),),
        output_base=str(tmp_path / "s0-out"), result_json_path=str(tmp_path / "s0.json"),
        num_executions=3, warmup=1, next_samples=samples,
    )  # fmt: skip
    done = run_invocation(runner_bundle, invocation)
    assert done.returncode == 0, done.stderr
    assert parse_log(done.stdout).load_ms is not None
    assert done.stdout.count("Model loaded in") == 1
    assert [line for line in done.stdout.splitlines() if line.startswith("Sample ")] == [
        "Sample 1 of 3", "Sample 2 of 3", "Sample 3 of 3",
    ]  # fmt: skip
    first = parse_result_json((tmp_path / "s0.json").read_text())
    assert len(first.iterations_ms) == 3 and first.warmup == 1
    for k in (1, 2):
        (batched,), result = read_outputs(tmp_path / f"s{k}.json")
        # Later samples run once each, on the load the first one paid for.
        assert len(result.iterations_ms) == 1 and result.warmup == 0
        assert result.load_ms == first.load_ms
        alone = run_invocation(
            runner_bundle,
            RunnerInvocation(
                model_path=str(program.path), input_paths=(str(files[k]),),
                output_base=str(tmp_path / f"alone{k}-out"),
                result_json_path=str(tmp_path / f"alone{k}.json"),
            ),
        )  # fmt: skip
        assert alone.returncode == 0, alone.stderr
        (own,), _ = read_outputs(tmp_path / f"alone{k}.json")
        np.testing.assert_array_equal(batched, own)
    # Different images, different outputs: no sample was given another's result.
    (zeroth,), _ = read_outputs(tmp_path / "s0.json")
    (second,), _ = read_outputs(tmp_path / "s2.json")
    assert not np.array_equal(zeroth, second)


@pytest.mark.slow
def test_a_flag_of_the_whole_call_after_next_sample_is_refused_naming_it(
    runner_bundle: RunnerBundle, programs: dict[str, Program]
) -> None:
    done = run_runner(
        runner_bundle,
        f"--model_path={programs['cnn_portable'].path}",
        "--next_sample",
        "--warmup=2",
    )
    assert done.returncode == 2
    assert "--warmup applies to the whole call" in done.stderr


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="ldd and ELF RUNPATH are Linux's")
def test_bundle_runs_from_a_copy_with_its_own_libraries(
    runner_bundle: RunnerBundle, programs: dict[str, Program], tmp_path: Path
) -> None:
    """What a device gets: the bundle directory copied elsewhere, run there."""
    copy = tmp_path / "pushed"
    copy.mkdir()
    for path in runner_bundle.files:
        shutil.copy2(path, copy / path.name)
    moved = RunnerBundle(
        abi=runner_bundle.abi,
        directory=copy,
        executable=runner_bundle.executable,
        files=tuple(copy / path.name for path in runner_bundle.files),
    )
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    ldd = subprocess.run(
        ["ldd", str(moved.executable_path)], capture_output=True, text=True, env=env, check=True
    )
    resolved = {
        line.split("=>")[0].strip(): line.split("=>")[1].split("(")[0].strip()
        for line in ldd.stdout.splitlines()
        if "libexecutorch" in line and "=>" in line
    }
    assert set(resolved) == {path.name for path in moved.libraries}
    assert all(Path(target).parent == copy for target in resolved.values()), resolved
    program = programs["cnn_xnnpack"]
    done = run_runner(moved, f"--model_path={program.path}", f"--inputs={program.input_files[0]}")
    assert done.returncode == 0, done.stderr
    assert parse_log(done.stdout).completed


@pytest.mark.slow
def test_describe_lists_the_kernel_registry_the_backends_and_the_build(
    runner_bundle: RunnerBundle,
) -> None:
    from importlib import metadata

    from etdeploy.runner.describe import parse_describe

    done = run_runner(runner_bundle, "--describe")
    assert done.returncode == 0, done.stderr
    described = parse_describe(done.stdout)
    assert (
        described.executorch_version.split("+")[0] == metadata.version("executorch").split("+")[0]
    )
    assert (described.kind, described.abi) == ("host", runner_bundle.abi)
    assert described.backends == ("XnnpackBackend",)
    assert described.kernel_libraries == ("optimized", "quantized")
    # The optimized and quantized kernels and the runtime's primitive operators,
    # each a fallback kernel (no dtype specialisation in the wheel's libraries).
    for op in ("aten::add.out", "aten::convolution.out", "quantized_decomposed::quantize_per_tensor.out",
               "aten::sym_size.int"):  # fmt: skip
        assert described.kernels.get(op) == frozenset({None}), op
    assert described.capabilities == ("generate",) and described.can("generate")
    assert parse_describe(json.dumps(described.to_json())) == described


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--generate", "--prompt_len=2", "--max_new_tokens=3", "--generated_file=g",
          "--result_json=r"], "--generate needs --token_ids"),
        (["--generate", "--token_ids=i", "--prompt_len=0", "--max_new_tokens=3",
          "--generated_file=g", "--result_json=r"], "--prompt_len and --max_new_tokens of at least 1"),
        (["--generate", "--token_ids=i", "--prompt_len=2", "--max_new_tokens=3",
          "--generated_file=g", "--result_json=r", "--inputs=x.bin"],
         "flag --inputs does not apply to --generate"),
        (["--token_ids=i", "--prompt_len=2"], "go with --generate"),
    ],
)  # fmt: skip
def test_generation_flags_out_of_place_are_one_usage_error_line(
    runner_bundle: RunnerBundle, args: list[str], error: str
) -> None:
    done = run_runner(runner_bundle, "--model_path=m.pte", *args)
    assert done.returncode == 2
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert error in line


@pytest.mark.slow
def test_unknown_flag_is_a_usage_error(runner_bundle: RunnerBundle) -> None:
    done = run_runner(runner_bundle, "--model_path=m.pte", "--print_everything")
    assert done.returncode == 2
    assert "error: unknown flag --print_everything" in done.stderr
