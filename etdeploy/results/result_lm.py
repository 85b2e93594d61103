"""The language-model block of a result (`language_model`): the device's tokens against
float eager and quantized eager on the same prompts (teacher-forced agreement and KL
divergence, free-running match length), perplexity on held-out text with its paired
difference, the figures users quote for speed, and the gates applied."""

from __future__ import annotations

from dataclasses import dataclass

from etdeploy.results.record import Record, omitted_if_none


@dataclass(frozen=True)
class Divergence(Record):
    """Where the device's next token first differs from the reference's."""

    prompt: str
    position: int  # 0-based index into the prompt's ids; its row predicts the next token
    reference_token: int
    device_token: int
    reference_text: str = ""
    device_text: str = ""


@dataclass(frozen=True)
class TokenComparison(Record):
    """The device against one reference (float eager or quantized eager)."""

    reference: str  # "float eager" | "quantized eager"
    positions: int  # teacher-forced positions compared
    top1_agreement: float
    kld_mean: float  # KL(reference || device), nats, per position
    kld_p99: float
    kld_max: float
    # Free-running: greedy tokens generated from each prompt that equal the reference's.
    match_length_mean: float
    match_length_min: int
    generated_per_prompt: int
    first_divergence: Divergence | None = omitted_if_none()
    first_generation_divergence: Divergence | None = omitted_if_none()


@dataclass(frozen=True)
class Perplexity(Record):
    """Perplexity of the device and of a reference on the same held-out tokens, and the
    device's paired per-token difference (its negative log-likelihood minus the
    reference's) with a 95% interval, also as a relative perplexity increase."""

    reference: str
    tokens: int
    device: float
    eager: float
    nll_difference: float
    ci_low: float
    ci_high: float
    increase: float  # device / reference - 1
    increase_low: float
    increase_high: float


@dataclass(frozen=True)
class GenerationSpeed(Record):
    """What users quote, at the stated lengths: medians over the prompts."""

    prompt_tokens: int  # the median prompt length
    new_tokens: int
    tokens_per_call: int
    load_ms: float
    time_to_first_token_ms: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float | None
    # The whole device call (generation plus the teacher-forced pass), summed over prompts.
    teacher_forced_ms: float | None = omitted_if_none()


@dataclass(frozen=True)
class PromptSample(Record):
    """One prompt: its greedy continuation on the device and in eager PyTorch."""

    name: str
    prompt_tokens: int
    device_text: str
    float_text: str
    quantized_text: str
    match_length: int  # against the quantized eager program


@dataclass(frozen=True)
class LmMemory(Record):
    """The program's memory at its context length, the KV cache its own part: the
    cache's keys and values (mutable buffers planned with the arena), the rest of the
    planned arena (activations), the weights the program carries, and what the runner
    measured."""

    max_seq_len: int
    kv_cache_bytes: int
    activations_bytes: int  # the planned arena without the KV cache
    planned_bytes: int
    weights_bytes: int  # the program's constant and delegate data
    peak_rss_bytes: int | None = omitted_if_none()


@dataclass(frozen=True)
class LmGates(Record):
    min_token_agreement: float  # device vs quantized eager, teacher-forced top-1
    max_kld: float  # device vs quantized eager, mean KL divergence
    max_ppl_increase: float  # device vs float eager, relative


@dataclass(frozen=True)
class LanguageModelResult(Record):
    architecture: str
    quantization: str  # float32, 8da4w g32 (+emb8)
    max_seq_len: int
    vocab_size: int
    kv_cache_bytes: int
    tokenization: str  # where it happens
    prompts: int
    prompt_source: str
    comparisons: tuple[TokenComparison, ...]
    perplexity: tuple[Perplexity, ...]
    speed: GenerationSpeed
    gates: LmGates
    passed: bool
    reason: str
    samples: tuple[PromptSample, ...] = ()
    memory: LmMemory | None = omitted_if_none()
    group_size: int | None = omitted_if_none()

    def comparison(self, reference: str) -> TokenComparison | None:
        return next((c for c in self.comparisons if c.reference == reference), None)
