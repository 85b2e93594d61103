"""A quantized build is judged twice: the device against the quantized program it
runs (to the quantization step), and quantization itself against the float model
(the accuracy budget). Each output by the metrics of its kind.

Real models, real runner, real inputs (held-out digits; structured signals).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.builder import quantized_program_path
from etdeploy.cli import app
from etdeploy.pte.reader import read_pte

pytestmark = pytest.mark.slow

MODELS = Path(__file__).parent.parent / "data" / "models"
KINDS = MODELS / "quantized_kinds.py"


def run(tmp_path: Path, *args: str | Path) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "result.json"
    done = CliRunner().invoke(
        app, ["run", *map(str, args), "-n", "1", "--warmup", "0", "--json", str(out)]
    )
    return done.exit_code, json.loads(out.read_text()), done.output


@pytest.fixture(scope="module")
def int8_digits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("int8")
    code, result, output = run(tmp, "digits", "--quantize", "int8")
    return {"code": code, "result": result, "output": output}


def test_a_correct_int8_build_passes_with_its_error_budget_printed(
    int8_digits: dict[str, Any],
) -> None:
    result, output = int8_digits["result"], int8_digits["output"]
    assert int8_digits["code"] == 0, result["verdict"]["reason"]
    budget = {stage["stage"]: stage for stage in result["verdict"]["budget"]}
    assert list(budget) == ["quantization", "device"]
    assert budget["quantization"]["measured"] == "quantized eager vs float eager"
    assert (
        budget["quantization"]["sqnr_db"] >= 15 and budget["quantization"]["top1_agreement"] >= 0.9
    )
    # The device computes the quantized program itself: within a step of it.
    assert budget["device"]["measured"] == "device vs quantized eager"
    # Within a step (a tie the two round differently reads as 1 step and a rounding).
    assert budget["device"]["steps"] <= 1 + 1e-5
    assert result["verdict"]["kinds"] == [
        {"name": "logits", "kind": "classifier", "declared": True}
    ]
    assert result["verdict"]["thresholds"]["quant_steps"] == 1.0
    assert "error budget" in output and "quantization" in output


def _flip_an_int8_weight(pte: Path, into: Path) -> Path:
    """A copy of `pte` whose fully connected layer has one int8 weight sign-flipped
    (-127 -> 127) in the XNNPACK payload: a kernel that computes the wrong thing."""
    layout = read_pte(pte)
    weights = [c for c in layout.delegate_constants if c.dtype == "qcint8" and c.offset]
    fc = weights[-1]  # [10, 512]: the classifier's weights
    data = bytearray(pte.read_bytes())
    at = fc.offset + bytes(data[fc.offset : fc.offset + fc.nbytes]).index(b"\x81")
    data[at] = 0x7F
    broken = into / "broken.pte"
    broken.write_bytes(bytes(data))
    # Its build's manifest and quantized program, as if the lowering had produced it.
    manifest = json.loads(Path(f"{pte}.json").read_text())
    manifest["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    Path(f"{broken}.json").write_text(json.dumps(manifest))
    shutil.copyfile(quantized_program_path(pte), quantized_program_path(broken))
    return broken


def test_one_flipped_int8_weight_fails_against_the_quantized_program(
    int8_digits: dict[str, Any], tmp_path: Path
) -> None:
    broken = _flip_an_int8_weight(Path(int8_digits["result"]["artifact"]["pte"]), tmp_path)
    code, result, output = run(tmp_path, "digits", "--pte", broken)
    verdict = result["verdict"]
    assert code == 1 and result["status"] == "failed"
    assert verdict["reason"].startswith("the device departs from the quantized program")
    assert "logits" in verdict["reason"]
    device = verdict["budget"][-1]
    assert device["stage"] == "device" and not device["passed"] and device["steps"] > 2
    # Against the float model alone it would have passed: SQNR stays over the floor.
    assert min(m["sqnr_db"] for m in verdict["metrics"]) >= 15
    assert "departs from the quantized program" in output


def test_a_regression_output_with_ties_passes_when_its_signal_holds(tmp_path: Path) -> None:
    code, result, _ = run(tmp_path, f"{KINDS}:smoothing", "--quantize", "int8")
    verdict = result["verdict"]
    assert code == 0, verdict["reason"]
    # Its [1, 64] output reads like logits, and int8 makes its equal peaks ties...
    assert verdict["kinds"] == [{"name": "smoothed", "kind": "classifier", "declared": False}]
    assert verdict["top1_agreement"] < 0.9
    # ...but a guessed kind is not held to top-1: the signal is what it must keep.
    assert verdict["budget"][0]["sqnr_db"] >= 15
    assert "reported" in verdict["reason"]
    assert any("guessed from the shape" in w for w in result["warnings"])


def test_declaring_the_kind_holds_an_output_to_its_metrics(tmp_path: Path) -> None:
    code, result, _ = run(
        tmp_path, f"{KINDS}:smoothing", "--quantize", "int8", "--output-kind", "smoothed=regression"
    )
    assert code == 0
    assert result["verdict"]["kinds"][0] == {
        "name": "smoothed",
        "kind": "regression",
        "declared": True,
    }
    assert "top-1" not in result["verdict"]["reason"]


def test_an_int8_classifier_that_loses_top1_agreement_fails(tmp_path: Path) -> None:
    code, result, output = run(tmp_path, f"{KINDS}:near_ties", "--quantize", "int8")
    verdict = result["verdict"]
    assert code == 1 and result["status"] == "failed"
    quantization, device = verdict["budget"]
    # The device computes the quantized program faithfully; quantization is what costs.
    assert device["passed"] and not quantization["passed"]
    assert quantization["sqnr_db"] >= 15 and quantization["top1_agreement"] < 0.9
    assert verdict["reason"].startswith("quantization costs more than the accuracy budget")
    assert "logits top-1 agreement" in verdict["reason"]
    assert "FAIL quantization costs more than the accuracy budget" in " ".join(output.split())


def test_an_embedding_is_judged_by_cosine(tmp_path: Path) -> None:
    code, result, _ = run(tmp_path, f"{KINDS}:embedder", "--quantize", "int8")
    assert code == 0, result["verdict"]["reason"]
    assert "cosine" in result["verdict"]["budget"][0]["reason"]
    strict, result, _ = run(
        tmp_path, f"{KINDS}:embedder", "--quantize", "int8", "--min-cosine", "0.99999"
    )
    assert strict == 1 and "embedding cosine" in result["verdict"]["reason"]
    assert result["verdict"]["thresholds"]["min_cosine"] == 0.99999


def test_the_accuracy_budget_comes_from_etdeploy_toml_and_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "etdeploy.toml").write_text(
        '[verify]\nmin_sqnr_db = 60\n[verify.output_kinds]\nlogits = "classifier"\n'
    )
    monkeypatch.chdir(tmp_path)
    code, result, _ = run(tmp_path, "digits", "--quantize", "int8")
    assert code == 1
    assert result["verdict"]["thresholds"]["min_sqnr_db"] == 60
    assert "logits SQNR" in result["verdict"]["reason"] and "< 60 dB" in result["verdict"]["reason"]


def test_a_build_calibrated_on_noise_says_so_in_the_result(tmp_path: Path) -> None:
    built = tmp_path / "noisy.pte"
    done = CliRunner().invoke(
        app, ["build", "digits", "--quantize", "int8", "--random-calibration", "-o", str(built)]
    )
    assert done.exit_code == 0, done.output
    _, result, output = run(tmp_path, "digits", "--pte", built)
    assert any("calibrated on noise" in w for w in result["warnings"])
    assert "calibrated on noise" in " ".join(output.split())


def test_a_malformed_output_kind_is_bad_input(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["run", "digits", "--output-kind", "logits"])
    assert done.exit_code == 2 and "NAME=KIND" in done.output
    done = CliRunner().invoke(app, ["run", "digits", "--output-kind", "logits=probabilities"])
    assert done.exit_code == 2 and "classifier" in done.output


def test_junit_and_html_carry_the_budget_and_the_calibration_warning(
    int8_digits: dict[str, Any], tmp_path: Path
) -> None:
    from etdeploy.report import write_html, write_junit
    from etdeploy.results import RunResult

    doc = json.loads(json.dumps(int8_digits["result"]))
    doc["warnings"] = ["int8 calibrated on noise (--random-calibration): ..."]
    result = RunResult.from_json(doc)
    write_junit([result], tmp_path / "r.xml")
    write_html([result], tmp_path / "r.html")
    junit = (tmp_path / "r.xml").read_text()
    assert "budget: quantization (quantized eager vs float eager)" in junit
    assert "budget: device (device vs quantized eager)" in junit
    assert "calibrated on noise" in junit
    page = (tmp_path / "r.html").read_text()
    assert "Error budget" in page and "device vs quantized eager" in page
    assert "calibrated on noise" in page
