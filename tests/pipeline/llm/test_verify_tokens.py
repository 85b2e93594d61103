"""The token-level comparison on the tiny Llama's own eager outputs: a program against
itself agrees everywhere with no divergence, perplexity is what transformers' own loss
says, and a departure is named at the position it starts."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from etdeploy.pipeline.llm.folder import open_lm_folder
from etdeploy.pipeline.llm.lm_export import load_causal_lm
from etdeploy.pipeline.llm.lm_references import eager_runs
from etdeploy.pipeline.llm.prompts import read_prompts
from etdeploy.pipeline.llm.verify_tokens import compare_perplexity, compare_tokens
from tests.support.tiny_lm import TinyLm


def test_eager_against_itself_agrees_everywhere_and_perplexity_is_transformers_loss(
    tiny_lm: TinyLm,
) -> None:
    import torch

    folder = open_lm_folder(tiny_lm.folder)
    prompts = read_prompts((), folder)[:3]
    model = load_causal_lm(folder)
    runs = eager_runs(model, prompts, 4)
    same = compare_tokens("float eager", runs, runs)
    assert same.top1_agreement == 1.0 and same.kld_max == 0.0
    assert same.first_divergence is None and same.match_length_min == 4
    ppl = compare_perplexity("float eager", runs, runs)
    assert ppl.increase == 0.0 and ppl.ci_low == ppl.ci_high == 0.0
    with torch.no_grad():
        losses = [
            (
                len(p.token_ids) - 1,
                float(model(torch.tensor([p.token_ids]), labels=torch.tensor([p.token_ids])).loss),
            )
            for p in prompts
        ]
    mean_loss = sum(n * loss for n, loss in losses) / sum(n for n, _ in losses)
    assert math.isclose(ppl.eager, math.exp(mean_loss), rel_tol=1e-4)


def test_a_departure_is_named_where_it_starts_and_costs_perplexity(tiny_lm: TinyLm) -> None:
    folder = open_lm_folder(tiny_lm.folder)
    prompts = read_prompts((), folder)[:2]
    runs = eager_runs(load_causal_lm(folder), prompts, 4)
    # The second prompt's logits from position 5 on: the first prompt's rows, shifted.
    first, second = runs
    rows = second.logits.copy()
    rows[5:] = np.roll(rows[5:], 7, axis=-1)
    departed = (first, replace(second, logits=rows))
    compared = compare_tokens("float eager", departed, runs)
    assert compared.first_divergence is not None
    assert (compared.first_divergence.prompt, compared.first_divergence.position) == (
        second.name,
        5,
    )
    assert compared.top1_agreement < 1.0 and compared.kld_mean > 0.1
    assert compare_perplexity("float eager", departed, runs).increase_low > 0
