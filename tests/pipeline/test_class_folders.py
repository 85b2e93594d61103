"""A folder a class as --inputs (PNGs in one folder per label): a cold build checks the
samples before the export with the loader the run stages them with, so the same
command works with the model cached or not, from `etdeploy run` and in a farm.

The images are the digits example's real held-out images (scikit-learn's handwritten
digits), written as 8x8 grey PNGs into one folder per digit."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from etdeploy.builder import BuildOptions, planned_build
from etdeploy.cli import app
from etdeploy.pipeline import RunJob
from tests.support.farm_fixtures import QUICK, lines_of, write_spec

pytestmark = pytest.mark.slow

PER_CLASS = 3


def class_folders(root: Path) -> Path:
    """The first PER_CLASS held-out images of each digit, as PNGs under test/<digit>/."""
    from PIL import Image

    from etdeploy.model.examples.digits import ensure_trained

    with np.load(ensure_trained() / "held_out.npz") as held_out:
        images, labels = held_out["x"], held_out["y"]
    test = root / "test"
    for digit in range(10):
        (test / str(digit)).mkdir(parents=True)
        for i in np.flatnonzero(labels == digit)[:PER_CLASS]:
            pixels = np.rint(images[i, 0] * 255).astype(np.uint8)
            Image.fromarray(pixels, mode="L").save(test / str(digit) / f"{i:03d}.png")
    return test


def model_file(root: Path) -> str:
    """A model file of its own (never built before, so its first build is cold): the
    digits network, under another name."""
    folder = root / "img"
    folder.mkdir()
    (folder / "shapes.py").write_text(
        f"# {uuid.uuid4().hex}: a model no run has built before\n"
        "from etdeploy.model.examples import digits\n\n\n"
        "def build():\n"
        "    return digits.build()\n"
    )
    return f"{folder / 'shapes.py'}:build"


def run(model: str, inputs: Path, out: Path) -> tuple[int, dict[str, Any], str]:
    done = CliRunner().invoke(
        app, ["run", model, "-d", "local", "--inputs", str(inputs), "-n", "1", "--warmup", "0",
              "--json", str(out)],
    )  # fmt: skip
    document = json.loads(out.read_text()) if out.is_file() else {}
    return done.exit_code, document, done.output


def test_class_folders_run_cold_and_then_from_the_cache(tmp_path: Path) -> None:
    inputs = class_folders(tmp_path)
    model = model_file(tmp_path)
    for cached, out in ((False, tmp_path / "cold.json"), (True, tmp_path / "warm.json")):
        assert (
            planned_build(model, BuildOptions(backend=RunJob(model=model).backend)).cached is cached
        )
        code, result, output = run(model, inputs, out)
        assert code == 0, output
        found = result["accuracy"]
        assert found["samples"] == 10 * PER_CLASS and found["labels"] == "test/ (a folder a class)"


def test_class_folders_run_cold_and_then_from_the_cache_in_a_farm(tmp_path: Path) -> None:
    inputs = class_folders(tmp_path)
    model = model_file(tmp_path)
    spec = write_spec(
        tmp_path / "farm.toml",
        {"models": [{"model": model, "inputs": [str(inputs)]}], "devices": ["local"], **QUICK},
    )
    for cached, out in ((False, tmp_path / "cold"), (True, tmp_path / "warm")):
        assert (
            planned_build(model, BuildOptions(backend=RunJob(model=model).backend)).cached is cached
        )
        done = CliRunner().invoke(app, ["farm", str(spec), "--out", str(out)])
        assert done.exit_code == 0, done.output
        (result,) = lines_of(out / "results.jsonl")
        assert result["status"] == "passed", result
        assert result["accuracy"]["samples"] == 10 * PER_CLASS
