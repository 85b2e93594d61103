"""Generation stops at the tokenizer's end of sequence, on the device and in eager
PyTorch alike: the tiny Llama learnt `</s>` at the end of every paragraph, so from a
paragraph's last words its greedy continuation ends; the runner stops there, and float
and quantized eager stop at the same token."""

from __future__ import annotations

from pathlib import Path

import pytest

from etdeploy.pipeline.llm.folder import eos_ids, open_lm_folder
from tests.pipeline.llm.conftest import run_lm
from tests.support.tiny_lm import ENDING_PROMPT, EOS_ID, TinyLm

pytestmark = pytest.mark.slow


def test_the_folders_end_id_is_its_configs(tiny_lm: TinyLm) -> None:
    assert eos_ids(open_lm_folder(tiny_lm.folder)) == (EOS_ID,)


def test_a_continuation_that_ends_stops_on_the_device_where_eager_stops(
    tiny_lm: TinyLm, tmp_path: Path
) -> None:
    prompts = tmp_path / "prompts.txt"
    # A sentence that ends (seen with transformers' generate), and one that goes on.
    going_on = tiny_lm.prompts.read_text(encoding="utf-8").splitlines()[0]
    prompts.write_text(f"{ENDING_PROMPT}\n{going_on}\n", encoding="utf-8")
    run = run_lm(tiny_lm.folder, tmp_path, "--inputs", prompts, "--max-new-tokens", "16")
    assert run.done.returncode == 0, run.done.stderr
    ending, longer = run.block["samples"]
    # Stopped after </s>, well before 16 tokens, the same in float eager.
    assert ending["device_text"].endswith("</s>") and ending["device_text"].count("</s>") == 1
    assert ending["device_text"] == ending["float_text"] == ending["quantized_text"]
    assert len(ending["device_text"]) < len(longer["device_text"])
    assert "</s>" not in longer["device_text"] and longer["device_text"] == longer["float_text"]
    floats = run.comparison("float eager")
    assert floats.get("first_generation_divergence") is None
    assert floats["generated_per_prompt"] == 16
    # The token counts asked for are still what the figures are quoted at.
    assert run.block["speed"]["new_tokens"] == 16
