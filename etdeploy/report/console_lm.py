"""A language-model run on the console: the device against float and quantized eager
(teacher-forced agreement, KL divergence, free-running match length, where they first
part), perplexity with its paired interval, speed as users quote it, and the memory
account with the KV cache. Plain lines: a CI log keeps them whole."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from etdeploy.results.result_lm import LanguageModelResult
from etdeploy.units import format_bytes


def language_model_lines(block: LanguageModelResult) -> list[str]:
    lines = [
        f"{block.architecture} ({block.quantization}), context {block.max_seq_len}, "
        f"vocabulary {block.vocab_size}; {block.prompts} prompt(s) from {block.prompt_source}",
        f"tokenization: {block.tokenization}",
    ]
    for c in block.comparisons:
        line = (
            f"device vs {c.reference}: next-token agreement {c.top1_agreement:.3f} over "
            f"{c.positions} positions, KLD mean {c.kld_mean:.2g} p99 {c.kld_p99:.2g}; greedy "
            f"matches for {c.match_length_mean:.1f} of {c.generated_per_prompt} tokens "
            f"(shortest {c.match_length_min})"
        )
        if c.first_divergence is not None:
            d = c.first_divergence
            line += (
                f"; first differs at {d.prompt} position {d.position}: "
                f"{d.device_text!r} vs {d.reference_text!r}"
            )
        lines.append(line)
    for p in block.perplexity:
        lines.append(
            f"perplexity vs {p.reference} over {p.tokens} held-out tokens: device {p.device:.3f}, "
            f"eager {p.eager:.3f}, {p.increase:+.1%} (95% interval {p.increase_low:+.1%} to "
            f"{p.increase_high:+.1%})"
        )
    s = block.speed
    decode = "-" if s.decode_tokens_per_s is None else f"{s.decode_tokens_per_s:,.1f}"
    lines.append(
        f"speed (median of prompts, {s.prompt_tokens}-token prompt, {s.new_tokens} new tokens, "
        f"{s.tokens_per_call} token(s) a call): time to first token {s.time_to_first_token_ms:.1f} ms, "
        f"prefill {s.prefill_tokens_per_s:,.1f} tokens/s, decode {decode} tokens/s"
    )
    m = block.memory
    if m is not None:
        peak = (
            ""
            if m.peak_rss_bytes is None
            else f"; runner peak RSS {format_bytes(m.peak_rss_bytes)}"
        )
        lines.append(
            f"memory at context {m.max_seq_len}: KV cache {format_bytes(m.kv_cache_bytes)}, "
            f"activations {format_bytes(m.activations_bytes)} (planned "
            f"{format_bytes(m.planned_bytes)}), weights {format_bytes(m.weights_bytes)}{peak}"
        )
    for sample in block.samples[:3]:
        lines.append(f"  {sample.name}: device {sample.device_text!r}")
        if sample.quantized_text != sample.device_text:
            lines.append(f"  {' ' * len(sample.name)}  eager  {sample.quantized_text!r}")
    return lines


def render_language_model(out: Console, block: LanguageModelResult) -> None:
    for line in language_model_lines(block):
        out.print(escape(line), highlight=False, soft_wrap=True)
