"""The eager references of a language-model run: float eager and quantized eager.

Both see the same ids the device sees. Every position's logits come from one forward
pass over the whole prompt; greedy generation then feeds one token a step through
transformers' ordinary dynamic cache (not the static cache the program was exported
with, so the reference does not share the logic it checks). Generation stops after
an end-of-sequence id (the folder's: etdeploy.pipeline.llm.prompts.eos_ids) or at N
tokens, as the runner's does.
The quantized eager model is the torchao-quantized module the program was exported
from (etdeploy.pipeline.llm.lm_export.quantized_model): with 8da4w its activations are quantized
per token at run time, as XNNPACK's dynamically quantized linears do, so it computes
what the backend computes and the device can be held to it token for token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from etdeploy.pipeline.llm.lm_export import load_causal_lm, quantized_model
from etdeploy.pipeline.llm.lm_job import LmJob
from etdeploy.pipeline.llm.prompts import Prompt
from etdeploy.pipeline.llm.verify_tokens import PromptRun


def eager_runs(
    model: Any, prompts: Sequence[Prompt], new_tokens: int, eos_ids: Sequence[int] = ()
) -> tuple[PromptRun, ...]:
    """Every prompt through `model`: its positions' logits and its greedy continuation
    (up to `new_tokens`, the last one an end id when it stopped at one)."""
    import torch

    runs = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt.token_ids], dtype=torch.long)
            out = model(input_ids=ids, use_cache=True)
            logits = out.logits[0].float()
            generated = [int(logits[-1].argmax())]
            while len(generated) < new_tokens and generated[-1] not in eos_ids:
                step = torch.tensor([[generated[-1]]], dtype=torch.long)
                out = model(input_ids=step, cache=out.cache, use_cache=True)
                generated.append(int(out.logits[0, -1].argmax()))
            runs.append(PromptRun(prompt.name, prompt.token_ids, logits.numpy(), tuple(generated)))
    return tuple(runs)


def eager_references(checked: LmJob) -> tuple[tuple[PromptRun, ...], tuple[PromptRun, ...]]:
    """Every prompt through float eager and quantized eager (torch, transformers), one
    model loaded at a time."""
    assert checked.folder is not None
    new_tokens, ends = checked.max_new_tokens, checked.eos_ids
    floats = eager_runs(load_causal_lm(checked.folder), checked.prompts, new_tokens, ends)
    quantized = floats
    if checked.options.quantize or checked.options.quantize_embeddings:
        quantized = eager_runs(
            quantized_model(checked.folder, checked.options), checked.prompts, new_tokens, ends
        )
    return floats, quantized
