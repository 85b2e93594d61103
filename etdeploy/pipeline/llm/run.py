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
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.devices.base import Device
from etdeploy.devices.lock import device_lock
from etdeploy.errors import EXIT_CHECK_FAILED, EXIT_OK, UsageError
from etdeploy.pipeline.job import RunJob, StatusCallback
from etdeploy.pipeline.llm.export import (
    LmBuildOptions,
    LmProgram,
    build_lm,
    check_options,
    given_program,
)
from etdeploy.pipeline.llm.folder import LmFolder, open_lm_folder
from etdeploy.pipeline.llm.prompts import Prompt, check_context, read_prompts
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

if TYPE_CHECKING:
    from etdeploy.pipeline.deploy import Target
    from etdeploy.pipeline.run import RunContext
    from etdeploy.results.result import RunResult

TOKENIZATION = (
    "on the host: the folder's tokenizer turns each prompt into ids and only ids cross "
    "to the device, so device, float eager and quantized eager see the same ids"
)


@dataclass(frozen=True)
class LmJob:
    """What a language-model run was checked to be, before anything slow."""

    folder: LmFolder
    options: LmBuildOptions
    prompts: tuple[Prompt, ...]
    prompt_source: str
    gates: LmGates


def check_lm_job(job: RunJob) -> LmJob:
    """The folder, build options and prompts checked (bad input: exit 2), no torch."""
    if job.reference is not None or job.data is not None:
        raise UsageError(
            "--reference and --data are not taken with a language-model folder",
            "the folder's model is the reference: drop --reference/--data",
        )
    if job.pte is not None and not job.pte.is_file():
        raise UsageError(f"--pte {job.pte}: no such file", "give the .pte to run")
    folder = open_lm_folder(str(job.model))
    options = LmBuildOptions(
        max_seq_len=job.max_seq_len,
        quantize=job.quantize,
        group_size=job.group_size,
        quantize_embeddings=job.quantize_embeddings,
    )
    check_options(folder, options)
    prompts = read_prompts(job.inputs, folder)
    check_context(prompts, options.max_seq_len, job.max_new_tokens)
    gates = LmGates(
        min_token_agreement=_or(job.min_token_agreement, DEFAULT_MIN_TOKEN_AGREEMENT),
        max_kld=_or(job.max_kld, DEFAULT_MAX_KLD),
        max_ppl_increase=_or(job.max_ppl_increase, DEFAULT_MAX_PPL_INCREASE),
    )
    source = ", ".join(job.inputs) if job.inputs else str(folder.prompts)
    return LmJob(folder, options, prompts, source, gates)


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def run_lm_job(
    job: RunJob, device: Device, context: RunContext, job_id: str
) -> RunResult:  # pragma: no branch
    from etdeploy.pipeline.deploy import target_for
    from etdeploy.pipeline.generate import check_generation

    say: StatusCallback = context.status or (lambda _text: None)
    started = time.time()
    checked = check_lm_job(job)
    if job.pte is not None:
        program = given_program(job.pte, checked.folder, checked.options)
    else:
        say(f"building {checked.folder.path.name} ({checked.options.label})")
        program = build_lm(checked.folder, checked.options, use_cache=job.use_cache)
    target = target_for(job.runner, device, say, (), context.device_runner)
    say(f"checking that the runner for {target.info.name} can run the program")
    # Refuses a runner without --generate too, before anything is pushed.
    report = check_generation(
        device, target.bundle, program.pte, status=say, verify=job.verify_remote,
        sha256=program.sha256,
    )  # fmt: skip
    requests = [
        GenerationRequest(p.token_ids, len(p.token_ids), job.max_new_tokens)
        for p in checked.prompts
    ]
    generated = generate_prompts(target, program.pte, requests, job, job_id, say)
    say("computing float and quantized eager")
    from etdeploy.pipeline.llm.result import lm_memory, lm_run_result
    from etdeploy.sizecheck import summary_for_result

    peaks = [r.peak_rss_bytes for r in generated.results if r.peak_rss_bytes is not None]
    block = replace(
        language_model_block(checked, program, generated.results),
        memory=lm_memory(program, max(peaks) if peaks else None),
    )
    size = SizeSummary.from_json(
        summary_for_result(program.pte, context.size_config, sha256=program.sha256)
    )
    from etdeploy.pipeline.memory import with_memory

    result = lm_run_result(
        job, job_id, started, checked, program, target, report, generated, block, size
    )
    # --max-memory and a device's max_memory judge the runner's peak, as for any run.
    return with_memory(result, result.memory or Memory(), (), job)


@dataclass(frozen=True)
class DeviceGeneration:
    """Every prompt's generation on the device and what deploying it cost."""

    results: tuple[GenerationResult, ...]
    bytes_sent: int
    files_sent: int
    files_skipped: int
    deploy_seconds: float


