"""Preflight: before anything is pushed, the device's runner (its --describe) is
held against what the program needs (its operators with their kernel keys, its
delegates, its executorch), and a program it cannot run is bad input (exit 2)
naming what is missing and where to get it.

Real components throughout: the runner built from android_harness/ (the default
build, one without XNNPACK, one with a custom kernel library built here from
tests/data/models/custom_op_kernels/), programs lowered by etdeploy's build, the
local device, the real adb server with a loopback phone, and `etdeploy farm`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from etdeploy.builder.manifest import read_manifest
from etdeploy.cli import app
from etdeploy.devices.adb import AdbDevice, AdbSettings
from etdeploy.devices.local import LocalDevice
from etdeploy.errors import EXIT_BAD_INPUT, RunnerError, UsageError
from etdeploy.pipeline import RunJob, run_job
from etdeploy.preflight import PreflightError, program_needs, version_verdict
from etdeploy.preflight.describe_runner import _cache_path, _elf_interpreter
from etdeploy.preflight.needs import kernel_key, key_tensors
from etdeploy.runner_build import RunnerBundle, ensure_runner, executorch_package_dir, find_tool
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.farm_fixtures import write_spec


def run_document(job: RunJob, device: Any) -> dict[str, Any]:
    """run_job's result as the document a user reads."""
    return run_job(job, device).to_json()


MODELS = Path(__file__).resolve().parent.parent / "data" / "models"
CUSTOM_OP = f"{MODELS / 'custom_op.py'}:build"
CUSTOM_OP_3D = f"{MODELS / 'custom_op.py'}:build_3d"
LLM_SDPA = f"{MODELS / 'llm_sdpa.py'}:build"
QUICK = {"iterations": 1, "warmup": 0}


def cli(*args: str | Path) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


# -- what the program needs, and the policy (no runner) ---------------------------------------


def test_a_kernel_key_is_written_as_the_runtime_writes_it() -> None:
    # make_kernel_key_string (runtime/kernel/operator_registry.cpp): per tensor
    # "<ScalarType>;<dim order>", joined by "|", after "v1/"; "" without tensors.
    assert kernel_key([(6, (0, 1)), (6, (0, 1)), (4, ())]) == "v1/6;0,1|6;0,1|4;"
    assert kernel_key([]) == ""
    assert key_tensors("v1/6;0,1,2|1;0") == ("float32 (0,1,2)", "int8 (0)")


@pytest.mark.parametrize(
    ("program", "runtime", "status"),
    [
        ("1.5.1", "1.5.1+cpu", "ok"),  # the same release
        ("1.5.0", "1.5.1", "ok"),  # an older patch of it
        ("1.4.2", "1.5.1", "ok"),  # the next minor release: promised
        ("1.3.0", "1.5.1", "warn"),  # two releases on: beyond the promise
        ("1.5.2", "1.5.1", "warn"),  # newer than the runtime: no forward promise
        ("1.6.0", "1.5.1", "warn"),
        ("1.5.0", "2.0.0", "warn"),  # a major release: only if 1.5 was the last 1.x
        (None, "1.5.1", "unknown"),
    ],
)
def test_a_version_pairing_is_judged_by_executorchs_compatibility_policy(
    program: str | None, runtime: str, status: str
) -> None:
    verdict = version_verdict(program, runtime)
    assert verdict.status == status, verdict.text
    if status == "warn":
        assert "COMPATIBILITY.md" in verdict.text and "read 2026-12-03" in verdict.text


# -- programs and runners ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ptes() -> dict[str, Path]:
    """The programs, built (and cached) by etdeploy's own build."""
    from etdeploy.builder import BuildOptions, build

    wanted = {
        "llm": (LLM_SDPA, "xnnpack"),
        "custom": (CUSTOM_OP, "portable"),
        "custom_3d": (CUSTOM_OP_3D, "portable"),
        "digits": ("digits", "xnnpack"),
        "digits_portable": ("digits", "portable"),
    }
    return {name: build(model, BuildOptions(backend=b)).pte for name, (model, b) in wanted.items()}


@pytest.fixture(scope="module")
def host_runner() -> RunnerBundle:
    return ensure_runner()


