"""`etdeploy run FOLDER`: a Hugging Face causal LM built, generating on the device, and
held token by token to float eager and to quantized eager.

    check (no torch) -> build (cached) -> preflight -> device: one runner call a prompt
    -> references (float eager, quantized eager) -> compare -> the RunResult

Everything that can be bad input is checked first, from config.json, the tokenizer and
the prompts: a folder that is not a causal LM, a missing tokenizer, a group size that
does not divide a layer, a prompt that does not fit the context. The result is an
ordinary RunResult with the `language_model` block (etdeploy.results.result_lm).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.devices.base import Device
from etdeploy.errors import EXIT_CHECK_FAILED, EXIT_OK, UsageError
from etdeploy.pipeline.job import RunJob, StatusCallback
from etdeploy.pipeline.llm.factory import factory_inputs
from etdeploy.pipeline.llm.folder import LmFolder, eos_ids, open_lm_folder
from etdeploy.pipeline.llm.lm_export import (
    LmBuildOptions,
    LmProgram,
    build_lm,
    check_options,
    given_program,
)
from etdeploy.pipeline.llm.lm_job import LmJob
from etdeploy.pipeline.llm.prompts import Prompt, check_context, load_tokenizer, read_prompts
from etdeploy.pipeline.llm.verify_tokens import (
    DEFAULT_MAX_KLD,
    DEFAULT_MAX_PPL_INCREASE,
    DEFAULT_MIN_TOKEN_AGREEMENT,
    PromptRun,
    compare_perplexity,
    compare_tokens,
    judge_tokens,
    matched_length,
)
from etdeploy.results.result import Memory, SizeSummary
from etdeploy.results.result_lm import (
    GenerationSpeed,
    LanguageModelResult,
    LmGates,
    PromptSample,
)
from etdeploy.runner.generation import GenerationRequest, GenerationResult
from etdeploy.runner_build import RunnerBundle
from etdeploy.scratch import scratch_dir

if TYPE_CHECKING:
    from etdeploy.pipeline.deploy import Target
    from etdeploy.pipeline.generate import DeviceGeneration
    from etdeploy.pipeline.job import RunContext
    from etdeploy.results.result import RunResult

TOKENIZATION = (
    "on the host: the folder's tokenizer turns each prompt into ids and only ids cross "
    "to the device, so device, float eager and quantized eager see the same ids"
)


def check_lm_job(job: RunJob, folder_path: Path | None = None) -> LmJob:
    """The folder (MODEL, or `folder_path`: where a factory's causal LM was saved),
    build options and prompts checked (bad input: exit 2), no torch."""
    if job.reference is not None or job.data is not None:
        raise UsageError(
            "--reference and --data are not taken with a language-model folder",
            "the folder's model is the reference: drop --reference/--data",
        )
    if job.backend != "xnnpack":
        raise UsageError(
            f"--backend {job.backend}: a language model is built for XNNPACK only",
            "drop --backend (xnnpack is the default)",
        )
    if job.pte is not None and not job.pte.is_file():
        raise UsageError(f"--pte {job.pte}: no such file", "give the .pte to run")
    folder = open_lm_folder(folder_path or str(job.model))
    options = LmBuildOptions(
        max_seq_len=job.max_seq_len,
        quantize=job.quantize,
        group_size=job.group_size,
        quantize_embeddings=job.quantize_embeddings,
    )
    check_options(folder, options)
    # A factory's prompts (its ModelSpec.samples) when --inputs names none.
    inputs = tuple(job.inputs) or (factory_inputs(folder.path) if folder_path else ())
    prompts = read_prompts(inputs, folder)
    check_context(prompts, options.max_seq_len, job.max_new_tokens)
    gates = LmGates(
        min_token_agreement=_or(job.min_token_agreement, DEFAULT_MIN_TOKEN_AGREEMENT),
        max_kld=_or(job.max_kld, DEFAULT_MAX_KLD),
        max_ppl_increase=_or(job.max_ppl_increase, DEFAULT_MAX_PPL_INCREASE),
    )
    source = ", ".join(inputs) if inputs else str(folder.prompts)
    ends = eos_ids(folder, load_tokenizer(folder))
    return LmJob(
        folder, options, prompts, source, gates, job.max_new_tokens, ends, folder.architecture
    )


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def run_lm_job(
    job: RunJob, device: Device, context: RunContext, job_id: str, *, folder: Path | None = None
) -> RunResult:  # pragma: no branch
    say: StatusCallback = context.status or (lambda _text: None)
    checked = check_lm_job(job, folder)
    assert checked.folder is not None
    if job.pte is not None:
        program = given_program(job.pte, checked.folder, checked.options)
    else:
        say(f"building {checked.folder.path.name} ({checked.options.label})")
        program = build_lm(checked.folder, checked.options, use_cache=job.use_cache)
    return generate_and_compare(
        job, device, context, job_id, checked, program, (),
        lambda: eager_references(checked), tokenizer_text(checked.folder),
    )  # fmt: skip


References = tuple[tuple[PromptRun, ...], tuple[PromptRun, ...]]


def generate_and_compare(
    job: RunJob,
    device: Device,
    context: RunContext,
    job_id: str,
    checked: LmJob,
    program: LmProgram,
    carried: Sequence[RunnerBundle],
    references: Callable[[], References],
    text: Callable[[Sequence[int]], str],
) -> RunResult:
    """The program on the device, one runner call a prompt, then held to the float and
    quantized eager references (computed by `references` after the device ran, or read
    from a job bundle) and judged: the RunResult with its language_model block."""
    from etdeploy.pipeline.deploy import target_for
    from etdeploy.pipeline.generate import check_generation
    from etdeploy.pipeline.llm.lm_result import lm_memory, lm_run_result
    from etdeploy.pipeline.memory import judge_memory, max_memory
    from etdeploy.sizecheck import summary_for_result

    say: StatusCallback = context.status or (lambda _text: None)
    started = time.time()
    target = target_for(job.runner, device, say, carried, context.device_runner)
    say(f"checking that the runner for {target.info.name} can run the program")
    # Refuses a runner without --generate too, before anything is pushed.
    report = check_generation(
        device, target.bundle, program.pte, status=say, verify=job.verify_remote,
        sha256=program.sha256,
    )  # fmt: skip
    requests = [
        GenerationRequest(
            p.token_ids, len(p.token_ids), checked.max_new_tokens, eos_ids=checked.eos_ids
        )
        for p in checked.prompts
    ]
    generated = generate_prompts(target, program.pte, requests, job, job_id, say)
    say("computing float and quantized eager")
    floats, quantized = references()
    peaks = [r.peak_rss_bytes for r in generated.results if r.peak_rss_bytes is not None]
    block = replace(
        language_model_block(checked, program, generated.results, floats, quantized, text),
        memory=lm_memory(program, max(peaks) if peaks else None),
    )
    size = SizeSummary.from_json(
        summary_for_result(program.pte, context.size_config, sha256=program.sha256)
    )
    # --max-memory and a device's max_memory judge the runner's peak, as for any run.
    memory = judge_memory(
        Memory(
            planned_bytes=block.memory.planned_bytes if block.memory else None,
            peak_rss_bytes=max(peaks) if peaks else None,
        ),
        (),
        max_memory(job.max_memory_bytes, job.max_memory_source),
    )
    return lm_run_result(
        job, job_id, started, checked, program, target, report, generated, block, size, memory
    )


def eager_references(checked: LmJob) -> References:
    """Every prompt through float eager and quantized eager (torch, transformers)."""
    from etdeploy.pipeline.llm.folder import load_causal_lm
    from etdeploy.pipeline.llm.lm_export import quantized_model
    from etdeploy.pipeline.llm.lm_references import eager_runs

    assert checked.folder is not None
    new_tokens, ends = checked.max_new_tokens, checked.eos_ids
    floats = eager_runs(load_causal_lm(checked.folder), checked.prompts, new_tokens, ends)
    quantized = floats
    if checked.options.quantize or checked.options.quantize_embeddings:
        quantized = eager_runs(
            quantized_model(checked.folder, checked.options), checked.prompts, new_tokens, ends
        )
    return floats, quantized


def tokenizer_text(folder: LmFolder) -> Callable[[Sequence[int]], str]:
    """Ids to text with the folder's tokenizer, special tokens included: a generation
    that ended shows its end token (`</s>`)."""
    tokenizer = load_tokenizer(folder)

    def text(ids: Sequence[int]) -> str:
        return str(tokenizer.decode(list(ids), skip_special_tokens=False))

    return text


def generate_prompts(
    target: Target,
    pte: Path,
    requests: Sequence[GenerationRequest],
    job: RunJob,
    job_id: str,
    say: StatusCallback,
) -> DeviceGeneration:
    """Every prompt through the runner on the device (etdeploy.pipeline.generate: the
    device held, the job's directory swept and journaled), with the deploy's figures."""
    from etdeploy.pipeline.generate import GenerationSettings, generate_on_device

    settings = GenerationSettings(
        cpu_threads=job.cpu_threads, deadline_s=job.deadline_s,
        idle_timeout_s=job.idle_timeout_s, verify_remote=job.verify_remote, keep=job.keep,
    )  # fmt: skip
    with scratch_dir("lm") as local:
        return generate_on_device(target, pte, requests, settings, job_id, Path(local), status=say)


def language_model_block(
    checked: LmJob,
    program: LmProgram,
    results: Sequence[GenerationResult],
    floats: Sequence[PromptRun],
    quantized: Sequence[PromptRun],
    text: Callable[[Sequence[int]], str],
) -> LanguageModelResult:
    """The device's runs against float eager and quantized eager, gated."""
    device = tuple(
        PromptRun(p.name, p.token_ids, r.logits, r.generated_ids)  # type: ignore[arg-type]
        for p, r in zip(checked.prompts, results, strict=True)
    )

    def token(one: int) -> str:
        return text([one])

    vs_quantized = compare_tokens("quantized eager", device, quantized, token)
    vs_float = compare_tokens("float eager", device, floats, token)
    ppl_float = compare_perplexity("float eager", device, floats)
    ppl_quantized = compare_perplexity("quantized eager", device, quantized)
    passed, reason = judge_tokens(vs_quantized, ppl_float, checked.gates)
    return LanguageModelResult(
        architecture=checked.architecture,
        quantization=checked.options.label,
        max_seq_len=checked.options.max_seq_len,
        vocab_size=program.vocab_size,
        kv_cache_bytes=program.kv_cache_bytes,
        tokenization=TOKENIZATION,
        prompts=len(checked.prompts),
        prompt_source=checked.prompt_source,
        comparisons=(vs_float, vs_quantized),
        perplexity=(ppl_float, ppl_quantized),
        speed=_speed(checked.prompts, results, checked.max_new_tokens),
        gates=checked.gates,
        passed=passed,
        reason=reason,
        samples=_samples(device, floats, quantized, text),
        group_size=checked.options.group_size if checked.options.quantize == "8da4w" else None,
    )


def _speed(
    prompts: Sequence[Prompt], results: Sequence[GenerationResult], new_tokens: int
) -> GenerationSpeed:
    timings = [r.timings for r in results]
    decode = [t.decode_tokens_per_s for t in timings if t.decode_tokens_per_s is not None]
    forced = [t.teacher_forced_ms for t in timings if t.teacher_forced_ms is not None]
    return GenerationSpeed(
        prompt_tokens=int(statistics.median(len(p.token_ids) for p in prompts)),
        new_tokens=new_tokens,
        tokens_per_call=max(r.tokens_per_call for r in results),
        load_ms=round(statistics.median(t.load_ms for t in timings), 3),
        time_to_first_token_ms=round(statistics.median(t.prefill_ms for t in timings), 3),
        prefill_tokens_per_s=round(statistics.median(t.prefill_tokens_per_s for t in timings), 2),
        decode_tokens_per_s=round(statistics.median(decode), 2) if decode else None,
        teacher_forced_ms=round(sum(forced), 3) if forced else None,
    )


def _samples(
    device: Sequence[PromptRun],
    floats: Sequence[PromptRun],
    quantized: Sequence[PromptRun],
    text: Callable[[Sequence[int]], str],
) -> tuple[PromptSample, ...]:
    return tuple(
        PromptSample(
            name=d.name,
            prompt_tokens=len(d.token_ids),
            device_text=text(d.generated),
            float_text=text(f.generated),
            quantized_text=text(q.generated),
            match_length=matched_length(d.generated, q.generated),
        )
        for d, f, q in zip(device, floats, quantized, strict=True)
    )


def lm_exit_code(block: LanguageModelResult) -> int:
    return EXIT_OK if block.passed else EXIT_CHECK_FAILED
