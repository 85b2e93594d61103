"""Generation stops at the tokenizer's end of sequence, on the device and in eager
PyTorch alike: the tiny Llama learnt `</s>` at the end of every paragraph, and from
two of its held-out prompts its greedy continuation ends within the 16 tokens asked
(seen 2026-12-05); the runner stops there, and float and quantized eager stop at the
same token. Read from the session's 8da4w run: no run of its own."""

from __future__ import annotations

import pytest

from etdeploy.pipeline.llm.folder import open_lm_folder
from etdeploy.pipeline.llm.prompts import eos_ids
from tests.pipeline.llm.conftest import LmRun
from tests.support.tiny_lm import EOS_ID, TinyLm

pytestmark = pytest.mark.slow


def test_the_folders_end_id_is_its_configs(tiny_lm: TinyLm) -> None:
    assert eos_ids(open_lm_folder(tiny_lm.folder)) == (EOS_ID,)


def test_a_continuation_that_ends_stops_on_the_device_where_eager_stops(int4_run: LmRun) -> None:
    samples = int4_run.block["samples"]
    ended = [s for s in samples if s["device_text"].endswith("</s>")]
    going_on = [s for s in samples if "</s>" not in s["device_text"]]
    assert ended and going_on, [s["device_text"] for s in samples]
    for sample in ended:
        # Stopped after its one </s>, well before 16 tokens, where quantized eager stopped.
        assert sample["device_text"].count("</s>") == 1
        assert sample["device_text"] == sample["quantized_text"]
        assert len(sample["device_text"]) < min(len(s["device_text"]) for s in going_on)
    # The token count asked for is still what the figures are quoted at.
    assert int4_run.block["speed"]["new_tokens"] == 16
    assert int4_run.comparison("quantized eager")["generated_per_prompt"] == 16
