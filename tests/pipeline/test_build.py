"""pipeline/build.py: a --pte given with MODEL must be MODEL's program.

Programs are built by the real `etdeploy build` (torch.export and the real
lowering); the refusals run the real `etdeploy run` and read its exit code and
its one line, before anything is staged or pushed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.errors import InputError
from etdeploy.pipeline import RunJob
from etdeploy.pipeline.build import build_program
from etdeploy.pipeline.plan import plan_of

pytestmark = pytest.mark.slow

MODELS = Path(__file__).parent.parent / "data" / "models"


def cli(*args: str | Path) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def one_line_error(done: Any) -> str:
    lines = [line for line in done.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, done.output
    assert "hint:" in done.output and "Traceback" not in done.output
    return " ".join(lines[0].split())


@pytest.fixture(scope="module")
def other_pte(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A program of another model (float32[4, 5] in), with its build manifest."""
    pte = tmp_path_factory.mktemp("other") / "other_model.pte"
    built = cli("build", f"{MODELS / 'two_io.py'}:batch_mlp", "-o", pte)
    assert built.exit_code == 0, built.output
    return pte


def test_a_pte_whose_manifest_names_another_model_is_refused_saying_so(
    other_pte: Path, tmp_path: Path
) -> None:
    done = cli("run", "digits", "--pte", other_pte, "--json", tmp_path / "r.json")
    assert done.exit_code == 2, done.output
    line = one_line_error(done)
    assert "other_model.pte and digits disagree" in line and "two_io.py:batch_mlp" in line
    assert "inputs" not in line.split("disagree")[1]  # not blamed on the inputs
    assert "etdeploy run" in done.output  # the hint: run it with its own model


def test_a_pte_without_a_manifest_is_refused_when_its_inputs_are_not_models(
    other_pte: Path, tmp_path: Path
) -> None:
    bare = tmp_path / "other_model.pte"
    shutil.copyfile(other_pte, bare)  # no manifest beside it: built elsewhere
    done = cli("run", "digits", "--pte", bare)
    assert done.exit_code == 2, done.output
    line = one_line_error(done)
    assert "disagree: the program's forward takes (float32[4, 5])" in line
    assert "digits's example inputs are (float32[1, 1, 8, 8])" in line


def test_a_pte_of_an_earlier_version_of_the_model_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "mlp.py"
    shutil.copyfile(MODELS / "two_io.py", model)
    pte = tmp_path / "mlp.pte"
    built = cli("build", f"{model}:batch_mlp", "-o", pte)
    assert built.exit_code == 0, built.output
    model.write_text(model.read_text() + "\n# retrained since\n")
    done = cli("run", f"{model}:batch_mlp", "--pte", pte, "--random", "1")
    assert done.exit_code == 2, done.output
    line = one_line_error(done)
    assert "was built from an earlier version of" in line and "mlp.py changed" in line
    assert "etdeploy build" in done.output


def test_a_build_into_a_folder_beside_the_model_stays_its_model_when_files_are_added(
    tmp_path: Path,
) -> None:
    """A -o folder, a result document and a data file added beside the model do not
    make its build stale; a change to a file the build read is named."""
    model = tmp_path / "mlp.py"
    shutil.copyfile(MODELS / "two_io.py", model)
    (tmp_path / "scale.npy").write_bytes(b"read by the factory, say")
    pte = tmp_path / "out" / "mlp.pte"
    built = cli("build", f"{model}:batch_mlp", "-o", pte)
    assert built.exit_code == 0, built.output
    (tmp_path / "samples.npz").write_bytes(b"data added since the build")
    (tmp_path / "mlp-result.json").write_text('{\n  "schema": "etdeploy.result/1"\n}\n')
    job = RunJob(model=f"{model}:batch_mlp", pte=pte)
    # Before: refused as an earlier version.
    assert build_program(plan_of(job).build).manifest is not None

    (tmp_path / "scale.npy").write_bytes(b"another file now")
    done = cli("run", f"{model}:batch_mlp", "--pte", pte, "--random", "1")
    assert done.exit_code == 2, done.output
    line = one_line_error(done)
    assert "was built from an earlier version of" in line and "scale.npy changed" in line


def test_the_models_own_program_passes_with_or_without_its_manifest(tmp_path: Path) -> None:
    pte = tmp_path / "digits.pte"
    assert cli("build", "digits", "-o", pte).exit_code == 0
    assert build_program(plan_of(RunJob(model="digits", pte=pte)).build).manifest is not None
    bare = tmp_path / "bare" / "digits.pte"
    bare.parent.mkdir()
    shutil.copyfile(pte, bare)
    assert build_program(plan_of(RunJob(model="digits", pte=bare)).build).method == "forward"


def test_a_dynamic_program_takes_example_inputs_within_its_bounds(tmp_path: Path) -> None:
    pte = tmp_path / "dyn.pte"
    built = cli("build", f"{MODELS / 'two_io.py'}:dynamic_mlp", "-o", pte)
    assert built.exit_code == 0, built.output
    Path(f"{pte}.json").unlink()  # judged by its signature alone
    program = build_program(
        plan_of(RunJob(model=f"{MODELS / 'two_io.py'}:dynamic_mlp", pte=pte)).build
    )
    assert program.inputs[0].dynamism == "dynamic_bound" and program.inputs[0].shape == (16, 5)
    # Another model's inputs do not fit it, bound or not.
    with pytest.raises(InputError, match="disagree"):
        build_program(plan_of(RunJob(model="digits", pte=pte)).build)


def test_a_wrong_input_shape_is_reported_before_an_uncached_build(
    tmp_path: Path, fresh_cache: Path
) -> None:
    import numpy as np

    inputs = tmp_path / "long"
    inputs.mkdir()
    np.save(inputs / "review.npy", (np.arange(20, dtype=np.int64) % 32)[None])
    done = cli(
        "run", f"{MODELS / 'sequence.py'}:classifier", "--dynamic", "tokens:1=2..16",
        "--inputs", inputs, "--device", "local",
    )  # fmt: skip
    assert done.exit_code == 2, done.output
    # Checked once the factory ran, before the export: the cache holds no program.
    assert not any((fresh_cache / "builds").glob("*/*.pte"))
    assert one_line_error(done) == (
        "error: input 'tokens' of sample review: expected int64[1, 2..16], given int64[1, 20] "
        "(dim 1 is 20, outside its declared range 2..16)"
    )
