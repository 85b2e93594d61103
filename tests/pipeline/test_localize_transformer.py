"""`run --localize` on a stock torch.nn.TransformerEncoderLayer with a dynamic
sequence length, on XNNPACK, fp32 and int8: it reaches a verdict.

XNNPACK hands each of its partition's outputs out once and refuses an output
that is also an input (a pass-through). Tapping every operator of a
transformer layer asks for both: an eval-mode dropout's value is its input's
(the delegate drops the dropout), and the quantizer gives each reader of a
quantized value its own dequantized copy. Taps carrying the same value are
handed out once (the others say which tap they share), and views a delegate
still refuses to hand out are left untapped with the reason.
Real model, real runner, walking-gait IMU windows of three lengths.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app

pytestmark = pytest.mark.slow

MODEL = f"{Path(__file__).parent.parent / 'data' / 'models' / 'gait_transformer.py'}:build"


@pytest.fixture(scope="module", params=[(), ("--quantize", "int8")], ids=["fp32", "int8"])
def run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[int, dict[str, Any], str]:
    out = tmp_path_factory.mktemp("transformer") / "result.json"
    done = CliRunner().invoke(
        app,
        ["run", MODEL, "--backend", "xnnpack", *request.param, "--localize",
         "--localize-samples", "2", "-n", "1", "--warmup", "0", "--json", str(out)],
    )  # fmt: skip
    return done.exit_code, json.loads(out.read_text()), done.output


def test_the_layer_is_localised_to_a_verdict_on_xnnpack(
    run: tuple[int, dict[str, Any], str],
) -> None:
    code, result, output = run
    assert code == 0, output
    found = result["localization"]
    assert found["status"] == "clean", found["reason"]
    assert found["attempts"][0]["granularity"] == "ops" and found["attempts"][0]["taps"] > 10
    assert sorted(found["samples"]) == ["walk0_12", "walk1_20", "walk2_24"]  # every length
    ops = {t["op"] for t in found["taps"]}
    assert {"linear", "scaled_dot_product_attention", "layer_norm", "add"} <= ops
    assert any(t["partition"] == "XNNPACK" for t in found["taps"])
    # No operator over its bound (an int8 value may land one step away: its bound).
    assert all(t["local"]["ratio"] <= 1.001 for t in found["taps"] if "local" in t)
    # The error a lowering failure used to print four times is gone.
    assert "is already in the inputs" not in output
    assert "no tapped program could be built" not in output


def test_values_a_delegate_hands_out_once_are_shared_or_left_untapped_with_the_reason(
    run: tuple[int, dict[str, Any], str],
) -> None:
    _, result, output = run
    found = result["localization"]
    taps = {t["node"]: t for t in found["taps"]}
    # An eval-mode dropout carries its input's value: tapped there.
    shared = {node: t["same_as"] for node, t in taps.items() if "same_as" in t}
    untapped = found["program"]["why_untapped"]
    for dropout in ("dropout", "dropout_1", "dropout_2"):
        assert dropout in shared or dropout in untapped
    if "dropout" in shared:
        assert shared["dropout"] == "transpose_5" and "(= transpose_5)" in output
    for node, reason in untapped.items():
        assert node in found["program"]["untapped"] and reason
        assert f"not tapped ({reason})" in " ".join(output.split())
