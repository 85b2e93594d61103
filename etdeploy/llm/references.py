"""The eager references of a language-model run: float eager and quantized eager.

Both see the same ids the device sees. Every position's logits come from one forward
pass over the whole prompt (no cache: the reference does not share the program's cache
logic it is checking); greedy generation recomputes the whole sequence at each step.
The quantized eager model is the torchao-quantized module the program was exported
from (etdeploy.llm.export.quantized_model): with 8da4w its activations are quantized
per token at run time, as XNNPACK's dynamically quantized linears do, so it computes
what the backend computes and the device can be held to it token for token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from etdeploy.llm.prompts import Prompt
from etdeploy.llm.verify_tokens import PromptRun


def eager_runs(model: Any, prompts: Sequence[Prompt], new_tokens: int) -> tuple[PromptRun, ...]:
    """Every prompt through `model`: its positions' logits and its greedy continuation."""
    import torch

    runs = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt.token_ids], dtype=torch.long)
            logits = model(input_ids=ids).logits[0].float()
            generated = [int(logits[-1].argmax())]
            sequence = ids
            for _ in range(new_tokens - 1):
                sequence = torch.cat([sequence, torch.tensor([[generated[-1]]])], dim=1)
                generated.append(int(model(input_ids=sequence).logits[0, -1].argmax()))
            runs.append(PromptRun(prompt.name, prompt.token_ids, logits.numpy(), tuple(generated)))
    return tuple(runs)