def generate_prompts(
    target: Target,
    pte: Path,
    requests: Sequence[GenerationRequest],
    job: RunJob,
    job_id: str,
    say: StatusCallback,
) -> DeviceGeneration:
    """etdeploy.pipeline.generate's deploy and one runner call a prompt, while holding
    the device (its job directory swept and journaled as generate_on_device does; taken
    apart here only to keep the deploy's figures for the result)."""
    from etdeploy.devices.workdir import JobDirs
    from etdeploy.pipeline.generate import GenerationSettings, deploy_generator, generate

    settings = GenerationSettings(
        cpu_threads=job.cpu_threads, deadline_s=job.deadline_s,
        idle_timeout_s=job.idle_timeout_s, verify_remote=job.verify_remote, keep=job.keep,
    )  # fmt: skip
    # A push reports progress only for the files it sends; the others were on the device.
    sent: set[str] = set()
    device = target.device
    say(f"waiting for {target.info.name}")
    with device_lock(device), tempfile.TemporaryDirectory(prefix="etdeploy-lm-") as local:
        jobs = JobDirs(device)
        jobs.sweep(but=job_id)
        jobs.begin(job_id)
        try:
            say(f"deploying to {target.info.name}")
            deployed = deploy_generator(
                target, pte, requests, job_id, verify=job.verify_remote,
                progress=lambda path, _done, _total: sent.add(path),
            )  # fmt: skip
            say(f"generating on {target.info.name}")
            generated = generate(target, deployed, requests, settings, Path(local))
        finally:
            jobs.end(job_id, keep=job.keep)
    pushed = len(target.bundle.files) + 1 + len(set(deployed.token_ids))
    return DeviceGeneration(
        tuple(g.result for g in generated), deployed.bytes_sent, len(sent),
        pushed - len(sent), deployed.seconds,
    )  # fmt: skip


def language_model_block(
    checked: LmJob, program: LmProgram, results: Sequence[GenerationResult]
) -> LanguageModelResult:
    """The device's runs against float eager and quantized eager, gated."""
    from etdeploy.pipeline.llm.export import quantized_model
    from etdeploy.pipeline.llm.folder import load_causal_lm
    from etdeploy.pipeline.llm.prompts import load_tokenizer
    from etdeploy.pipeline.llm.references import eager_runs

    new_tokens = len(results[0].generated_ids)
    device = tuple(
        PromptRun(p.name, p.token_ids, r.logits, r.generated_ids)  # type: ignore[arg-type]
        for p, r in zip(checked.prompts, results, strict=True)
    )
    floats = eager_runs(load_causal_lm(checked.folder), checked.prompts, new_tokens)
    quantized = floats
    if checked.options.quantize or checked.options.quantize_embeddings:
        quantized = eager_runs(
            quantized_model(checked.folder, checked.options), checked.prompts, new_tokens
        )
    tokenizer = load_tokenizer(checked.folder)

    def text(ids: Sequence[int]) -> str:
        return str(tokenizer.decode(list(ids)))

    def token(one: int) -> str:
        return text([one])

    vs_quantized = compare_tokens("quantized eager", device, quantized, token)
    vs_float = compare_tokens("float eager", device, floats, token)
    ppl_float = compare_perplexity("float eager", device, floats)
    ppl_quantized = compare_perplexity("quantized eager", device, quantized)
    passed, reason = judge_tokens(vs_quantized, ppl_float, checked.gates)
    return LanguageModelResult(
        architecture=checked.folder.architecture,
        quantization=checked.options.label,
        max_seq_len=checked.options.max_seq_len,
        vocab_size=program.vocab_size,
        kv_cache_bytes=program.kv_cache_bytes,
        tokenization=TOKENIZATION,
        prompts=len(checked.prompts),
        prompt_source=checked.prompt_source,
        comparisons=(vs_float, vs_quantized),
        perplexity=(ppl_float, ppl_quantized),
        speed=_speed(checked.prompts, results),
        gates=checked.gates,
        passed=passed,
        reason=reason,
        samples=_samples(device, floats, quantized, text),
        group_size=checked.options.group_size if checked.options.quantize == "8da4w" else None,
    )


def _speed(prompts: Sequence[Prompt], results: Sequence[GenerationResult]) -> GenerationSpeed:
    timings = [r.timings for r in results]
    decode = [t.decode_tokens_per_s for t in timings if t.decode_tokens_per_s is not None]
    forced = [t.teacher_forced_ms for t in timings if t.teacher_forced_ms is not None]
    return GenerationSpeed(
        prompt_tokens=int(statistics.median(len(p.token_ids) for p in prompts)),
        new_tokens=len(results[0].generated_ids),
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
