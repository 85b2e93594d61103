"""pipeline/task.py: with labelled samples a run scores the task on the device, in the
float eager model and in the quantized eager program, pairs them sample by sample, and
fails a significant drop; noise does not fail. digits ships its whole held-out split
with labels (360 samples), so these are the demo's own checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from tests.support.planted import negate_a_class


def run(tmp_path: Path, *args: str | Path) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "result.json"
    done = CliRunner().invoke(
        app, ["run", *map(str, args), "-n", "1", "--warmup", "0", "--json", str(out)]
    )
    document = json.loads(out.read_text()) if out.is_file() else {}
    return done.exit_code, document, done.output


@pytest.fixture(scope="module")
def float_digits(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    return run(tmp_path_factory.mktemp("float"), "digits", "--max-accuracy-drop", "0.5pp")


@pytest.fixture(scope="module")
def int8_digits(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    return run(tmp_path_factory.mktemp("int8"), "digits", "--quantize", "int8")


def test_fp32_xnnpack_scores_the_whole_held_out_split_with_no_significant_drop(
    float_digits: tuple[int, dict[str, Any], str],
) -> None:
    code, result, output = float_digits
    assert code == 0, output
    found = result["accuracy"]
    assert found["samples"] == 360 and found["labels"] == "held_out.npz"
    (top1,) = found["scores"]
    assert top1["metric"] == "top-1" and top1["eager"] > 0.9
    paired = found["device_vs_eager"]
    assert paired["ci_low"] <= 0 <= paired["ci_high"] and paired["p_value"] > 0.05
    assert found["passed"] and found["max_drop"] == 0.005
    assert result["throughput"]["samples"] == 360 and result["throughput"]["samples_per_s"] > 0
    assert "task accuracy: classification of logits on 360 labelled samples" in output
    assert "device vs float eager" in output and "ACCURACY" in output


def test_an_int8_build_is_scored_in_its_quantized_eager_program_too(
    int8_digits: tuple[int, dict[str, Any], str],
) -> None:
    code, result, output = int8_digits
    assert code == 0, output
    found = result["accuracy"]
    assert found["scores"][0]["quantized"] > 0.9
    assert found["quantized_vs_eager"]["program"] == "quantized eager"
    assert "quantized eager" in output


def test_a_planted_class_regression_is_a_significant_drop_that_fails_the_gate(
    int8_digits: tuple[int, dict[str, Any], str], tmp_path: Path
) -> None:
    built = Path(int8_digits[1]["artifact"]["pte"])
    broken = negate_a_class(built, tmp_path, label=3)
    code, result, output = run(tmp_path, "digits", "--pte", broken, "--max-accuracy-drop", "0.5pp")
    assert code == 1, output
    found = result["accuracy"]
    paired = found["device_vs_eager"]
    assert paired["difference"] < -0.05 and paired["ci_high"] < 0 and paired["p_value"] < 1e-3
    assert not found["passed"] and "more than --max-accuracy-drop 0.5 pp" in found["reason"]
    # The worst disagreements come first, each a file --inputs takes for --localize.
    worst = found["disagreements"][0]
    assert worst["label"] == "3" and worst["device"] != "3"
    assert np.load(worst["input"]).shape == (1, 1, 8, 8)
    assert found["disagreeing"] >= len(found["disagreements"])
    assert "ACCURACY FAIL" in output and "--localize" in output


def test_min_accuracy_fails_a_run_below_it(tmp_path: Path) -> None:
    code, result, output = run(tmp_path, "digits", "--min-accuracy", "0.999")
    assert code == 1, output
    assert "below --min-accuracy 99.90%" in result["accuracy"]["reason"]


def test_labels_given_for_other_samples_are_one_error_line(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", rng.random((1, 1, 8, 8)).astype(np.float32))
    (tmp_path / "labels.csv").write_text("a,1\n")
    code, _, output = run(tmp_path, "digits", "-i", tmp_path / "a.npy", "-i", tmp_path / "b.npy",
                          "--labels", tmp_path / "labels.csv")  # fmt: skip
    assert code == 2
    assert "labels.csv has no label for sample 'b'" in output and "hint:" in output


def test_a_label_outside_the_classes_and_a_task_that_does_not_fit_are_bad_input(
    tmp_path: Path,
) -> None:
    np.savez(tmp_path / "set.npz", x=np.zeros((2, 1, 8, 8), np.float32), y=np.array([1, 11]))
    code, _, output = run(tmp_path, "digits", "-i", tmp_path / "set.npz")
    assert code == 2 and "label 11 of sample 1 is outside the model's 10 classes" in output
    code, _, output = run(tmp_path, "digits", "--task", "regression")
    assert code == 2 and "a regression output of 10 values per sample" in output
