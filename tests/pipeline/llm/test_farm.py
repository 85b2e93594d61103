"""A farm job whose model is a language-model folder runs like any other: built (the
session's cached float program), generating on the device, judged token by token, and
its token agreement in the farm's document (farm.json: the job's whole result).

The float build: a farm spec's `quantize` takes the ordinary builds' quantizations
(etdeploy.farm.spec refuses 8da4w today, in the spec's own check)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.farm_fixtures import write_spec
from tests.support.tiny_lm import TinyLm

pytestmark = pytest.mark.slow


def test_a_farm_job_of_a_language_model_folder_reports_its_token_agreement(
    tiny_lm: TinyLm, tmp_path: Path
) -> None:
    # A folder beside the spec, named relative to it as farm specs name their models.
    (tmp_path / "tiny-llama").symlink_to(tiny_lm.folder)
    spec = write_spec(
        tmp_path / "nightly.toml",
        {"models": ["tiny-llama"], "quantize": ["none"], "devices": ["local"], "retries": 0},
    )
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "etdeploy", "farm", str(spec), "--out", str(out),
         "--junit", str(tmp_path / "junit.xml")],
        cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = json.loads((out / "farm.json").read_text())
    (result,) = document["results"]
    assert result["job"]["model"] == "tiny-llama" and result["status"] == "passed"
    assert result["language_model"]["quantization"] == "float32"
    floats = next(
        c for c in result["language_model"]["comparisons"] if c["reference"] == "float eager"
    )
    assert floats["top1_agreement"] == 1.0 and floats["kld_mean"] < 1e-6
    assert result["verdict"]["top1_agreement"] == 1.0
    junit = (tmp_path / "junit.xml").read_text()
    assert 'failures="0"' in junit and "tiny-llama[xnnpack+float32] on local" in junit
