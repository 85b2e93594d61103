"""`etdeploy build` as a user runs it: outputs named by what they are, never
overwritten silently, the ETRecord on request, write failures as one line with
a hint and nothing half-written, torch's own output kept out of sight."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.cli.conftest import PROGRESS_LINE, assert_one_line_error, etdeploy

pytestmark = pytest.mark.slow

MODELS = Path(__file__).resolve().parent.parent / "data" / "models"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(folder: Path) -> list[str]:
    """Temporary or partial files a failed write might leave."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_two_builds_for_two_backends_keep_both_files(tmp_path: Path) -> None:
    first = etdeploy("build", "digits", cwd=tmp_path)
    second = etdeploy("build", "digits", "--backend", "portable", cwd=tmp_path)
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    xnnpack, portable = tmp_path / "digits-xnnpack.pte", tmp_path / "digits-portable.pte"
    assert sha256(xnnpack) != sha256(portable)
    for pte, backend in ((xnnpack, "xnnpack"), (portable, "portable")):
        manifest = json.loads(Path(f"{pte}.json").read_text())
        assert manifest["backend"] == backend and manifest["sha256"] == sha256(pte)
    # A plain build writes the program and its manifest, not the ETRecord.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "digits-portable.pte", "digits-portable.pte.json",
        "digits-xnnpack.pte", "digits-xnnpack.pte.json",
    ]  # fmt: skip
    assert "wrote digits-portable.pte and beside it digits-portable.pte.json" in second.stderr
    # The build table reads as the rest of etdeploy writes: kB, spaced shapes,
    # the full sha256, quantization spelled out.
    assert "image:float32[1, 1, 8, 8] -> logits:float32[1, 10]" in first.stdout
    assert " kB" in first.stdout and " KB" not in first.stdout
    assert sha256(xnnpack) in first.stdout and "none (float32)" in first.stdout


def test_a_different_program_at_the_output_is_refused_then_replaced_with_force(
    tmp_path: Path,
) -> None:
    target = tmp_path / "vision.pte"
    first = etdeploy("build", "digits", "--etrecord", "-o", target, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "vision.etrecord").is_file()
    before = sha256(target)

    refused = etdeploy("build", "digits", "-b", "portable", "-o", target, cwd=tmp_path)
    assert_one_line_error(refused, 2, f"{target} exists and holds another program (xnnpack")
    assert "--force" in refused.stderr
    assert sha256(target) == before and not leftovers(tmp_path)

    same = etdeploy("build", "digits", "-o", target, cwd=tmp_path)
    assert same.returncode == 0, same.stderr
    assert "already held this program" in same.stderr and sha256(target) == before

    forced = etdeploy("build", "digits", "-b", "portable", "-o", target, "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "warning: replaced the different program" in forced.stderr
    assert json.loads((tmp_path / "vision.pte.json").read_text())["backend"] == "portable"
    # The ETRecord described the program that was replaced: it goes with it.
    assert not (tmp_path / "vision.etrecord").exists()
    assert not leftovers(tmp_path)


def test_a_clobber_refusal_comes_before_the_build(tmp_path: Path, fresh_cache: Path) -> None:
    target = tmp_path / "seq.pte"
    target.write_bytes(b"someone else's program")
    refused = etdeploy(
        "build", f"{MODELS}/sequence.py:classifier", "-o", target, cwd=tmp_path,
        ETDEPLOY_CACHE_DIR=str(fresh_cache),
    )  # fmt: skip
    assert_one_line_error(refused, 2, f"{target} exists and holds another program")
    # Refused before the model was loaded, exported or lowered: nothing was built.
    assert not any((fresh_cache / "builds").glob("*/*.pte"))
    assert not any("exporting" in line or "lowering" in line for line in refused.progress)
    assert target.read_bytes() == b"someone else's program"


def test_a_full_disk_is_one_line_and_leaves_nothing(full_disk: Path, tmp_path: Path) -> None:
    done = etdeploy("build", "digits", "-o", full_disk / "d.pte", cwd=tmp_path)
    assert_one_line_error(done, 2, f"no space left to write {full_disk / 'd.pte'}")
    assert "free space there, or choose another -o" in done.stderr
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]


def test_a_parent_that_is_a_file_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "models").write_text("not a folder")
    done = etdeploy("build", "digits", "-o", tmp_path / "models" / "d.pte", cwd=tmp_path)
    assert_one_line_error(done, 2, f"{tmp_path / 'models'} is a file, not a folder")
    assert (tmp_path / "models").read_text() == "not a folder"


def test_a_folder_that_cannot_be_created_is_one_line_and_leaves_nothing(
    read_only_dir: Path, tmp_path: Path
) -> None:
    inside = etdeploy("build", "digits", "-o", read_only_dir / "out" / "d.pte", cwd=tmp_path)
    assert_one_line_error(inside, 2, f"cannot create the folder {read_only_dir / 'out'}")
    assert "Read-only file system" in inside.stderr
    here = etdeploy("build", "digits", "-o", read_only_dir / "d.pte", cwd=tmp_path)
    assert_one_line_error(here, 2, f"cannot write {read_only_dir / 'd.pte'}: Read-only")
    assert list(read_only_dir.iterdir()) == []


