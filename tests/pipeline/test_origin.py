"""`run --localize` names where an error is born, not where it becomes visible:
each tapped operator is run again eagerly on the device's own inputs, so its
own error is told apart from the error it was handed, and judged against what
float32 allows it.

Five real cases, each on the portable and the XNNPACK backend (the local
device, the real runner, structured sensor inputs; the models are in
tests/data/models/conditioning.py and pressure_chain.py), and digits, where
nothing departs and no origin is named:

- a mean whose rounding (within float32's bound for 2048 values) a subtraction
  reveals: the origin is the mean, the subtraction its amplifier (cancellation);
- a division by a small value: the mean's rounding, amplified at the division;
- a softmax over large logits (sums of large energies): no operator is wrong,
  the model is ill-conditioned in float32, and the verdict says what to do;
- a group norm whose ExecuTorch kernel computes the variance as E[x^2]-E[x]^2:
  an operator over its bound mid-chain, the origin; the layers around it are not;
- the layer_norm of pressure_chain (the same kernel flaw): the origin
  (tests/pipeline/test_localize.py, on both backends too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.results.result import RunResult
from etdeploy.results.schema import validate_result

pytestmark = pytest.mark.slow

MODELS = Path(__file__).parent.parent / "data" / "models"
CASES = {
    "detrend": f"{MODELS / 'conditioning.py'}:detrend",
    "ratio": f"{MODELS / 'conditioning.py'}:ratio",
    "attention": f"{MODELS / 'conditioning.py'}:attention",
    "thermal": f"{MODELS / 'conditioning.py'}:thermal",
    "altitude": f"{MODELS / 'conditioning.py'}:altitude",
}


def localize(tmp: Path, model: str, backend: str) -> tuple[int, dict[str, Any], str]:
    out = tmp / "result.json"
    done = CliRunner().invoke(
        app,
        ["run", model, "--backend", backend, "--localize", "-n", "1", "--warmup", "0",
         "--json", str(out)],
    )  # fmt: skip
    return done.exit_code, json.loads(out.read_text()), done.output


@pytest.fixture(scope="module", params=["portable", "xnnpack"])
def runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[int, dict[str, Any], str]]:
    """Every case localised once per backend, shared by the tests below."""
    backend = request.param
    return {
        name: localize(tmp_path_factory.mktemp(f"{name}-{backend}"), model, backend)
        for name, model in CASES.items()
    }


def origin_of(run: tuple[int, dict[str, Any], str]) -> dict[str, Any]:
    code, result, output = run
    assert code == 1, output  # every case departs from eager on the device
    found = result["localization"]
    assert found["origin"] is not None, found["reason"]
    return found


def test_a_mean_whose_rounding_a_subtraction_reveals_is_the_origin_and_the_sub_amplifies(
    runs: dict[str, Any],
) -> None:
    found = origin_of(runs["detrend"])
    taps = {t["node"]: t for t in found["taps"]}
    origin = found["origin"]
    assert origin["op"] == "mean" and origin["over_bound"] is False
    assert origin["error"]["kind"] == "sum" and origin["error"]["n"] == 2048
    # The subtraction computes its result exactly given what it was handed...
    assert taps["sub"]["local"]["rel"] == 0
    # ...and is where the error becomes visible: the old first divergence.
    assert found["first_divergence"]["node"] == "sub"
    [amplifier] = found["amplifiers"]
    assert (amplifier["op"], amplifier["cause"]) == ("sub", "cancellation")
    assert amplifier["factor"] > 1_000
    assert found["status"] == "ill_conditioned"
    assert f"relative error × {amplifier['factor']:,.0f} at sub: cancellation" in found["reason"]
    assert "subtract the common level" in found["hint"]


def test_an_add_that_makes_values_large_is_not_the_origin_when_eager_rounds_it_alike(
    runs: dict[str, Any],
) -> None:
    """Issue 39's case: a level added (~1,013 m), a mean over 4,096 values, a subtraction.
    The add rounds as eager does, bit for bit: its value is eager's, and the ORIGIN row
    is the mean, the first value that differs."""
    found = origin_of(runs["altitude"])
    taps = {t["node"]: t for t in found["taps"]}
    assert taps["add"]["metrics"]["max_abs"] == 0 and taps["add"]["local"]["rel"] > 0
    assert found["origin"]["op"] == "mean" and found["status"] == "ill_conditioned"
    assert taps["mean"]["metrics"]["max_abs"] > 0
    [amplifier] = found["amplifiers"]
    assert (amplifier["op"], amplifier["cause"]) == ("sub", "cancellation")
    origin_row = next(line for line in runs["altitude"][2].splitlines() if "ORIGIN" in line)
    assert " mean " in origin_row and "0.00e+00" not in origin_row


def test_a_division_by_a_small_mean_is_named_as_the_amplifier(runs: dict[str, Any]) -> None:
    found = origin_of(runs["ratio"])
    assert found["origin"]["op"] == "mean" and found["origin"]["over_bound"] is False
    [amplifier] = found["amplifiers"]
    assert (amplifier["op"], amplifier["cause"]) == ("div", "division by small values")
    assert amplifier["factor"] > 100
    assert {t["node"]: t for t in found["taps"]}["div"]["local"]["ratio"] < 1


def test_a_softmax_over_large_logits_with_no_wrong_operator_is_ill_conditioned(
    runs: dict[str, Any],
) -> None:
    found = origin_of(runs["attention"])
    assert found["status"] == "ill_conditioned"
    assert all(t["local"]["ratio"] < 1 for t in found["taps"])  # no operator wrong
    assert found["origin"]["op"] == "sum"
    [amplifier] = found["amplifiers"]
    assert (amplifier["op"], amplifier["cause"]) == ("softmax", "softmax over large logits")
    assert found["reason"].startswith(
        "no operator computes anything float32 does not allow it, given what it was handed: "
        "the model is ill-conditioned in float32 here"
    )
    assert "float64 on the host side" in found["hint"]
    output = runs["attention"][2]
    assert "ORIGIN" in output and "AMPLIFIER ×" in output and "hint: " in output


def test_a_broken_operator_mid_chain_is_the_origin_not_the_layers_around_it(
    runs: dict[str, Any],
) -> None:
    found = origin_of(runs["thermal"])
    taps = {t["node"]: t for t in found["taps"]}
    origin = found["origin"]
    assert (origin["op"], origin["module"]) == ("group_norm", "norm")
    assert origin["over_bound"] is True and origin["error"]["ratio"] > 3
    assert origin["partition"] == "CPU" and origin["kernel"] == "native_group_norm"
    assert taps["conv1d"]["local"]["ratio"] < 1 and taps["linear"]["local"]["ratio"] < 1
    assert found["status"] == "localized" and found["amplifiers"] == []
    assert "hint" not in found


def test_every_case_reads_back_whole_and_fits_the_schema(runs: dict[str, Any]) -> None:
    for _, result, _ in runs.values():
        validate_result(result)
        assert RunResult.from_json(result).to_json() == result


def test_digits_names_no_origin(tmp_path: Path) -> None:
    code, result, _ = localize(tmp_path, "digits", "xnnpack")
    assert code == 0
    found = result["localization"]
    assert found["status"] == "clean" and "origin" not in found and found["amplifiers"] == []
    assert all(t["local"]["ratio"] < 1 for t in found["taps"])
