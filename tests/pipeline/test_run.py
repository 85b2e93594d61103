"""`etdeploy run --device local`: the real runner, built from android_harness/
against the installed executorch, runs real programs on real inputs, and the
pipeline says whether they compute what eager PyTorch computes.

Through the CLI where the user-facing contract is the point (exit codes, one
line and a hint, the result file); through `run_job` where the result document
is.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.devices.local import LocalDevice
from etdeploy.pipeline import RESULT_SCHEMA, RunJob, run_job
from etdeploy.pipeline.execute import call_deadline_s
from etdeploy.pipeline.plan import plan_of

pytestmark = pytest.mark.slow

MODELS = Path(__file__).parent.parent / "data" / "models"
TWO_IO = f"{MODELS / 'two_io.py'}:build"
CUSTOM_OP = f"{MODELS / 'custom_op.py'}:build"


def run(job: RunJob, device: LocalDevice) -> dict[str, Any]:
    """run_job's result as the document a user reads (etdeploy.result/1)."""
    return run_job(job, device).to_json()


def cli(*args: str | Path) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def device(tmp_path: Path) -> LocalDevice:
    return LocalDevice(workdir=tmp_path / "device")


@pytest.fixture(scope="module")
def two_io_samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three real-valued samples for the two-input model (not its zero examples)."""
    directory = tmp_path_factory.mktemp("two_io_samples")
    rng = np.random.default_rng(7)
    for i in range(3):
        np.savez(
            directory / f"s{i}.npz",
            left=np.linspace(-2, 2, 12, dtype=np.float32).reshape(2, 6) * (i + 1),
            right=rng.uniform(-1, 1, size=(2, 3)).astype(np.float32),
        )
    return directory


# -- passing runs --------------------------------------------------------------------


def test_digits_fp32_passes_with_per_output_metrics_latency_and_memory(device: LocalDevice) -> None:
    result = run(RunJob(model="digits", iterations=7, warmup=2), device)

    assert result["schema"] == RESULT_SCHEMA
    assert result["status"] == "passed" and result["exit_code"] == 0
    verdict = result["verdict"]
    # digits' own samples: its 360 held-out images, one execution each, one output.
    assert len(result["inputs"]["samples"]) == 360
    assert {m["name"] for m in verdict["metrics"]} == {"logits"}
    assert all(m["allclose"] and m["top1_agree"] for m in verdict["metrics"])
    assert verdict["top1_agreement"] == 1.0
    assert verdict["worst"]["max_abs"] < 1e-4
    latency = result["latency_ms"]
    assert latency["n"] == 7 and len(latency["iterations"]) == 7
    assert latency["min"] <= latency["median"] <= latency["p90"] <= latency["max"]
    assert latency["load"] is not None and latency["load"] > 0
    assert result["memory"]["planned_bytes"] > 0
    assert result["memory"]["peak_rss_bytes"] > 0
    assert result["artifact"]["delegation"]["share"] == 1.0
    assert result["runner"]["flavor"] == "etdeploy"
    assert result["device"]["transport"] == "local"
    # The job directory is gone unless --keep.
    assert not list((Path(device.workdir)).glob("2*-*"))


def test_a_second_run_sends_no_bytes(device: LocalDevice) -> None:
    first = run(RunJob(model="digits", iterations=1, warmup=0), device)
    second = run(RunJob(model="digits", iterations=1, warmup=0), device)
    assert first["deploy"]["bytes_sent"] > 0
    assert second["deploy"]["bytes_sent"] == 0
    assert second["deploy"]["files_sent"] == 0
    assert (
        second["deploy"]["files_skipped"]
        == first["deploy"]["files_sent"] + first["deploy"]["files_skipped"]
    )


def test_every_sample_runs_in_one_runner_call_on_the_program_loaded_once(
    device: LocalDevice,
) -> None:
    result = run(RunJob(model="digits", iterations=3, warmup=1), device)
    assert result["status"] == "passed", result["verdict"]["reason"]
    # 360 samples in one call (one log), not 360: the timed one first, then the others
    # once each from the samples file, their outputs in the call's two batch files.
    (log,) = result["logs"]
    assert log.count("Model loaded in") == 1
    assert "Sample 1 of 360" in log and "Warm-up 1 of 1" in log
    assert "Ran 360 sample(s)" in log and "Writing output to file" not in log
    # Each sample still judged against its own eager output: a sample handed
    # another's result would miss by far more than float rounding.
    verdict = result["verdict"]
    assert verdict["top1_agreement"] == 1.0 and verdict["worst"]["max_abs"] < 1e-4
    assert len(result["latency_ms"]["iterations"]) == 3


def test_a_call_that_runs_more_executions_than_the_timed_sample_gets_a_longer_deadline() -> None:
    job = plan_of(RunJob(model="digits", iterations=10, warmup=3, deadline_s=60)).execute
    assert call_deadline_s(job, 13) == 60  # the timed sample's own executions
    assert call_deadline_s(job, 13 + 13) == 120  # and as many again for other samples
    assert call_deadline_s(job, 4) == 60  # never less than --deadline


def test_digits_int8_is_judged_by_sqnr_and_top1(device: LocalDevice) -> None:
    result = run(RunJob(model="digits", quantize="int8", iterations=3, warmup=1), device)
    assert result["artifact"]["quantization"] == "int8"
    verdict = result["verdict"]
    assert result["status"] == "passed", verdict["reason"]
    assert "SQNR" in verdict["reason"] and "top-1" in verdict["reason"]
    # int8 error is far above an fp32 tolerance, yet the signal and argmax hold.
    assert verdict["worst"]["max_abs"] > 1e-4
    assert verdict["worst"]["sqnr_db"] >= 15
    assert verdict["top1_agreement"] >= 0.9


def test_two_inputs_and_two_outputs_are_each_verified(
    device: LocalDevice, two_io_samples: Path
) -> None:
    result = run(
        RunJob(model=TWO_IO, inputs=(str(two_io_samples),), iterations=2, warmup=1), device
    )
    assert result["status"] == "passed", result["verdict"]["reason"]
    assert result["inputs"]["names"] == ["left", "right"]
    metrics = result["verdict"]["metrics"]
    assert len(metrics) == 3 * 2
    assert {(m["sample"], m["output"]) for m in metrics} == {
        (f"s{i}", o) for i in range(3) for o in (0, 1)
    }
    assert {tuple(m["shape"]) for m in metrics} == {(2, 4), (2, 1)}


def test_host_check_compares_device_and_host_runtime(
    device: LocalDevice, two_io_samples: Path
) -> None:
    result = run(
        RunJob(
            model=TWO_IO, inputs=(str(two_io_samples),), iterations=1, warmup=0, host_check=True
        ),
        device,
    )
    host = result["host_check"]
    # The same runtime on the same CPU: bit for bit.
    assert host["device_vs_host"]["passed"] and host["device_vs_host"]["worst"]["max_abs"] == 0.0
    assert host["host_vs_reference"]["passed"]


def test_upstream_flavor_reads_the_log_and_takes_shapes_from_the_reference(
    device: LocalDevice, two_io_samples: Path, tmp_path: Path
) -> None:
    from etdeploy.runner_build import ensure_runner

    # Our binary renamed and run with upstream's flags only: no --result_json, no
    # --warmup. Its libraries sit beside it, as a dynamically linked upstream
    # build's would.
    bundle = ensure_runner()
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    for path in bundle.files:
        target = upstream / ("executor_runner" if path.name == bundle.executable else path.name)
        target.write_bytes(path.read_bytes())
        target.chmod(0o755)
    result = run(
        RunJob(
            model=TWO_IO, inputs=(str(two_io_samples),), iterations=4, warmup=2,
            runner=upstream / "executor_runner",
        ),
        device,
    )  # fmt: skip
    assert result["runner"]["flavor"] == "upstream"
    assert result["status"] == "passed", result["verdict"]["reason"]
    # The warm-ups ran as the first timed iterations and were dropped again.
    assert result["latency_ms"]["n"] == 4
    assert result["memory"]["peak_rss_bytes"] is None


# -- the CLI ---------------------------------------------------------------------------


def test_cli_run_digits_prints_the_table_and_passes(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    done = cli("run", "digits", "--device", "local", "-n", "3", "--warmup", "1", "--json", out)
    assert done.exit_code == 0, done.output
    assert "PASS" in done.stdout and "logits" in done.stdout and "latency:" in done.stdout
    document = json.loads(out.read_text())
    assert document["status"] == "passed" and document["schema"] == RESULT_SCHEMA
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_an_altered_weight_fails_verification_and_names_the_output(tmp_path: Path) -> None:
    from etdeploy.pte.reader import read_pte

    built = cli("build", "digits", "--backend", "portable", "-o", tmp_path / "digits.pte")
    assert built.exit_code == 0, built.output
    pte = tmp_path / "digits.pte"
    data = bytearray(pte.read_bytes())
    # The classifier's weight matrix: the largest 2-D float constant.
    weight = max(
        (
            c
            for c in read_pte(pte).constant_tensors
            if c.dtype == "float" and len(c.sizes) == 2 and c.offset
        ),
        key=lambda c: c.nbytes,
    )
    values = np.frombuffer(
        bytes(data[weight.offset : weight.offset + weight.nbytes]), dtype=np.float32
    ).copy()
    values[: values.size // 2] *= -3.0
    data[weight.offset : weight.offset + weight.nbytes] = values.tobytes()
    altered = tmp_path / "altered.pte"
    altered.write_bytes(bytes(data))

    done = cli(
        "run", "digits", "--pte", altered, "-n", "1", "--warmup", "0", "--json", tmp_path / "r.json"
    )
    assert done.exit_code == 1, done.output
    assert "FAIL" in done.stdout
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["status"] == "failed"
    assert document["verdict"]["worst"]["name"] == "logits"
    assert "logits" in document["verdict"]["reason"]


# -- faults and bad input ------------------------------------------------------------------


def _one_line_error(done: Any) -> str:
    lines = [line for line in done.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, done.output
    assert "hint:" in done.output
    assert "Traceback" not in done.output
    return lines[0]


def test_a_truncated_pte_is_bad_input(tmp_path: Path) -> None:
    built = cli("build", "digits", "-o", tmp_path / "digits.pte")
    assert built.exit_code == 0, built.output
    truncated = tmp_path / "truncated.pte"
    truncated.write_bytes((tmp_path / "digits.pte").read_bytes()[:5000])
    done = cli("run", "digits", "--pte", truncated)
    assert done.exit_code == 2
    assert "truncated.pte" in _one_line_error(done)


def test_a_missing_operator_at_load_is_a_runner_failure_naming_and_explaining_it(
    tmp_path: Path,
) -> None:
    # etdeploy's runner is refused before pushing (tests/preflight/test_preflight.py); with
    # upstream's (no --describe, so no preflight) the runtime's own refusal at
    # load is what the user sees, translated.
    from etdeploy.runner_build import ensure_runner

    bundle = ensure_runner()
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    for path in bundle.files:
        name = "executor_runner" if path.name == bundle.executable else path.name
        (upstream / name).write_bytes(path.read_bytes())
        (upstream / name).chmod(0o755)
    np.save(tmp_path / "x.npy", np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4))
    done = cli(
        "run", CUSTOM_OP, "--backend", "portable", "--inputs", tmp_path / "x.npy",
        "--runner", upstream / "executor_runner", "--json", tmp_path / "r.json",
    )  # fmt: skip
    assert done.exit_code == 3, done.output
    line = _one_line_error(done)
    assert "OperatorMissing" in line and "etdeploy_custom::triple.out" in line
    assert "likely cause: the program calls an operator no kernel library" in line
    assert "--kernels" in done.output  # the hint
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["status"] == "error" and document["error"]["infrastructure"]
    assert "etdeploy_custom::triple.out" in document["logs"][0]


def test_a_backend_the_runner_lacks_is_named_before_pushing(tmp_path: Path) -> None:
    done = cli("run", "digits", "--backend", "vulkan", "-n", "1")
    assert done.exit_code == 2, done.output
    assert "VulkanBackend" in _one_line_error(done)


def test_a_wrong_input_shape_names_the_input_the_expected_and_the_given(tmp_path: Path) -> None:
    np.save(tmp_path / "wrong.npy", np.zeros((1, 1, 9, 9), dtype=np.float32))
    done = cli("run", "digits", "--inputs", tmp_path / "wrong.npy")
    assert done.exit_code == 2
    line = _one_line_error(done)
    assert "'image'" in line and "float32[1, 1, 8, 8]" in line and "float32[1, 1, 9, 9]" in line


def test_a_hung_runner_is_killed_at_the_deadline(tmp_path: Path) -> None:
    # Real work that cannot finish in time: a hundred million iterations.
    done = cli("run", "digits", "-n", "100000000", "--warmup", "0", "--deadline", "3",
               "--json", tmp_path / "r.json")  # fmt: skip
    assert done.exit_code == 3, done.output
    assert "timed out" in _one_line_error(done)
    assert json.loads((tmp_path / "r.json").read_text())["error"]["kind"] == "RunnerFailure"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_crashing_runner_is_a_runner_failure_with_its_signal(tmp_path: Path) -> None:
    # Stands for a runner that dies mid-run (a segfault in a kernel): it prints
    # upstream's first line, then kills itself with SIGSEGV.
    crashing = tmp_path / "executor_runner"
    crashing.write_text("#!/bin/sh\necho 'Model loaded in 0.5 ms.'\nkill -SEGV $$\n")
    crashing.chmod(crashing.stat().st_mode | stat.S_IXUSR)
    done = cli("run", "digits", "--runner", crashing, "-n", "1")
    assert done.exit_code == 3, done.output
    assert "SIGSEGV" in _one_line_error(done)
    assert "Model loaded in 0.5 ms." in done.output  # the log's tail is attached


def test_random_inputs_need_asking_for_and_label_the_verdict(device: LocalDevice) -> None:
    result = run(RunJob(model=TWO_IO, random_inputs=2, iterations=1, warmup=0), device)
    assert result["inputs"]["on_noise"] is True
    assert "random inputs" in result["verdict"]["reason"]
    assert any("random inputs" in w for w in result["warnings"])


def test_no_inputs_at_all_is_bad_input_with_a_hint() -> None:
    done = cli("run", TWO_IO)
    assert done.exit_code == 2
    assert "no inputs" in _one_line_error(done) and "--random" in done.output


def test_verifying_on_the_example_inputs_is_warned(device: LocalDevice, tmp_path: Path) -> None:
    np.savez(
        tmp_path / "zeros.npz",
        left=np.zeros((2, 6), np.float32),
        right=np.zeros((2, 3), np.float32),
    )
    result = run(
        RunJob(model=TWO_IO, inputs=(str(tmp_path / "zeros.npz"),), iterations=1, warmup=0), device
    )
    assert any("example inputs" in w for w in result["warnings"])


def test_a_reference_file_replaces_the_eager_model(
    device: LocalDevice, tmp_path: Path, two_io_samples: Path
) -> None:
    first = run(
        RunJob(
            model=TWO_IO,
            inputs=(str(two_io_samples / "s0.npz"),),
            iterations=1,
            warmup=0,
            keep=True,
        ),
        device,
    )
    pte = Path(first["artifact"]["pte"])
    with np.load(two_io_samples / "s0.npz") as sample:
        left, right = sample["left"], sample["right"]
    import torch

    from etdeploy.model.loader import load_model, parse_model_ref

    module = load_model(parse_model_ref(TWO_IO)).module
    with torch.no_grad():
        a, b = module(torch.from_numpy(left), torch.from_numpy(right))
    np.savez(
        tmp_path / "expected.npz", o0=a.numpy(), o1=(b.numpy() + 1.0)
    )  # o1 is wrong on purpose
    result = run(
        RunJob(model=None, pte=pte, reference=tmp_path / "expected.npz",
               inputs=(str(two_io_samples / "s0.npz"),), iterations=1, warmup=0),
        device,
    )  # fmt: skip
    assert result["inputs"]["reference"] == "file"
    assert result["status"] == "failed"
    assert result["verdict"]["worst"]["output"] == 1


def test_result_json_is_never_half_written(tmp_path: Path) -> None:
    from etdeploy.atomic import write_json as write_result_json

    target = tmp_path / "r.json"
    write_result_json({"a": 1}, target)

    class Unserialisable:
        def __str__(self) -> str:
            raise RuntimeError("boom mid-write")

    with pytest.raises(RuntimeError):
        write_result_json({"a": 2, "b": Unserialisable()}, target)
    assert json.loads(target.read_text()) == {"a": 1}
    assert os.listdir(tmp_path) == ["r.json"]


def test_a_program_over_the_configured_size_limit_fails_the_run(tmp_path: Path) -> None:
    config = tmp_path / "etdeploy.toml"
    config.write_text('[sizecheck]\nbudget = "10KB"\n')
    done = cli(
        "run",
        "digits",
        "-n",
        "1",
        "--warmup",
        "0",
        "--config",
        config,
        "--json",
        tmp_path / "r.json",
    )
    assert done.exit_code == 1, done.output
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["verdict"]["passed"] is True  # the numbers are right...
    assert document["size"]["passed"] is False  # ...but it will not ship
    assert document["status"] == "failed"
    assert "over" in done.stdout


def test_a_reference_that_is_one_array_is_bad_input(tmp_path: Path) -> None:
    np.save(tmp_path / "expected.npy", np.zeros((1, 10), np.float32))
    done = cli("run", "digits", "--reference", tmp_path / "expected.npy", "-n", "1")
    assert done.exit_code == 2, done.output
    assert ".npz" in _one_line_error(done)


def test_a_non_positive_idle_timeout_is_bad_input() -> None:
    done = cli("run", "digits", "--idle-timeout", "0")
    assert done.exit_code == 2
    assert "--idle-timeout" in _one_line_error(done)


def test_profile_survives_a_temporary_dir_on_another_filesystem(
    device: LocalDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tmpfs /tmp (Fedora, Arch) against a cache on disk: the ETDump must be copied.
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(os.environ["ETDEPLOY_CACHE_DIR"]).st_dev:
        pytest.skip("no second filesystem here to put the temporary dir on")
    import tempfile

    scratch = tempfile.mkdtemp(dir=shm)
    monkeypatch.setattr(tempfile, "tempdir", scratch)
    result = run(RunJob(model="digits", iterations=2, warmup=0, profile=True), device)
    assert result["profile"]["delegate_calls"] and Path(result["etdump"]).is_file()


def test_the_result_file_is_written_for_an_internal_error_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import etdeploy.numerics

    # Fault injection: a bug in the last stage, after the device ran.
    def broken(*_: Any, **__: Any) -> Any:
        raise ZeroDivisionError("a bug of ours")

    monkeypatch.setattr(etdeploy.numerics, "verify", broken)
    done = CliRunner().invoke(app, ["run", "digits", "-n", "1", "--json", str(tmp_path / "r.json")])
    assert done.exit_code != 0
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["status"] == "error" and "ZeroDivisionError" in document["error"]["message"]


def test_paths_in_etdeploy_toml_are_relative_to_the_file(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "samples").mkdir(parents=True)
    (project / "deep" / "er").mkdir(parents=True)
    np.save(
        project / "samples" / "a.npy", np.linspace(0, 1, 64, dtype=np.float32).reshape(1, 1, 8, 8)
    )
    (project / "etdeploy.toml").write_text('[run]\ninputs = ["samples"]\n')
    cwd = os.getcwd()
    try:
        os.chdir(project / "deep" / "er")
        done = cli("run", "digits", "-n", "1", "--json", tmp_path / "r.json")
    finally:
        os.chdir(cwd)
    assert done.exit_code == 0, done.output
    assert json.loads((tmp_path / "r.json").read_text())["inputs"]["samples"] == ["a"]


def test_a_dynamic_batch_runs_at_each_samples_own_size(device: LocalDevice, tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    for batch in (1, 3, 16):
        np.save(
            tmp_path / f"b{batch:02d}.npy", rng.uniform(-2, 2, size=(batch, 5)).astype(np.float32)
        )
    model = f"{MODELS / 'two_io.py'}:dynamic_mlp"
    result = run(RunJob(model=model, inputs=(str(tmp_path),), iterations=2, warmup=1), device)
    assert result["status"] == "passed", result["verdict"]["reason"]
    assert [m["shape"] for m in result["verdict"]["metrics"]] == [[1, 3], [3, 3], [16, 3]]
    # Beyond the exported range is refused before anything runs.
    np.save(tmp_path / "b17.npy", np.zeros((17, 5), np.float32))
    done = cli("run", model, "--inputs", tmp_path / "b17.npy")
    assert done.exit_code == 2 and "given float32[17, 5]" in done.output


def test_the_peak_memory_is_the_runners_own_not_its_parents(device: LocalDevice) -> None:
    import resource

    import torch  # noqa: F401  this process is now hundreds of MB; the runner is not

    parent_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = run(RunJob(model="digits", iterations=1, warmup=0), device)
    runner_peak = result["memory"]["peak_rss_bytes"]
    assert 0 < runner_peak < parent_peak / 2


def test_weights_beside_the_model_file_are_part_of_what_is_cached(
    device: LocalDevice, tmp_path: Path
) -> None:
    from etdeploy.pipeline.references import eager_reference

    (tmp_path / "model.py").write_text(
        "from pathlib import Path\n"
        "import numpy as np\n"
        "import torch\n\n"
        "def build():\n"
        "    layer = torch.nn.Linear(3, 2, bias=False)\n"
        "    weight = np.load(Path(__file__).parent / 'w.npy')\n"
        "    layer.weight.data = torch.from_numpy(weight)\n"
        "    return layer.eval(), (torch.zeros(1, 3),)\n"
    )
    np.save(tmp_path / "w.npy", np.full((2, 3), 2.0, np.float32))
    sample = (np.array([[1.0, 2.0, 3.0]], np.float32),)
    model = f"{tmp_path / 'model.py'}:build"
    np.save(tmp_path / "x.npy", sample[0])
    first = run(
        RunJob(model=model, inputs=(str(tmp_path / "x.npy"),), iterations=1, warmup=0), device
    )
    (before,), _ = eager_reference(model, [sample])
    np.save(tmp_path / "w.npy", np.full((2, 3), 5.0, np.float32))
    second = run(
        RunJob(model=model, inputs=(str(tmp_path / "x.npy"),), iterations=1, warmup=0), device
    )
    (after,), _ = eager_reference(model, [sample])
    assert np.allclose(before[0], [[12.0, 12.0]]) and np.allclose(after[0], [[30.0, 30.0]])
    assert first["artifact"]["sha256"] != second["artifact"]["sha256"]
    assert second["status"] == "passed"
