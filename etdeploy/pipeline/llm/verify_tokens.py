"""The device's tokens against eager PyTorch: teacher-forced, free-running, perplexity.

Teacher-forced: every prompt's ids are fed to both, and at every position the two
next-token distributions are compared: whether their top tokens agree, and the KL
divergence KL(reference || device) in nats, as llama.cpp's `perplexity
--kl-divergence` reports it for a quantized model against its base (llama.cpp
tools/perplexity README, read 2026-12-05). The first position where the top tokens
differ is named. Free-running: how many greedy tokens from each prompt equal the
reference's. Perplexity: on the prompts' own ids (held-out text), per token, so the
device's and the reference's negative log-likelihoods pair token by token; the mean
difference has a normal 95% interval over tokens (tokens of one text are not
independent: the interval is a guide, as the figures' docs say).

Pure numpy: the arrays come from the runner's files and the eager references.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from etdeploy.results.result_lm import Divergence, LmGates, Perplexity, TokenComparison

# The gates' defaults, declared beside their settings (etdeploy.settings, where the
# reason for each value is written).
from etdeploy.settings import DEFAULT_MAX_KLD as DEFAULT_MAX_KLD
from etdeploy.settings import DEFAULT_MAX_PPL_INCREASE as DEFAULT_MAX_PPL_INCREASE
from etdeploy.settings import DEFAULT_MIN_TOKEN_AGREEMENT as DEFAULT_MIN_TOKEN_AGREEMENT

_Z95 = 1.959963984540054


@dataclass(frozen=True)
class PromptRun:
    """One prompt on one side: its ids, every position's logits (T x V) and the
    greedy continuation."""

    name: str
    token_ids: tuple[int, ...]
    logits: np.ndarray
    generated: tuple[int, ...]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    out: np.ndarray = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return out


def kl_divergence(reference: np.ndarray, device: np.ndarray) -> np.ndarray:
    """KL(reference || device) per row, in nats, from logits."""
    ref, dev = log_softmax(reference), log_softmax(device)
    out: np.ndarray = np.maximum((np.exp(ref) * (ref - dev)).sum(axis=-1), 0.0)
    return out


def matched_length(device: Sequence[int], reference: Sequence[int]) -> int:
    for i, (a, b) in enumerate(zip(device, reference, strict=False)):
        if a != b:
            return i
    return min(len(device), len(reference))


def compare_tokens(
    reference_name: str,
    device: Sequence[PromptRun],
    reference: Sequence[PromptRun],
    decode: Callable[[int], str] = str,
) -> TokenComparison:
    """The device against one reference over every prompt (the same prompts, in order)."""
    agree, klds, matches = [], [], []
    first: Divergence | None = None
    first_free: Divergence | None = None
    for dev, ref in zip(device, reference, strict=True):
        dev_top, ref_top = dev.logits.argmax(axis=-1), ref.logits.argmax(axis=-1)
        same = dev_top == ref_top
        agree.append(same)
        klds.append(kl_divergence(ref.logits, dev.logits))
        if first is None and not same.all():
            at = int(np.argmin(same))
            first = Divergence(
                dev.name, at, int(ref_top[at]), int(dev_top[at]),
                decode(int(ref_top[at])), decode(int(dev_top[at])),
            )  # fmt: skip
        matched = matched_length(dev.generated, ref.generated)
        matches.append(matched)
        # Both stop at an end id or at N: where they part, each has a token (a prefix
        # of the other could only come from a runner that ignored the end ids).
        if first_free is None and matched < min(len(ref.generated), len(dev.generated)):
            at, r, d = matched, ref.generated[matched], dev.generated[matched]
            first_free = Divergence(dev.name, len(dev.token_ids) + at, r, d, decode(r), decode(d))
    all_agree, all_kld = np.concatenate(agree), np.concatenate(klds)
    return TokenComparison(
        reference=reference_name,
        positions=int(all_agree.size),
        top1_agreement=float(all_agree.mean()),
        kld_mean=float(all_kld.mean()),
        kld_p99=float(np.percentile(all_kld, 99)),
        kld_max=float(all_kld.max()),
        match_length_mean=float(np.mean(matches)),
        match_length_min=int(min(matches)),
        # The most any prompt generated (an end id stops one sooner).
        generated_per_prompt=max((len(d.generated) for d in device), default=0),
        first_divergence=first,
        first_generation_divergence=first_free,
    )


def token_nll(run: PromptRun) -> np.ndarray:
    """Negative log-likelihood of each prompt token after the first, given those before."""
    ids = np.asarray(run.token_ids[1:], dtype=np.int64)
    logp = log_softmax(run.logits[: len(ids)])
    return -logp[np.arange(len(ids)), ids]


def _exp(value: float) -> float:
    """exp, infinite past float range: a broken program's perplexity can overflow."""
    return math.exp(value) if value < 700 else math.inf


def _expm1(value: float) -> float:
    return math.expm1(value) if value < 700 else math.inf


def compare_perplexity(
    reference_name: str, device: Sequence[PromptRun], reference: Sequence[PromptRun]
) -> Perplexity:
    dev = np.concatenate([token_nll(r) for r in device])
    ref = np.concatenate([token_nll(r) for r in reference])
    diff = dev - ref
    mean = float(diff.mean())
    half = _Z95 * float(diff.std(ddof=1)) / math.sqrt(diff.size) if diff.size > 1 else math.inf
    return Perplexity(
        reference=reference_name,
        tokens=int(diff.size),
        device=_exp(float(dev.mean())),
        eager=_exp(float(ref.mean())),
        nll_difference=mean,
        ci_low=mean - half,
        ci_high=mean + half,
        increase=_expm1(mean),
        increase_low=_expm1(mean - half),
        increase_high=_expm1(mean + half) if math.isfinite(half) else math.inf,
    )


def judge_tokens(
    against_quantized: TokenComparison, perplexity_vs_float: Perplexity, gates: LmGates
) -> tuple[bool, str]:
    """The gates: the device held to the quantized eager program token by token, and
    its perplexity to float eager's. The reason names the first diverging position."""
    where = ""
    if against_quantized.first_divergence is not None:
        d = against_quantized.first_divergence
        where = (
            f"; first departs at {d.prompt} position {d.position}: "
            f"{d.device_text!r} where eager says {d.reference_text!r}"
        )
    failures = []
    if against_quantized.top1_agreement < gates.min_token_agreement:
        failures.append(
            f"next-token agreement with the quantized eager program "
            f"{against_quantized.top1_agreement:.3f} < {gates.min_token_agreement:g}"
        )
    if against_quantized.kld_mean > gates.max_kld:
        failures.append(f"mean KL divergence {against_quantized.kld_mean:.3g} > {gates.max_kld:g}")
    if perplexity_vs_float.increase > gates.max_ppl_increase:
        failures.append(
            f"perplexity {perplexity_vs_float.device:.3f} is "
            f"{perplexity_vs_float.increase:+.1%} over float eager's "
            f"{perplexity_vs_float.eager:.3f} (limit {gates.max_ppl_increase:+.0%})"
        )
    if failures:
        return False, "; ".join(failures) + where
    return True, (
        f"next-token agreement {against_quantized.top1_agreement:.3f}, mean KLD "
        f"{against_quantized.kld_mean:.2g} vs the quantized eager program; perplexity "
        f"{perplexity_vs_float.increase:+.1%} vs float eager"
    )