@pytest.fixture(scope="module")
def runner_without_xnnpack() -> RunnerBundle:
    return ensure_runner(backends=())


@pytest.fixture(scope="module")
def custom_kernels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """libetdeploy_custom_kernels.so: the custom op's kernel, built against the wheel."""
    cmake = find_tool("cmake")
    assert cmake is not None
    source = MODELS / "custom_op_kernels"
    build = tmp_path_factory.mktemp("custom-kernels")
    configure = [cmake, "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 f"-DCMAKE_PREFIX_PATH={executorch_package_dir()}"]  # fmt: skip
    if (ninja := find_tool("ninja")) is not None:
        configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    for argv in (configure, [cmake, "--build", build]):
        done = subprocess.run(
            [str(a) for a in argv], capture_output=True, text=True, timeout=600, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
    return build / "libetdeploy_custom_kernels.so"


@pytest.fixture(scope="module")
def custom_runner(custom_kernels: Path) -> RunnerBundle:
    return ensure_runner(kernels=[str(custom_kernels)])


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    """A real-valued input for the custom-op models (not their zero examples)."""
    path = tmp_path / "x.npy"
    np.save(path, np.linspace(-2, 2, 4, dtype=np.float32).reshape(1, 4))
    return path


def forget_description(bundle: RunnerBundle) -> None:
    _cache_path(bundle).unlink(missing_ok=True)


# -- the program's side ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_program_says_what_it_calls_and_needs_without_torch(ptes: dict[str, Path]) -> None:
    code = (
        "import json, sys\n"
        "from etdeploy.preflight import program_needs\n"
        f"needs = program_needs({str(ptes['llm'])!r})\n"
        "print(json.dumps({'needs': needs.to_json(), 'torch': 'torch' in sys.modules,\n"
        "                  'executorch': 'executorch' in sys.modules}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    found = json.loads(done.stdout)
    assert found["torch"] is False and found["executorch"] is False
    assert "llama::custom_sdpa.out" in found["needs"]["operators"]
    assert found["needs"]["backends"] == ["XnnpackBackend"]

    custom = program_needs(ptes["custom"])
    (triple,) = [op for op in custom.operators if op.name == "etdeploy_custom::triple.out"]
    # x, out and the returned value: three float32 2-D tensors.
    assert triple.kernel_keys == ("v1/6;0,1|6;0,1|6;0,1",) and triple.methods == ("forward",)
    assert custom.backends == {}
    built = read_manifest(ptes["digits"])
    assert built is not None
    old = dataclasses.replace(built, versions={"executorch": "1.5.1"})
    digits = program_needs(ptes["digits"], old)
    assert digits.backends == {"XnnpackBackend": ("forward",)} and digits.operators == ()
    assert digits.executorch_version == "1.5.1" and digits.file_identifier == "ET12"


# -- run: refused before anything is pushed -----------------------------------------------------------


@pytest.mark.slow
def test_the_llm_custom_op_model_exits_2_before_anything_is_pushed(tmp_path: Path) -> None:
    x = tmp_path / "x.npy"
    np.save(x, np.linspace(-1, 1, 24, dtype=np.float32).reshape(1, 3, 8))
    device = LocalDevice(workdir=tmp_path / "device")
    with pytest.raises(PreflightError) as raised:
        run_job(RunJob(model=LLM_SDPA, inputs=(str(x),), **QUICK), device)
    error = raised.value
    assert error.exit_code == EXIT_BAD_INPUT
    assert "llama::custom_sdpa.out" in error.message and "nothing was pushed" in error.message
    # The wheel's only copy needs libtorch and Python: the hint says so and how to get one.
    assert "libcustom_ops_aot_lib.so" in (error.hint or "")
    assert "EXECUTORCH_BUILD_KERNELS_LLM=ON" in (error.hint or "")
    assert "--kernels" in (error.hint or "")
    assert not (tmp_path / "device").exists()

    done = cli("run", LLM_SDPA, "--inputs", x, "--json", tmp_path / "r.json", "-n", "1")
    assert done.exit_code == 2, done.output
    errors = [line for line in done.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "llama::custom_sdpa.out" in errors[0], done.output
    assert "hint:" in done.output and "Traceback" not in done.output
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["status"] == "error" and document["exit_code"] == 2
    assert document["error"]["kind"] == "PreflightError"
    assert document["error"]["infrastructure"] is False


@pytest.mark.slow
def test_a_custom_op_is_refused_then_runs_once_the_runner_links_its_kernel_library(
    custom_runner: RunnerBundle, custom_kernels: Path, sample: Path, tmp_path: Path
) -> None:
    device = LocalDevice(workdir=tmp_path / "device")
    job = RunJob(model=CUSTOM_OP, backend="portable", inputs=(str(sample),), **QUICK)
    with pytest.raises(PreflightError) as raised:
        run_job(job, device)
    assert "etdeploy_custom::triple.out" in raised.value.message
    assert "no library in the installed executorch registers" in (raised.value.hint or "")
    assert not (tmp_path / "device").exists()

    assert custom_kernels.name in {p.name for p in custom_runner.libraries}
    result = run_document(dataclasses.replace(job, runner=custom_runner.directory), device)
    assert result["status"] == "passed", result["verdict"]["reason"]
    assert result["preflight"]["status"] == "passed"
    # 3 * x + 1 on the device equals eager.
    assert result["verdict"]["worst"]["max_abs"] < 1e-6


@pytest.mark.slow
def test_a_kernel_built_for_other_dim_orders_is_refused_as_the_runtime_refuses_it(
    custom_runner: RunnerBundle, ptes: dict[str, Path], tmp_path: Path
) -> None:
    """The test kernel library registers triple.out for 2-D float32 only: preflight's
    kernel key must be the runtime's, so both accept the 2-D program and both
    refuse the 3-D one."""
    from etdeploy.preflight import check

    device = LocalDevice(workdir=tmp_path / "device")
    flat = check(device, custom_runner, ptes["custom"])
    deep = check(device, custom_runner, ptes["custom_3d"])
    assert flat.status == "passed"
    assert deep.status == "failed"
    (missing,) = deep.missing_operators
    assert missing.name == "etdeploy_custom::triple.out"
    assert missing.tensors == (("float32 (0,1,2)",) * 3,)
    assert missing.available == (("float32 (0,1)",) * 3,)
    for pte, loads in ((ptes["custom"], True), (ptes["custom_3d"], False)):
        done = subprocess.run(
            [str(custom_runner.executable_path), f"--model_path={pte}"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert (done.returncode == 0) is loads, done.stderr
        assert ("OperatorMissing (0x14)" in done.stderr) is not loads


@pytest.mark.slow
def test_an_xnnpack_program_on_a_runner_without_xnnpack_is_refused_naming_the_backend(
    runner_without_xnnpack: RunnerBundle, ptes: dict[str, Path], tmp_path: Path
) -> None:
    from etdeploy.preflight import check

    device = LocalDevice(workdir=tmp_path / "device")
    with pytest.raises(PreflightError) as raised:
        run_job(RunJob(model="digits", runner=runner_without_xnnpack.directory, **QUICK), device)
    assert "XnnpackBackend" in raised.value.message
    assert "etdeploy runner build --backends xnnpack" in (raised.value.hint or "")
    assert not (tmp_path / "device").exists()
    # The same model without a delegate is fine on that runner.
    assert check(device, runner_without_xnnpack, ptes["digits_portable"]).status == "passed"


# -- where the runner is asked, and the cache --------------------------------------------------------


@pytest.mark.slow
def test_a_warm_run_reads_the_description_from_the_cache(
    host_runner: RunnerBundle, tmp_path: Path
) -> None:
    device = LocalDevice(workdir=tmp_path / "device")
    forget_description(host_runner)
    first = run_document(RunJob(model="digits", **QUICK), device)
    second = run_document(RunJob(model="digits", **QUICK), device)
    assert first["preflight"]["source"] == "host" and second["preflight"]["source"] == "cache"
    assert second["preflight"]["status"] == "passed"
    assert second["preflight"]["runner"]["backends"] == ["XnnpackBackend"]
    assert second["preflight"]["version"]["status"] == "ok"


@pytest.mark.slow
def test_with_upstreams_runner_preflight_is_skipped_with_a_note(
    host_runner: RunnerBundle, tmp_path: Path
) -> None:
    # Our binary renamed: an executor_runner is taken as upstream's (no --describe).
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    for path in host_runner.files:
        name = "executor_runner" if path.name == host_runner.executable else path.name
        shutil.copy2(path, upstream / name)
    result = run_document(
        RunJob(model="digits", runner=upstream / "executor_runner", **QUICK),
        LocalDevice(workdir=tmp_path / "device"),
    )
    assert result["status"] == "passed"
    assert result["preflight"]["status"] == "skipped"
    assert any("upstream's executor_runner" in w for w in result["warnings"])


@pytest.mark.slow
def test_a_runner_that_does_not_start_is_a_runner_failure_before_the_program_is_pushed(
    host_runner: RunnerBundle, tmp_path: Path
) -> None:
    # A bundle missing one of its libraries (a broken copy): --describe cannot start.
    broken = tmp_path / "broken"
    shutil.copytree(host_runner.directory, broken)
    (broken / "libexecutorch_kernels_optimized.so").unlink()
    manifest = json.loads((broken / "bundle.json").read_text())
    manifest["files"].remove("libexecutorch_kernels_optimized.so")
    manifest["key"] = hashlib.sha256(b"broken" + manifest["key"].encode()).hexdigest()
    (broken / "bundle.json").write_text(json.dumps(manifest))
    with pytest.raises(RunnerError) as raised:
        run_job(RunJob(model="digits", runner=broken, **QUICK), LocalDevice(workdir=tmp_path / "d"))
    assert "libexecutorch_kernels_optimized.so" in raised.value.message
    assert raised.value.exit_code == 3
    assert not (tmp_path / "d").exists()


# -- over adb ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbTestbed]:
    with adb_testbed(tmp_path_factory.mktemp("adb"), ("phone",)) as testbed:
        yield testbed


@pytest.fixture
def phone_device(bed: AdbTestbed) -> Iterator[AdbDevice]:
    phone = bed.phones["phone"]
    shutil.rmtree(phone.device_path("/data/local/tmp/etdeploy"), ignore_errors=True)
    yield AdbDevice("pixel8", AdbSettings(port=bed.server.port, serial=phone.address))
    phone.faults.fail_shell_pattern = None


def loader_bundle(bundle: RunnerBundle, directory: Path) -> Path:
    """`bundle` as a runner this machine cannot tell it can execute: a shell script
    that starts the real binary through the dynamic loader, the shape of the
    self-contained arm64 bundle (its own loader beside it). Preflight must ask it
    on the device, pushing only the runner."""
    directory.mkdir()
    for path in bundle.libraries:
        shutil.copy2(path, directory / path.name)
    shutil.copy2(bundle.executable_path, directory / "etdeploy_runner.bin")
    loader = _elf_interpreter(bundle.executable_path)
    assert loader is not None
    script = directory / "etdeploy_runner"
    script.write_text(f'#!/bin/sh\nexec {loader} "$(dirname "$0")/etdeploy_runner.bin" "$@"\n')
    script.chmod(0o755)
    manifest = dict(bundle.info)
    manifest["files"] = sorted(p.name for p in directory.iterdir())
    manifest["key"] = hashlib.sha256(b"loader" + bundle.key.encode()).hexdigest()
    (directory / "bundle.json").write_text(json.dumps(manifest))
    return directory


@pytest.mark.slow
def test_over_adb_a_refused_program_leaves_the_phone_untouched(
    bed: AdbTestbed, phone_device: AdbDevice, host_runner: RunnerBundle, sample: Path
) -> None:
    # The host build runs on this machine: it is asked here, the phone is not touched.
    job = RunJob(model=CUSTOM_OP, backend="portable", inputs=(str(sample),),
                 runner=host_runner.directory, **QUICK)  # fmt: skip
    with pytest.raises(PreflightError) as raised:
        run_job(job, phone_device)
    assert "etdeploy_custom::triple.out" in raised.value.message
    assert raised.value.report.device == "pixel8"
    assert not bed.phones["phone"].device_path("/data/local/tmp/etdeploy").exists()


@pytest.mark.slow
def test_over_adb_a_runner_only_the_phone_can_run_is_asked_there_once(
    bed: AdbTestbed, phone_device: AdbDevice, runner_without_xnnpack: RunnerBundle, tmp_path: Path
) -> None:
    from etdeploy.runner_build import runner_from_path

    wrapped = runner_from_path(loader_bundle(runner_without_xnnpack, tmp_path / "wrapped"))
    forget_description(wrapped)
    phone = bed.phones["phone"]
    with pytest.raises(PreflightError) as raised:
        run_job(RunJob(model="digits", runner=wrapped.directory, **QUICK), phone_device)
    assert "XnnpackBackend" in raised.value.message
    assert "the program was not pushed" in raised.value.message
    assert raised.value.report.source == "device"
    root = phone.device_path("/data/local/tmp/etdeploy")
    assert sorted(p.name for p in (root / "runners").iterdir()) == [f"x86_64-{wrapped.key[:16]}"]
    assert not (root / "programs").exists() and not (root / "inputs").exists()

    # Asked once per bundle: the phone refusing every --describe changes nothing now.
    phone.faults.fail_shell_pattern = "--describe"
    with pytest.raises(PreflightError) as again:
        run_job(RunJob(model="digits", runner=wrapped.directory, **QUICK), phone_device)
    assert again.value.report.source == "cache"


@pytest.mark.slow
def test_over_adb_the_runner_preflight_pushed_is_not_pushed_again(
    bed: AdbTestbed, phone_device: AdbDevice, host_runner: RunnerBundle, tmp_path: Path
) -> None:
    from etdeploy.runner_build import runner_from_path

    wrapped = runner_from_path(loader_bundle(host_runner, tmp_path / "wrapped"))
    forget_description(wrapped)
    result = run_document(RunJob(model="digits", runner=wrapped.directory, **QUICK), phone_device)
    assert result["status"] == "passed", result["verdict"]["reason"]
    assert result["preflight"]["source"] == "device"
    # Deploy found every runner file where preflight put it.
    assert result["deploy"]["files_skipped"] >= len(wrapped.files)
    runner_bytes = sum(p.stat().st_size for p in wrapped.files)
    assert result["deploy"]["bytes_sent"] < runner_bytes


# -- farm, runner build ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_farm_job_that_fails_preflight_is_bad_input_and_not_retried(
    tmp_path: Path, sample: Path
) -> None:
    spec = write_spec(tmp_path / "n.toml", {
        "models": [CUSTOM_OP], "backends": ["portable"], "devices": ["local"],
        "inputs": [str(sample)], "retries": 2, "backoff_s": 5, **QUICK,
    })  # fmt: skip
    done = cli("farm", spec, "--out", tmp_path / "out")
    assert done.exit_code == 2, done.output
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    (result,) = [json.loads(line) for line in lines if line.strip()]
    assert result["status"] == "error" and len(result["attempts"]) == 1
    assert result["error"]["kind"] == "PreflightError"
    assert result["error"]["infrastructure"] is False
    assert "etdeploy_custom::triple.out" in result["error"]["message"]


def test_runner_build_refuses_what_it_cannot_link_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as llm:
        ensure_runner(kernels=["llm"])
    assert "libcustom_ops_aot_lib.so" in llm.value.message
    assert "EXECUTORCH_BUILD_KERNELS_LLM=ON" in (llm.value.hint or "")
    with pytest.raises(UsageError, match="not a kernel library"):
        ensure_runner(kernels=[str(tmp_path / "missing.so")])
    with pytest.raises(UsageError, match="unknown backend"):
        ensure_runner(backends=["tpu"])
    done = cli("runner", "build", "--kernels", "llm")
    assert done.exit_code == 2 and "export-time plugin" in done.output


@pytest.mark.slow
def test_the_cache_entry_of_a_rebuilt_bundle_is_not_reused(
    host_runner: RunnerBundle, tmp_path: Path
) -> None:
    from etdeploy.preflight.describe_runner import _read_cache, describe_runner

    device = LocalDevice(workdir=tmp_path / "device")
    asked = describe_runner(device, host_runner)
    assert asked.description is not None and _read_cache(host_runner) is not None
    rebuilt = dataclasses.replace(host_runner, info={**host_runner.info, "build_id": "another"})
    assert _read_cache(rebuilt) is None
