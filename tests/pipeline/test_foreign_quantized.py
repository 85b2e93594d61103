"""An int8 .pte built elsewhere (a CI's build, a copy from an app: nothing beside
it, no manifest, no quantized program) is held to the quantized eager program
MODEL and the run's options give, to the quantization step, as etdeploy's own
build would be: from the build cache when that build is there, else MODEL
quantized again with the calibration the build uses. The verdict says which.

The .pte is pressure_chain's int8 build, made by `etdeploy build` in a cache of
its own (the CI machine) and copied out alone; the run uses the test session's
cache. A planted error is one int8 weight of the first linear layer negated
(-42 -> 42 in XNNPACK's payload): a few steps off at the output, while against
the float model it stays within the accuracy budget.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from etdeploy.cli import app

pytestmark = pytest.mark.slow

MODEL = f"{Path(__file__).parent.parent / 'data' / 'models' / 'pressure_chain.py'}:correct"


def run(tmp: Path, *args: str | Path) -> tuple[int, dict[str, Any], str]:
    out = tmp / "result.json"
    done = CliRunner().invoke(
        app, ["run", *map(str, args), "-n", "1", "--warmup", "0", "--json", str(out)]
    )
    return done.exit_code, json.loads(out.read_text()), done.output


def run_int8(tmp: Path, pte: Path, built: dict[str, Path]) -> tuple[int, dict[str, Any], str]:
    """`etdeploy run MODEL --quantize int8 --calibration DIR --pte FILE`."""
    return run(
        tmp, MODEL, "--quantize", "int8", "--calibration", built["calibration"], "--pte", pte
    )


@pytest.fixture(scope="module")
def built_elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The int8 .pte as a CI machine builds it (its own etdeploy cache), copied out
    alone, and a copy with one int8 weight negated; calibrated on a set of its
    own, so no build in this session's cache has the same key."""
    from tests.data.models.pressure_chain import SAMPLES, _pressure_windows

    tmp = tmp_path_factory.mktemp("built-elsewhere")
    calibration = tmp / "calibration"
    calibration.mkdir()
    for path in _pressure_windows(SAMPLES / "anomalies", anomalies=True):
        shutil.copy(path, calibration / path.name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ETDEPLOY_CACHE_DIR", str(tmp / "ci-cache"))
        done = CliRunner().invoke(
            app, ["build", MODEL, "--quantize", "int8", "--calibration", str(calibration),
                  "-o", str(tmp / "ci" / "chain.pte")],
        )  # fmt: skip
    assert done.exit_code == 0, done.output
    foreign = tmp / "app"
    foreign.mkdir()
    correct = Path(shutil.copy(tmp / "ci" / "chain.pte", foreign / "chain.pte"))
    yield {
        "correct": correct,
        "broken": _negate_an_int8_weight(correct),
        "calibration": calibration,
    }


def _negate_an_int8_weight(pte: Path) -> Path:
    """A copy whose first linear layer (the largest int8 weight in XNNPACK's
    payload) has its first weight of magnitude 32-48 negated."""
    from etdeploy.pte import read_pte

    weights = [c for c in read_pte(pte).delegate_constants if c.dtype == "qcint8" and c.offset]
    fc = max(weights, key=lambda c: c.nbytes)
    data = bytearray(pte.read_bytes())
    values = np.frombuffer(bytes(data[fc.offset : fc.offset + fc.nbytes]), np.int8).astype(int)
    at = int(np.flatnonzero((np.abs(values) >= 32) & (np.abs(values) <= 48))[0])
    data[fc.offset + at] = int(np.int8(-values[at]).view(np.uint8))
    broken = pte.with_name("broken.pte")
    broken.write_bytes(bytes(data))
    return broken


def test_nothing_but_the_pte_travels(built_elsewhere: dict[str, Path]) -> None:
    assert sorted(p.name for p in built_elsewhere["correct"].parent.iterdir()) == [
        "broken.pte", "chain.pte",
    ]  # fmt: skip


def test_a_correct_pte_built_elsewhere_passes_against_the_quantized_program_from_model(
    built_elsewhere: dict[str, Path], tmp_path: Path
) -> None:
    code, result, output = run_int8(tmp_path, built_elsewhere["correct"], built_elsewhere)
    verdict = result["verdict"]
    assert code == 0, verdict["reason"]
    # Not the float model by the accuracy budget alone: the quantized program, to the step.
    budget = {s["stage"]: s for s in verdict["budget"]}
    assert list(budget) == ["quantization", "device"]
    assert budget["device"]["rule"] == "steps" and budget["device"]["steps"] <= 1
    source = verdict["quantized_reference"]
    assert source.startswith(f"{MODEL} quantized again to int8 as its build would be")
    assert "calibrated on 8 sample(s)" in source
    assert f"(quantized reference: {source})" in verdict["reason"]
    assert not any("no quantized program beside" in w for w in result["warnings"])
    assert "quantized again" in " ".join(output.split())


def test_a_negated_int8_weight_fails_with_model_given(
    built_elsewhere: dict[str, Path], tmp_path: Path
) -> None:
    code, result, _ = run_int8(tmp_path, built_elsewhere["broken"], built_elsewhere)
    verdict = result["verdict"]
    assert code == 1 and result["status"] == "failed"
    assert verdict["reason"].startswith("the device departs from the quantized program")
    device = verdict["budget"][-1]
    assert device["stage"] == "device" and not device["passed"] and device["steps"] >= 2
    # Against the float model alone (the accuracy budget) it would have passed.
    assert min(m["sqnr_db"] for m in verdict["metrics"]) >= 15


def test_the_build_in_the_cache_is_the_reference_when_there_is_one(
    built_elsewhere: dict[str, Path], tmp_path: Path
) -> None:
    # Its own calibration set (seven of the windows): a build key no other test makes.
    calibration = tmp_path / "calibration"
    calibration.mkdir()
    for path in sorted(built_elsewhere["calibration"].iterdir())[:7]:
        shutil.copy(path, calibration / path.name)
    built = CliRunner().invoke(
        app, ["build", MODEL, "--quantize", "int8", "--calibration", str(calibration),
              "-o", str(tmp_path / "here.pte")],
    )  # fmt: skip
    assert built.exit_code == 0, built.output
    _, result, _ = run_int8(tmp_path, built_elsewhere["correct"], {"calibration": calibration})
    verdict = result["verdict"]
    assert verdict["quantized_reference"] == f"from {MODEL}'s int8 build in the build cache"
    assert verdict["budget"][-1]["rule"] == "steps"


def test_without_model_it_is_the_float_reference_by_the_accuracy_budget_and_says_so(
    built_elsewhere: dict[str, Path], tmp_path: Path
) -> None:
    import torch

    from tests.data.models.pressure_chain import SAMPLES, correct

    sample = SAMPLES / "anomalies" / "station00.npy"
    with torch.no_grad():
        forecast = correct().module(torch.from_numpy(np.load(sample))).numpy()
    expected = tmp_path / "expected.npz"
    np.savez(expected, o0=forecast)
    code, result, _ = run(
        tmp_path, "--pte", built_elsewhere["correct"], "--quantize", "int8",
        "--inputs", sample, "--reference", expected,
    )  # fmt: skip
    assert code == 0, result["verdict"]["reason"]
    assert "quantized_reference" not in result["verdict"]
    assert [s["rule"] for s in result["verdict"]["budget"]] == ["accuracy"]
    assert any("no MODEL to derive it from" in w for w in result["warnings"])
