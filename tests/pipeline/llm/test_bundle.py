"""A language model as a job bundle: made once where torch is (`etdeploy bundle FOLDER`),
run where it is not (`etdeploy run --bundle DIR` in the base install): the device
generates, and the tokens are held to the float and quantized eager references the
bundle carries, to the same verdict as `etdeploy run FOLDER`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etdeploy.results.schema import validate_result
from tests.bundle.test_base_install import in_venv
from tests.cli.conftest import etdeploy
from tests.pipeline.llm.conftest import LmRun
from tests.support.tiny_lm import TinyLm

pytestmark = pytest.mark.slow


def test_a_language_model_bundle_runs_without_torch_to_the_same_tokens(
    tiny_lm: TinyLm, int4_run: LmRun, base_venv: Path, tmp_path: Path
) -> None:
    bundle = tmp_path / "tiny-llama.bundle"
    made = etdeploy("bundle", tiny_lm.folder, "--quantize", "8da4w", "-o", bundle, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["language_model"] == "language_model/case.json"
    assert "language_model/quantized.npz" in manifest["files"]
    out = tmp_path / "result.json"
    done = in_venv(base_venv, "run", "--bundle", bundle, "--json", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    validate_result(document)
    assert document["job"]["model"] == str(tiny_lm.folder)
    assert document["artifact"]["sha256"] == int4_run.document["artifact"]["sha256"]
    block = document["language_model"]
    assert block["passed"] and block["quantization"] == "8da4w g32"
    quantized = next(c for c in block["comparisons"] if c["reference"] == "quantized eager")
    assert quantized["top1_agreement"] == 1.0
    # The texts come from the bundle's tokens, as the tokenizer says them.
    assert [s["device_text"] for s in block["samples"]] == int4_run.device_texts()
