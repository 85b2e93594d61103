"""Bad input to a language-model run: one line, a hint, exit 2, before anything slow
(no build, no device: each of these returns in the time it takes to read config.json,
the tokenizer and the prompts)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from etdeploy.errors import ModelError, UsageError
from etdeploy.pipeline.llm.folder import looks_like_lm_folder, open_lm_folder
from etdeploy.pipeline.llm.lm_export import LmBuildOptions, check_options
from tests.cli.conftest import assert_one_line_error, etdeploy
from tests.support.tiny_lm import TinyLm


def _copy(tiny_lm: TinyLm, into: Path, *, without: tuple[str, ...] = ()) -> Path:
    folder = into / "model"
    shutil.copytree(tiny_lm.folder, folder, ignore=shutil.ignore_patterns(*without))
    return folder


def test_a_folder_with_config_json_takes_the_language_model_road(
    tiny_lm: TinyLm, tmp_path: Path
) -> None:
    assert looks_like_lm_folder(str(tiny_lm.folder))
    assert not looks_like_lm_folder(str(tmp_path))
    assert not looks_like_lm_folder("digits")
    folder = open_lm_folder(tiny_lm.folder)
    assert folder.architecture == "LlamaForCausalLM"
    assert folder.tokenizer.name == "tokenizer.json"
    assert folder.prompts is not None


def test_a_folder_that_is_not_a_causal_lm_is_refused(tiny_lm: TinyLm, tmp_path: Path) -> None:
    folder = _copy(tiny_lm, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["LlamaForSequenceClassification"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="not a causal language model"):
        open_lm_folder(folder)
    done = etdeploy("run", folder, cwd=tmp_path, timeout=120)
    assert_one_line_error(done, 2, "LlamaForSequenceClassification, not a causal language model")


def test_a_missing_tokenizer_is_refused(tiny_lm: TinyLm, tmp_path: Path) -> None:
    folder = _copy(tiny_lm, tmp_path, without=("tokenizer.json",))
    done = etdeploy("run", folder, "--quantize", "8da4w", cwd=tmp_path, timeout=120)
    assert_one_line_error(done, 2, "no tokenizer")


def test_missing_weights_are_refused(tiny_lm: TinyLm, tmp_path: Path) -> None:
    folder = _copy(tiny_lm, tmp_path, without=("*.safetensors",))
    with pytest.raises(ModelError, match=r"no \*\.safetensors"):
        open_lm_folder(folder)


def test_a_group_size_that_does_not_divide_a_layer_is_refused(
    tiny_lm: TinyLm, tmp_path: Path
) -> None:
    folder = open_lm_folder(tiny_lm.folder)  # hidden 64, intermediate 192
    check_options(folder, LmBuildOptions(quantize="8da4w", group_size=64))
    with pytest.raises(UsageError, match="does not divide"):
        check_options(folder, LmBuildOptions(quantize="8da4w", group_size=128))
    done = etdeploy(
        "run",
        tiny_lm.folder,
        "--quantize",
        "8da4w",
        "--group-size",
        "128",
        cwd=tmp_path,
        timeout=120,
    )
    assert_one_line_error(done, 2, "--group-size 128 does not divide")
    assert "32, 64" in done.errors[1]


def test_a_group_size_xnnpack_cannot_lower_is_refused_before_the_build(
    tiny_lm: TinyLm, tmp_path: Path
) -> None:
    # XNNPACK's rule (a multiple of 32) is named, not the layer a size happens not to divide.
    with pytest.raises(UsageError, match="not a multiple of 32"):
        check_options(
            open_lm_folder(tiny_lm.folder), LmBuildOptions(quantize="8da4w", group_size=48)
        )
    done = etdeploy(
        "run", tiny_lm.folder, "--quantize", "8da4w", "--group-size", "48",
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert_one_line_error(done, 2, "--group-size 48 is not a multiple of 32")
    assert "use 32" in done.errors[1]


def test_an_unknown_quantization_is_refused(tiny_lm: TinyLm, tmp_path: Path) -> None:
    done = etdeploy("run", tiny_lm.folder, "--quantize", "int4", cwd=tmp_path, timeout=120)
    assert_one_line_error(done, 2, "unknown quantization 'int4'")


def test_a_prompt_longer_than_the_context_is_refused(tiny_lm: TinyLm, tmp_path: Path) -> None:
    prompts = tmp_path / "long.txt"
    text = tiny_lm.held_out.read_text()
    prompts.write_text(tiny_lm.prompts.read_text() + " ".join(text.split()[:200]) + "\n")
    done = etdeploy("run", tiny_lm.folder, "--inputs", prompts, cwd=tmp_path, timeout=120)
    assert_one_line_error(done, 2, "long.txt:7: the prompt is")
    assert "the context is 128" in done.errors[0]


def test_prompts_come_from_a_file_a_folder_or_the_model_folder(
    tiny_lm: TinyLm, tmp_path: Path
) -> None:
    from etdeploy.pipeline.llm.prompts import prompt_texts

    folder = open_lm_folder(tiny_lm.folder)
    own = prompt_texts((), folder)
    assert [name for name, _ in own][:2] == ["prompts.txt:1", "prompts.txt:2"]
    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "a.txt").write_text(own[0][1])
    (texts / "b.txt").write_text("\n")  # empty: not a prompt
    assert prompt_texts((str(texts),), folder) == [("a.txt", own[0][1])]
    assert prompt_texts((str(tiny_lm.prompts),), folder) == own


def test_a_backend_other_than_xnnpack_is_refused(tiny_lm: TinyLm, tmp_path: Path) -> None:
    done = etdeploy("run", tiny_lm.folder, "--backend", "portable", cwd=tmp_path, timeout=120)
    assert_one_line_error(done, 2, "--backend portable: a language model is built for XNNPACK")
