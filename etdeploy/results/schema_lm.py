"""The `language_model` block of the result document (etdeploy.results.result_lm) as JSON
Schema: what `etdeploy run FOLDER --json` writes for a causal language model."""

from __future__ import annotations

from etdeploy.results.schema_parts import COUNT, MS, STR, nullable
from etdeploy.results.validator import Schema

_NUMBER = {"type": "number"}
_FRACTION = {"type": "number", "minimum": 0, "maximum": 1}
_BYTES = COUNT

_DIVERGENCE: Schema = {
    "type": "object",
    "required": ["prompt", "position", "reference_token", "device_token"],
    "properties": {
        "prompt": STR, "position": COUNT, "reference_token": COUNT, "device_token": COUNT,
        "reference_text": STR, "device_text": STR,
    },
}  # fmt: skip

_COMPARISON: Schema = {
    "type": "object",
    "required": ["reference", "positions", "top1_agreement", "kld_mean", "kld_p99",
                 "match_length_mean", "match_length_min", "generated_per_prompt"],
    "properties": {
        "reference": {"enum": ["float eager", "quantized eager"]},
        "positions": COUNT, "top1_agreement": _FRACTION,
        "kld_mean": MS, "kld_p99": MS, "kld_max": MS,
        "match_length_mean": MS, "match_length_min": COUNT, "generated_per_prompt": COUNT,
        "first_divergence": _DIVERGENCE, "first_generation_divergence": _DIVERGENCE,
    },
}  # fmt: skip

_PERPLEXITY: Schema = {
    "type": "object",
    "required": ["reference", "tokens", "device", "eager", "nll_difference", "ci_low",
                 "ci_high", "increase"],
    "properties": {
        "reference": STR, "tokens": COUNT, "device": MS, "eager": MS,
        "nll_difference": _NUMBER, "ci_low": _NUMBER, "ci_high": _NUMBER,
        "increase": _NUMBER, "increase_low": _NUMBER, "increase_high": nullable("number"),
    },
}  # fmt: skip

LANGUAGE_MODEL: Schema = {
    "type": "object",
    "required": ["architecture", "quantization", "max_seq_len", "vocab_size",
                 "kv_cache_bytes", "tokenization", "prompts", "comparisons", "perplexity",
                 "speed", "gates", "passed", "reason"],
    "properties": {
        "architecture": STR, "quantization": STR, "max_seq_len": COUNT, "vocab_size": COUNT,
        "kv_cache_bytes": _BYTES, "tokenization": STR, "prompts": COUNT, "prompt_source": STR,
        "comparisons": {"type": "array", "items": _COMPARISON},
        "perplexity": {"type": "array", "items": _PERPLEXITY},
        "speed": {
            "type": "object",
            "required": ["prompt_tokens", "new_tokens", "time_to_first_token_ms",
                         "prefill_tokens_per_s", "decode_tokens_per_s"],
            "properties": {
                "prompt_tokens": COUNT, "new_tokens": COUNT, "tokens_per_call": COUNT,
                "load_ms": MS, "time_to_first_token_ms": MS, "prefill_tokens_per_s": MS,
                "decode_tokens_per_s": nullable("number", minimum=0), "teacher_forced_ms": MS,
            },
        },
        "gates": {
            "type": "object",
            "required": ["min_token_agreement", "max_kld", "max_ppl_increase"],
            "properties": {"min_token_agreement": _FRACTION, "max_kld": MS,
                           "max_ppl_increase": MS},
        },
        "passed": {"type": "boolean"},
        "reason": STR,
        "samples": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "prompt_tokens", "device_text", "match_length"],
            "properties": {"name": STR, "prompt_tokens": COUNT, "device_text": STR,
                           "float_text": STR, "quantized_text": STR, "match_length": COUNT},
        }},
        "memory": {
            "type": "object",
            "required": ["max_seq_len", "kv_cache_bytes", "activations_bytes",
                         "planned_bytes", "weights_bytes"],
            "properties": {"max_seq_len": COUNT, "kv_cache_bytes": _BYTES,
                           "activations_bytes": _BYTES, "planned_bytes": _BYTES,
                           "weights_bytes": _BYTES, "peak_rss_bytes": _BYTES},
        },
        "group_size": COUNT,
    },
}  # fmt: skip
