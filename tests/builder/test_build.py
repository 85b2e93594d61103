"""`etdeploy build`: every backend that lowers here, int8, dynamic shapes, the
cache, and each kind of bad input (one line, exit 2, nothing left behind)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from etdeploy.builder import BuildOptions, build
from etdeploy.errors import InputError, ModelError, UsageError

DATA = Path(__file__).resolve().parent.parent / "data"
MODELS = DATA / "models"

pytestmark = pytest.mark.slow


def etdeploy(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "etdeploy", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    ("backend", "delegate"),
    [
        ("xnnpack", "XnnpackBackend"),
        ("portable", None),
        ("coreml", "CoreMLBackend"),
        ("vulkan", "VulkanBackend"),
    ],
)
def test_each_backend_lowers_digits_and_records_its_delegate(
    backend: str, delegate: str | None
) -> None:
    result = build("digits", BuildOptions(backend=backend))
    manifest = result.manifest.to_json()
    assert result.pte.read_bytes()[4:8] == b"ET12"
    assert manifest["backend"] == backend
    assert manifest["delegates"] == ([delegate] if delegate else [])
    if delegate:
        assert manifest["delegation"]["share"] == 1.0
    else:
        assert manifest["delegation"]["delegated_nodes"] == 0
    method = manifest["methods"][0]
    assert method["inputs"][0] == {
        "kind": "tensor",
        "dtype": "float32",
        "shape": [1, 1, 8, 8],
        "dim_order": [0, 1, 2, 3],
        "name": "image",
        "dynamic": {},
    }
    assert method["outputs"][0]["shape"] == [1, 10]
    assert method["planned_bytes"] > 0
    assert manifest["size_bytes"] == result.pte.stat().st_size


def test_int8_build_is_calibrated_on_real_training_images_and_smaller() -> None:
    fp32 = build("digits", BuildOptions())
    int8 = build("digits", BuildOptions(quantize="int8"))
    calibration = int8.manifest.to_json()["quantization"]["calibration"]
    assert calibration["kind"] == "real" and calibration["samples"] == 64
    assert int8.manifest.to_json()["size_bytes"] < fp32.manifest.to_json()["size_bytes"]


def test_int8_refuses_to_calibrate_on_noise_unless_asked(tmp_path: Path) -> None:
    heard: list[str] = []
    with pytest.raises(InputError, match="calibration"):
        build(f"{MODELS}/two_io.py:build", BuildOptions(quantize="int8"), status=heard.append)
    # Said once the model is loaded, before torch.export runs.
    assert heard[-1] == f"loading {MODELS}/two_io.py:build"
    noisy = build(
        f"{MODELS}/two_io.py:build", BuildOptions(quantize="int8", random_calibration=True)
    )
    assert noisy.manifest.to_json()["quantization"]["calibration"]["kind"] == "random"


def test_a_saved_program_without_calibration_is_refused_before_torch_loads(
    tmp_path: Path,
) -> None:
    (tmp_path / "m.pt2").write_bytes(b"a .pt2 is never read to find this out")
    code = (
        "import sys\nfrom etdeploy.builder import BuildOptions, build\n"
        "from etdeploy.errors import InputError\n"
        f"try:\n    build({str(tmp_path / 'm.pt2')!r}, BuildOptions(quantize='int8'))\n"
        "except InputError as e:\n    print(e.message, 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "--quantize int8 needs real calibration inputs False", done.stderr


def test_a_build_says_each_stage_as_it_starts(fresh_cache: Path) -> None:
    heard: list[str] = []
    result = build(f"{MODELS}/two_io.py:build", BuildOptions(quantize="int8-dynamic"), heard.append)
    assert not result.cached
    assert heard == [
        "importing torch", f"loading {MODELS}/two_io.py:build", "exporting with torch.export",
        "quantizing to int8-dynamic", "lowering to xnnpack", "planning memory (to_executorch)",
        "serialising the program", "saving the program to the build cache",
    ]  # fmt: skip
    cached: list[str] = []
    build(f"{MODELS}/two_io.py:build", BuildOptions(quantize="int8-dynamic"), cached.append)
    assert cached == []  # a cache hit has no stages to speak of


def test_int8_dynamic_needs_no_calibration() -> None:
    result = build("digits", BuildOptions(quantize="int8-dynamic"))
    assert result.manifest.to_json()["quantization"]["mode"] == "int8-dynamic"


def test_dynamic_batch_dimension_is_exported_and_recorded() -> None:
    result = build(f"{MODELS}/two_io.py:batch_mlp", BuildOptions(dynamic=("x:0=1..16",)))
    meta = result.manifest.to_json()["methods"][0]["inputs"][0]
    assert meta["dynamic"] == {"0": [1, 16]}
    assert result.manifest.to_json()["dynamic"] == {"x": {"0": [1, 16]}}
    # The planner sizes the arena for the largest batch.
    static = build(f"{MODELS}/two_io.py:batch_mlp", BuildOptions())
    assert (
        result.manifest.to_json()["methods"][0]["planned_bytes"]
        > static.manifest.to_json()["methods"][0]["planned_bytes"]
    )


def _token_samples(directory: Path, lengths: tuple[int, ...]) -> Path:
    """Token sequences of the given lengths (one .npy each), as a tokenizer gives them."""
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    for i, length in enumerate(lengths):
        tokens = (np.arange(length, dtype=np.int64) * 7 + 3 * i) % 32
        np.save(directory / f"s{i}.npy", tokens[None])
    return directory


def test_int8_calibrates_on_samples_of_every_length_dynamic_allows(tmp_path: Path) -> None:
    calibration = _token_samples(tmp_path / "calib", (3, 5, 9, 16))
    model = f"{MODELS}/sequence.py:classifier"
    options = BuildOptions(
        quantize="int8", dynamic=("tokens:1=2..16",), calibration=(str(calibration),)
    )
    result = build(model, options)
    assert result.manifest.to_json()["quantization"]["calibration"]["kind"] == "real"
    assert result.manifest.to_json()["quantization"]["calibration"]["samples"] == 4
    assert result.manifest.to_json()["methods"][0]["inputs"][0]["dynamic"] == {"1": [2, 16]}
    # The quantized program takes each length it was calibrated on, as the .pte will.
    import torch

    from etdeploy.builder import quantized_program_path
    from etdeploy.builder.quantize import load_quantized

    program = load_quantized(quantized_program_path(result.pte))
    for length in (3, 16):
        assert program(torch.zeros(1, length, dtype=torch.int64)).shape == (1, 3)


def test_a_calibration_sample_outside_the_dynamic_range_names_the_range(tmp_path: Path) -> None:
    calibration = _token_samples(tmp_path / "calib", (5, 20))
    heard: list[str] = []
    options = BuildOptions(
        quantize="int8", dynamic=("tokens:1=2..16",), calibration=(str(calibration),)
    )
    with pytest.raises(InputError) as caught:
        build(f"{MODELS}/sequence.py:classifier", options, heard.append)
    assert caught.value.message == (
        "input 'tokens' of calibration sample s1: expected int64[1, 2..16], given "
        "int64[1, 20] (dim 1 is 20, outside its declared range 2..16)"
    )
    assert "exporting with torch.export" not in heard  # said before the export


def test_two_inputs_two_outputs_are_named_from_forward() -> None:
    result = build(f"{MODELS}/two_io.py:build", BuildOptions())
    method = result.manifest.to_json()["methods"][0]
    assert [m["name"] for m in method["inputs"]] == ["left", "right"]
    assert len(method["outputs"]) == 2


def test_identical_second_build_is_a_cache_hit_and_no_cache_rebuilds(fresh_cache: Path) -> None:
    first = build(f"{MODELS}/two_io.py:build", BuildOptions(backend="portable"))
    second = build(f"{MODELS}/two_io.py:build", BuildOptions(backend="portable"))
    assert not first.cached and second.cached
    assert (
        second.pte == first.pte
        and second.manifest.to_json()["sha256"] == first.manifest.to_json()["sha256"]
    )
    rebuilt = build(f"{MODELS}/two_io.py:build", BuildOptions(backend="portable", use_cache=False))
    assert not rebuilt.cached


def test_changing_a_file_beside_the_factory_invalidates_the_cache(
    tmp_path: Path, fresh_cache: Path
) -> None:
    # A fresh cache: the session's would hold the second build from an earlier run.
    model = tmp_path / "m.py"
    model.write_text((MODELS / "two_io.py").read_text())
    helper = tmp_path / "helper.py"
    helper.write_text("SCALE = 1\n")
    first = build(f"{model}:build", BuildOptions(backend="portable"))
    helper.write_text("SCALE = 2\n")
    second = build(f"{model}:build", BuildOptions(backend="portable"))
    assert (
        not second.cached
        and second.manifest.to_json()["cache_key"] != first.manifest.to_json()["cache_key"]
    )


def test_pt2_file_builds(tmp_path: Path) -> None:
    import torch

    sys.path.insert(0, str(MODELS))
    try:
        import two_io
    finally:
        sys.path.remove(str(MODELS))
    module, example = two_io.build()
    path = tmp_path / "saved.pt2"
    torch.export.save(torch.export.export(module, example), str(path))
    result = build(str(path), BuildOptions(backend="portable"))
    assert result.manifest.to_json()["model"]["kind"] == "pt2"
    assert [m["name"] for m in result.manifest.to_json()["methods"][0]["inputs"]] == [
        "left",
        "right",
    ]


def test_cli_build_writes_pte_and_manifest_and_several_backends(tmp_path: Path) -> None:
    done = etdeploy("build", "digits", "-b", "xnnpack", "-b", "portable", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for be in ("xnnpack", "portable"):
        manifest = json.loads((tmp_path / f"digits-{be}.pte.json").read_text())
        assert manifest["schema"] == "etdeploy.manifest/1"
        assert set(manifest["versions"]) == {"etdeploy", "torch", "executorch"}
    assert "delegated" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py:build"], "model file not found"),
        ([f"{MODELS}/two_io.py:nope"], "has no function 'nope'"),
        (
            [f"{MODELS}/broken.py:raises"],
            "raised RuntimeError: weights file missing (at broken.py:8)",
        ),
        ([f"{MODELS}/broken.py:wrong_type"], "returned int"),
        ([f"{MODELS}/broken.py:not_a_module"], "returned a str as its module"),
        ([f"{DATA}/models/broken.py"], "cannot tell what model"),
        (["digits", "--backend", "tpu"], "unknown backend 'tpu'"),
        (["digits", "--backend", "qnn"], "QNN"),
        (["digits", "--backend", "mps"], "macOS"),
        (["digits", "--dynamic", "image:0=x"], "cannot read --dynamic"),
        (
            ["digits", "--quantize", "int8", "--calibration", f"{MODELS}/../calib_wrong"],
            "of calibration sample s0: expected float32[1, 1, 8, 8], given float32[1, 1, 6, 6]",
        ),
        (
            [f"{MODELS}/broken.py:data_dependent"],
            "control flow depends on a tensor's value at broken.py:21",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(
    args: list[str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "garbage.pt2").write_bytes(b"not a zip")
    done = etdeploy("build", *args, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert "hint:" in done.stderr
    assert not list(tmp_path.glob("*.pte*"))


def test_a_file_that_is_not_a_pt2_is_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.pt2"
    bad.write_bytes(b"not a zip")
    with pytest.raises(UsageError, match="not a saved ExportedProgram"):
        build(str(bad), BuildOptions())


def test_data_dependent_branch_names_the_line_and_the_fix() -> None:
    with pytest.raises(ModelError) as info:
        build(
            f"{MODELS}/broken.py:data_dependent", BuildOptions(backend="portable", use_cache=False)
        )
    assert "broken.py:21" in info.value.message and "torch.where" in (info.value.hint or "")


def test_inspect_reads_the_pte_itself_and_rejects_a_truncated_one(tmp_path: Path) -> None:
    from executorch.exir._serialize._program import _flatbuffer_to_program, _get_extended_header

    from etdeploy.builder.inspect import describe_pte

    result = build("digits", BuildOptions())
    layout = describe_pte(result.pte)
    assert layout["file_identifier"] == "ET12"
    assert layout["methods"]["forward"] == "(float32[1, 1, 8, 8]) -> (float32[1, 10])"
    # The torch-free reader agrees with executorch's own deserialiser.
    data = result.pte.read_bytes()
    program_size = _get_extended_header(data).program_size
    program = _flatbuffer_to_program(data[:program_size])
    assert layout["file_size"] == len(data) == result.manifest.to_json()["size_bytes"]
    assert layout["program_flatbuffer_bytes"] == program_size
    assert layout["segments"] == len(program.segments)
    (blob,) = program.execution_plan[0].delegates
    assert layout["delegate_blobs"] == {
        "XnnpackBackend": program.segments[blob.processed.index].size
    }
    assert layout["named_data"] == {
        "entries": len(program.named_data),
        "bytes": sum(program.segments[n.segment_index].size for n in program.named_data),
    }
    assert layout["planned_arena_bytes"] == {
        "forward": result.manifest.to_json()["methods"][0]["planned_bytes"]
    }
    # `etdeploy inspect` no longer loads torch to read a .pte.
    code = (
        "import sys\nfrom etdeploy.cli import app\n"
        f"try:\n    app(['inspect', {str(result.pte)!r}, '--json', '-'])\n"
        "except SystemExit as e:\n    code = e.code\n"
        "print('RESULT', code, 'torch' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "RESULT 0 False" in done.stderr, done.stderr
    assert json.loads(done.stdout)["pte"]["named_data"]["entries"] == len(program.named_data)
    truncated = tmp_path / "cut.pte"
    truncated.write_bytes(result.pte.read_bytes()[:3000])
    done = etdeploy("inspect", str(truncated), cwd=tmp_path)
    assert done.returncode == 2 and "truncated" in done.stderr
    not_pte = tmp_path / "x.pte"
    not_pte.write_bytes(b"\0" * 64)
    done = etdeploy("inspect", str(not_pte), cwd=tmp_path)
    assert done.returncode == 2 and "not an ExecuTorch program" in done.stderr
    # sizecheck's --any-file is no option of inspect's: the hint says what inspect reads.
    assert "--any-file" not in done.stderr and "hint: give a program written by" in done.stderr


def test_a_backend_claiming_little_of_the_graph_gets_a_warning() -> None:
    result = build(f"{MODELS}/two_io.py:mostly_cpu", BuildOptions(use_cache=False))
    delegation = result.manifest.to_json()["delegation"]
    assert delegation["share"] < 0.5, delegation
    assert delegation["by_op"]["cumsum"]["non_delegated"] == 2
    assert any("CPU model with extra transfer overhead" in w for w in result.warnings)
    assert result.manifest.to_json()["warnings"] == result.warnings


def test_a_cached_int8_build_is_rebuilt_when_the_factorys_samples_change(
    tmp_path: Path, fresh_cache: Path
) -> None:
    # A fresh cache: an earlier session's entry names its own (older) sample files.
    import numpy as np

    samples = tmp_path / "samples"
    samples.mkdir()
    rng = np.random.default_rng(3)
    for i in range(4):
        np.save(samples / f"s{i}.npy", rng.uniform(-1, 1, size=(4, 5)).astype(np.float32))
    (tmp_path / "model.py").write_text(
        "from pathlib import Path\n"
        "import torch\n"
        "from etdeploy.model import ModelSpec\n\n"
        "def build():\n"
        "    torch.manual_seed(1)\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()\n"
        "    return ModelSpec(module=model, example_inputs=(torch.zeros(4, 5),), input_names=['x'],\n"
        "                     samples=[Path(__file__).parent / 'samples'])\n"
    )
    ref = f"{tmp_path / 'model.py'}:build"
    first = build(ref, BuildOptions(quantize="int8"))
    assert build(ref, BuildOptions(quantize="int8")).cached
    # Same names, other values: the calibration (and so the int8 scales) changes.
    np.save(samples / "s0.npy", np.full((4, 5), 40.0, dtype=np.float32))
    rebuilt = build(ref, BuildOptions(quantize="int8"))
    assert not rebuilt.cached
    assert (
        rebuilt.manifest.to_json()["quantization"]["calibration"]["digest"]
        != first.manifest.to_json()["quantization"]["calibration"]["digest"]
    )
