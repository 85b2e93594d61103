"""What a language-model run was checked to be (llm/run.py's check_lm_job), the record
the LM road's stages, its result and its job bundle read."""

from __future__ import annotations

from dataclasses import dataclass

from etdeploy.pipeline.llm.folder import LmFolder
from etdeploy.pipeline.llm.lm_export import LmBuildOptions
from etdeploy.pipeline.llm.prompts import Prompt
from etdeploy.results.result_lm import LmGates


@dataclass(frozen=True)
class LmJob:
    """What a language-model run was checked to be, before anything slow."""

    # None: read from a job bundle (etdeploy.pipeline.llm.bundle), no folder at hand.
    folder: LmFolder | None
    options: LmBuildOptions
    prompts: tuple[Prompt, ...]
    prompt_source: str
    gates: LmGates
    # Tokens to generate from each prompt at most, and the ids that end generation
    # sooner (the tokenizer's end of sequence), on the device and in eager alike.
    max_new_tokens: int = 16
    eos_ids: tuple[int, ...] = ()
    architecture: str = ""
