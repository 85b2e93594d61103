"""A release set of a language model: each variant built as `etdeploy run FOLDER`
builds it (8da4w or float, a static KV cache at the variant's max_seq_len), sized
against the stores' limits, and `release check` generating on this machine with the
variant the rules give it, held token by token to eager PyTorch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from tests.support.device_config import write_config
from tests.support.lm_programs import GROUP_SIZE, MAX_CACHE_LEN
from tests.support.tiny_lm import TinyLm

pytestmark = pytest.mark.slow


def _spec(where: Path, folder: Path, q4: str = 'quantize = "8da4w"') -> Path:
    # The session's own builds (tests/support/lm_programs.py): same options, read back.
    spec = where / "release.toml"
    spec.write_text(
        f'[release]\nname = "tiny"\nmodel = "{folder}"\nfallback = "q4"\n\n'
        f"[release.variants.q4]\n{q4}\nmax_seq_len = {MAX_CACHE_LEN}\n"
        f"group_size = {GROUP_SIZE}\n\n"
        f"[release.variants.fp32]\nmax_seq_len = {MAX_CACHE_LEN}\n\n"
        '[[release.groups]]\nname = "huge"\nvariant = "fp32"\nram_min_bytes = "1TB"\n'
    )
    return spec


def test_a_language_models_release_builds_its_variants_and_this_machine_verifies_its_own(
    tiny_lm: TinyLm, tmp_path: Path
) -> None:
    spec = _spec(tmp_path, tiny_lm.folder)
    built = CliRunner().invoke(app, ["release", "build", str(spec), "-o", str(tmp_path / "out")])
    assert built.exit_code == 0, built.output
    groups = json.loads((tmp_path / "out" / "selection.json").read_text())["play"]["groups"]
    assert {g["name"]: g["variant"] for g in groups} == {"huge": "fp32", "other": "q4"}
    assets = tmp_path / "out" / "play" / "tiny" / "src" / "main" / "assets"
    assert (assets / "model#group_other" / "model.pte").is_file()

    config = write_config(tmp_path / "etdeploy.toml", {})
    proof_path = tmp_path / "proof.json"
    args = ["release", "check", str(spec), "--config", str(config), "-d", "local",
            "--json", str(proof_path)]  # fmt: skip
    checked = CliRunner().invoke(app, args)
    assert checked.exit_code == 0, checked.output
    (row,) = json.loads(proof_path.read_text())["devices"]
    # 24 GiB here: not in "huge", so the fallback, 8da4w, run as it was built.
    assert (row["group"], row["variant"], row["verdict"]) == ("other", "q4", "passed")
    lm = row["result"]["language_model"]
    assert row["result"]["job"]["quantization"] == f"8da4w g{GROUP_SIZE}"
    quantized = next(c for c in lm["comparisons"] if c["reference"] == "quantized eager")
    assert quantized["top1_agreement"] == 1.0


def test_a_program_quantization_in_a_language_models_variant_is_one_line_exit_2(
    tiny_lm: TinyLm, tmp_path: Path
) -> None:
    spec = _spec(tmp_path, tiny_lm.folder, q4='quantize = "int8"')
    done = CliRunner().invoke(app, ["release", "build", str(spec), "-o", str(tmp_path / "out")])
    assert done.exit_code == 2, done.output
    assert "release.variants.q4.quantize: 'int8' is not 8da4w (for a language model's folder)" in (
        " ".join(done.output.split())
    )
    assert not (tmp_path / "out").exists()
