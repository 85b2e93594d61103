"""int8-dynamic on a transformer, through the real runner on this machine: the device
is judged against the quantized program it runs, which quantizes each token's row of a
linear's input on its own range as XNNPACK does (before, one range for the whole
input made every correct build of a transformer fail by a percent of its range).

The model is a small Llama-shaped one trained on license texts (tests/data/models/
llama_block.py); its inputs are the token embeddings of held-out license prompts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from tests.support.planted import flip_one_int8_weight

pytestmark = pytest.mark.slow

MODELS = Path(__file__).parent.parent / "data" / "models"
LLAMA = MODELS / "llama_block.py"


def run(tmp_path: Path, *args: str | Path) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "result.json"
    done = CliRunner().invoke(
        app,
        [
            "run",
            *map(str, args),
            "--device",
            "local",
            "-n",
            "1",
            "--warmup",
            "0",
            "--json",
            str(out),
        ],
    )
    return done.exit_code, json.loads(out.read_text()), done.output


def _device_stage(result: dict[str, Any]) -> dict[str, Any]:
    stage: dict[str, Any] = result["verdict"]["budget"][-1]
    assert stage["stage"] == "device" and stage["measured"] == "device vs quantized eager"
    return stage


@pytest.fixture(scope="module")
def llama_int8_dynamic(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("llama")
    code, result, output = run(tmp, f"{LLAMA}:build", "--quantize", "int8-dynamic")
    return {"code": code, "result": result, "output": output}


def test_a_multi_row_linear_matches_its_int8_dynamic_reference_on_the_device(
    tmp_path: Path,
) -> None:
    code, result, _ = run(tmp_path, f"{LLAMA}:down_projection", "--quantize", "int8-dynamic")
    verdict = result["verdict"]
    assert code == 0, verdict["reason"]
    device = _device_stage(result)
    assert device["passed"]
    # fp32 reassociation, far inside the 1e-3-of-range budget (per-tensor: 1.1e-2).
    worst = max(m["max_abs"] for m in device["metrics"])
    assert verdict["reason"].startswith("device matches the quantized program")
    assert worst < 1e-4
    assert verdict["budget"][0]["stage"] == "quantization" and verdict["budget"][0]["passed"]


def test_a_llama_shaped_model_passes_int8_dynamic(llama_int8_dynamic: dict[str, Any]) -> None:
    result = llama_int8_dynamic["result"]
    assert llama_int8_dynamic["code"] == 0, result["verdict"]["reason"]
    assert _device_stage(result)["passed"]
    quantization = result["verdict"]["budget"][0]
    assert quantization["stage"] == "quantization" and quantization["sqnr_db"] >= 30


def test_a_stock_transformer_layer_with_a_dynamic_length_passes_int8_dynamic(
    tmp_path: Path,
) -> None:
    # torch.nn.TransformerEncoderLayer over IMU windows of 12, 20 and 24 steps, exported
    # for 4..32: one scale and zero point per step, whatever the length (before: 0.025
    # of its range off).
    model = MODELS / "gait_transformer.py"
    code, result, _ = run(tmp_path, f"{model}:build", "--quantize", "int8-dynamic")
    assert code == 0, result["verdict"]["reason"]
    assert _device_stage(result)["passed"]
    assert max(m["max_abs"] for m in _device_stage(result)["metrics"]) < 1e-5


def test_a_flipped_weight_in_an_int8_dynamic_transformer_still_fails(
    llama_int8_dynamic: dict[str, Any], tmp_path: Path
) -> None:
    built = Path(llama_int8_dynamic["result"]["artifact"]["pte"])
    broken = flip_one_int8_weight(built, tmp_path)  # one of the next-byte head's weights
    code, result, output = run(tmp_path, f"{LLAMA}:build", "--pte", broken)
    assert code == 1 and result["status"] == "failed"
    assert result["verdict"]["reason"].startswith("the device departs from the quantized program")
    assert "logits" in result["verdict"]["reason"]
    assert not _device_stage(result)["passed"]
    assert "departs from the quantized program" in output
