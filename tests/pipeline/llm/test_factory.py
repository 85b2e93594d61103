"""A factory that returns a causal LM (`etdeploy run lm.py:build`) takes the road a
Hugging Face folder takes: the model saved once as the folder it would have been, its
tokenizer from the folder it was loaded from or named by the factory's ModelSpec, its
prompts from the ModelSpec's samples or the tokenizer's folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.cli.conftest import assert_one_line_error, etdeploy
from tests.pipeline.llm.conftest import run_lm
from tests.support.tiny_lm import TinyLm

pytestmark = pytest.mark.slow

FACTORIES = '''
from pathlib import Path

from transformers import AutoModelForCausalLM

from etdeploy.model import ModelSpec

# In a folder of its own: a file beside the factory is part of its fingerprint.
CALLS = Path({calls!r})


def from_folder():
    """The model, as from_pretrained loads it: the tokenizer is in its folder."""
    with CALLS.open("a") as calls:
        calls.write("from_folder\\n")
    return AutoModelForCausalLM.from_pretrained({folder!r})


def naming_its_tokenizer():
    """Weights alone in one folder; the tokenizer and the prompts named."""
    return ModelSpec(
        module=AutoModelForCausalLM.from_pretrained({weights!r}),
        example_inputs=(),
        tokenizer=Path({tokenizer!r}),
        samples=[Path({prompts!r})],
    )


def without_a_tokenizer():
    return AutoModelForCausalLM.from_pretrained({weights!r})
'''


@pytest.fixture
def factories(tiny_lm: TinyLm, tmp_path: Path) -> Path:
    weights = tmp_path / "weights-only"
    shutil.copytree(
        tiny_lm.folder, weights, ignore=shutil.ignore_patterns("tokenizer*", "prompts.txt")
    )
    (tmp_path / "model").mkdir()
    (tmp_path / "calls").mkdir()
    source = tmp_path / "model" / "lm.py"
    source.write_text(
        FACTORIES.format(
            folder=str(tiny_lm.folder), weights=str(weights),
            tokenizer=str(tiny_lm.folder / "tokenizer.json"), prompts=str(tiny_lm.prompts),
            calls=str(tmp_path / "calls" / "calls.txt"),
        )
    )  # fmt: skip
    return source


def test_a_factorys_causal_lm_runs_as_its_folder_would_and_is_saved_once(
    factories: Path, tmp_path: Path
) -> None:
    run = run_lm(f"{factories}:from_folder", tmp_path, "--max-new-tokens", "8")
    assert run.done.returncode == 0, run.done.stderr
    assert run.document["job"]["model"] == f"{factories}:from_folder"
    assert run.block["architecture"] == "LlamaForCausalLM"
    # The folder's own prompts.txt came with its tokenizer.
    assert run.block["prompts"] == 6 and run.block["prompt_source"].endswith("prompts.txt")
    floats = run.comparison("float eager")
    assert floats["top1_agreement"] == 1.0 and floats["kld_mean"] < 1e-6
    # A second run finds the saved folder: the factory does not run again.
    again = run_lm(f"{factories}:from_folder", tmp_path, "--max-new-tokens", "8")
    assert again.done.returncode == 0, again.done.stderr
    assert (tmp_path / "calls" / "calls.txt").read_text().splitlines() == ["from_folder"]
    assert again.device_texts() == run.device_texts()


def test_a_factory_names_its_tokenizer_and_prompts_in_its_model_spec(
    factories: Path, tiny_lm: TinyLm, tmp_path: Path
) -> None:
    run = run_lm(f"{factories}:naming_its_tokenizer", tmp_path, "--max-new-tokens", "8")
    assert run.done.returncode == 0, run.done.stderr
    assert run.block["prompt_source"] == str(tiny_lm.prompts)
    assert run.comparison("float eager")["top1_agreement"] == 1.0


def test_a_factorys_causal_lm_without_a_tokenizer_is_refused(
    factories: Path, tmp_path: Path
) -> None:
    done = etdeploy("run", f"{factories}:without_a_tokenizer", cwd=tmp_path, timeout=300)
    assert_one_line_error(done, 2, "returned a causal LM, but no tokenizer")
    assert "ModelSpec(" in done.errors[1]