def test_a_file_that_is_not_a_pt2_shows_no_torch_log_unless_verbose(tmp_path: Path) -> None:
    (tmp_path / "model.pt2").write_bytes(b"not a zip archive")
    done = etdeploy("build", "model.pt2", cwd=tmp_path)
    assert_one_line_error(done, 2, "model.pt2 is not a saved ExportedProgram")
    # torch.export.load logs a whole traceback before raising: kept, not shown.
    assert "deserializing" not in done.stderr and "torch/export" not in done.stderr
    verbose = etdeploy("build", "model.pt2", "-v", cwd=tmp_path)
    assert verbose.returncode == 2
    assert "Ran into the following error when deserializing" in verbose.stderr
    assert not list(tmp_path.glob("*.pte*"))


def test_a_data_dependent_branch_leaves_etdeploys_line_last(tmp_path: Path) -> None:
    model = f"{MODELS}/broken.py:data_dependent"
    done = etdeploy("build", model, "--backend", "portable", "--no-cache", cwd=tmp_path)
    assert_one_line_error(done, 2, "control flow depends on a tensor's value at broken.py:21")
    assert "torch.where" in done.errors[-1]
    # torch prints the graph it was tracing (about 30 lines) to stderr: captured.
    assert "def forward" not in done.stderr and "draft_export" not in done.stderr
    verbose = etdeploy("build", model, "-b", "portable", "--no-cache", "--verbose", cwd=tmp_path)
    assert verbose.returncode == 2
    assert "def forward" in verbose.stderr and "Traceback" in verbose.stderr


def test_a_cold_build_says_each_stage_with_its_time_when_piped(
    tmp_path: Path, fresh_cache: Path
) -> None:
    done = etdeploy("build", "digits", cwd=tmp_path, ETDEPLOY_CACHE_DIR=str(fresh_cache))
    assert done.returncode == 0, done.stderr
    stages = [PROGRESS_LINE.sub("", line) for line in done.progress]
    # Exporting and lowering outlast the one-second threshold of a piped line (importing
    # torch takes about that long: said or not, it comes first).
    assert {"digits for xnnpack: exporting with torch.export",
            "digits for xnnpack: lowering to xnnpack"} <= set(stages)  # fmt: skip
    order = ["importing torch", "loading digits", "exporting with torch.export",
             "lowering to xnnpack", "planning memory (to_executorch)", "serialising the program",
             "saving the program to the build cache"]  # fmt: skip
    # A stage still running 30 s on is mentioned again: "still ... (31 s)".
    started = [s for s in stages if not s.startswith("still ")]
    seen = [order.index(s.split(": ", 1)[1]) for s in started if ": " in s]
    assert seen == sorted(seen)
    for reminder in (s for s in stages if s.startswith("still ")):
        assert re.fullmatch(r"still digits for xnnpack: .+ \(\d+ s\)", reminder), reminder
    quiet = etdeploy("build", "digits", "--no-cache", "-q", "-o", "q.pte", cwd=tmp_path,
                     ETDEPLOY_CACHE_DIR=str(fresh_cache))  # fmt: skip
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.progress == [] and "wrote" not in quiet.stderr and "backend" in quiet.stdout


WEIGHTED_MODEL = """\
import numpy as np
import torch
from pathlib import Path


def build():
    weights = torch.from_numpy(np.load(Path(__file__).with_name("weights.npy")))
    layer = torch.nn.Linear(4, 3)
    with torch.no_grad():
        layer.weight.copy_(weights)
    return layer.eval(), (torch.zeros(1, 4),)
"""


def test_a_copy_of_the_same_weights_changes_nothing_and_new_ones_are_named(
    tmp_path: Path,
) -> None:
    """The files beside a model count by their bytes: `cp` of identical weights is the same
    build (already at -o); other weights are refused at -o naming the file that changed;
    a CSV of labels beside the model is no part of its build."""
    folder = tmp_path / "shapes"
    folder.mkdir()
    (folder / "model.py").write_text(f"# {tmp_path.name}\n{WEIGHTED_MODEL}")
    weights = np.arange(12, dtype=np.float32).reshape(3, 4) / 12
    np.save(folder / "weights.npy", weights)
    model, target = f"{folder / 'model.py'}:build", tmp_path / "out" / "shapes.pte"
    first = etdeploy("build", model, "-b", "portable", "-o", target, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = sha256(target)

    np.save(tmp_path / "weights.npy", weights)  # the same bytes, written again, then `cp`
    shutil.copyfile(tmp_path / "weights.npy", folder / "weights.npy")
    (folder / "labels.csv").write_text("a,0\nb,1\n")
    same = etdeploy("build", model, "-b", "portable", "-o", target, cwd=tmp_path)
    assert same.returncode == 0, same.stderr
    assert "already held this program" in same.stderr and sha256(target) == before
    assert "importing torch" not in "\n".join(same.progress)  # a cache hit: no rebuild

    np.save(folder / "weights.npy", weights * 2)
    refused = etdeploy("build", model, "-b", "portable", "-o", target, cwd=tmp_path)
    assert_one_line_error(refused, 2, f"{target} exists and holds another program (portable")
    assert "since then: weights.npy changed" in " ".join(refused.errors[0].split())
    assert sha256(target) == before
