"""`etdeploy run FOLDER`: a Hugging Face causal LM built, generating on the device, and
held token by token to float eager and to quantized eager.

    check (no torch) -> build (cached) -> preflight -> device: one runner call a prompt
    -> references (float eager, quantized eager) -> compare -> the RunResult

Everything that can be bad input is checked first, from config.json, the tokenizer and
the prompts: a folder that is not a causal LM, a missing tokenizer, a group size that
does not divide a layer, a prompt that does not fit the context. The result is an
ordinary RunResult, its blocks (job, device, artifact, runner, preflight, deploy,
latency, memory, verdict) filled from what the LM stages returned, beside the
`language_model` block that carries the token-level comparison
(etdeploy.results.result_lm).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import etdeploy
from etdeploy.devices.base import Device
from etdeploy.errors import EXIT_CHECK_FAILED, EXIT_OK, UsageError
from etdeploy.memory.limit import JudgedMemory, judge_memory
from etdeploy.pipeline.deploy import Target, target_for
from etdeploy.pipeline.execute import latency_of
from etdeploy.pipeline.generate import DeviceGeneration, check_generation, generate_on_device
from etdeploy.pipeline.job import StatusCallback
from etdeploy.pipeline.llm.folder import open_lm_folder
from etdeploy.pipeline.llm.lm_export import LmProgram, built_with, check_options, lm_program
from etdeploy.pipeline.llm.lm_job import LmJob
from etdeploy.pipeline.llm.lm_references import eager_references
from etdeploy.pipeline.llm.prompts import (
    Prompt,
    check_context,
    eos_ids,
    load_tokenizer,
    read_prompts,
    tokenizer_text,
)
from etdeploy.pipeline.llm.verify_tokens import (
    PromptRun,
    compare_perplexity,
    compare_tokens,
    judge_tokens,
    matched_length,
)
from etdeploy.preflight import PreflightReport
from etdeploy.results.result import (
    Artifact,
    DeployStats,
    InputsInfo,
    JobInfo,
    Memory,
    Preflight,
    RunResult,
    SizeSummary,
)
from etdeploy.results.result_lm import GenerationSpeed, LanguageModelResult, LmMemory, PromptSample
from etdeploy.results.result_verdict import Verdict
from etdeploy.runner.generation import GenerationRequest, GenerationResult
from etdeploy.runner_build import RunnerBundle
from etdeploy.scratch import scratch_dir

if TYPE_CHECKING:
    from etdeploy.pipeline.job import RunContext
    from etdeploy.pipeline.plan import LmRequest

TOKENIZATION = (
    "on the host: the folder's tokenizer turns each prompt into ids and only ids cross "
    "to the device, so device, float eager and quantized eager see the same ids"
)


def check_lm_job(request: LmRequest, folder_path: Path | None = None) -> LmJob:
    """The folder (MODEL, or `folder_path`: where a factory's causal LM was saved),
    build options and prompts checked (bad input: exit 2), no torch."""
    if request.reference is not None or request.data is not None:
        raise UsageError(
            "--reference and --data are not taken with a language-model folder",
            "the folder's model is the reference: drop --reference/--data",
        )
    if request.backend != "xnnpack":
        raise UsageError(
            f"--backend {request.backend}: a language model is built for XNNPACK only",
            "drop --backend (xnnpack is the default)",
        )
    if request.pte is not None and not request.pte.is_file():
        raise UsageError(f"--pte {request.pte}: no such file", "give the .pte to run")
    folder = open_lm_folder(folder_path or str(request.model))
    check_options(folder, request.options)
    # A factory's prompts (its ModelSpec.samples) when --inputs names none.
    inputs = request.inputs or (folder.factory_inputs if folder_path else ())
    tokenizer = load_tokenizer(folder)
    prompts = read_prompts(inputs, folder, tokenizer)
    check_context(prompts, request.options.max_seq_len, request.max_new_tokens)
    source = ", ".join(inputs) if inputs else str(folder.prompts)
    return LmJob(
        folder, request.options, prompts, source, request.gates, request.max_new_tokens,
        eos_ids(folder, tokenizer), folder.architecture,
    )  # fmt: skip


def run_lm_job(
    request: LmRequest, device: Device, context: RunContext, job_id: str, folder: Path | None
) -> RunResult:
    """A language-model folder's road (`folder`: where a factory's causal LM was
    saved; None: MODEL is the folder): checked, built (or --pte), generated on the
    device and judged."""
    say: StatusCallback = context.status or (lambda _text: None)
    checked = check_lm_job(request, folder)
    assert checked.folder is not None
    if request.pte is None:
        say(f"building {checked.folder.path.name} ({checked.options.label})")
    program = lm_program(checked.folder, checked.options, request.pte, request.use_cache)
    return generate_and_compare(
        request, device, context, job_id, checked, program, (),
        lambda: eager_references(checked), tokenizer_text(checked.folder),
    )  # fmt: skip


def generate_and_compare(
    request: LmRequest,
    device: Device,
    context: RunContext,
    job_id: str,
    checked: LmJob,
    program: LmProgram,
    carried: Sequence[RunnerBundle],
    references: Callable[[], tuple[tuple[PromptRun, ...], tuple[PromptRun, ...]]],
    text: Callable[[Sequence[int]], str],
) -> RunResult:
    """The program on the device, one runner call a prompt, then held to the float and
    quantized eager references (computed by `references` after the device ran, or read
    from a job bundle) and judged: the RunResult with its language_model block."""
    from etdeploy.sizecheck import summary_for_result

    say: StatusCallback = context.status or (lambda _text: None)
    started = time.time()
    settings = request.generation
    target = target_for(request.runner, device, say, carried, context.device_runner)
    say(f"checking that the runner for {target.info.name} can run the program")
    # Refuses a runner without --generate too, before anything is pushed.
    report = check_generation(
        device, target.bundle, program.pte, status=say, verify=settings.verify_remote,
        sha256=program.sha256,
    )  # fmt: skip
    requests = [
        GenerationRequest(
            p.token_ids, len(p.token_ids), checked.max_new_tokens, eos_ids=checked.eos_ids
        )
        for p in checked.prompts
    ]
    # Every prompt through the runner on the device (the device held, the job's
    # directory swept and journaled), with the deploy's figures.
    with scratch_dir("lm") as local:
        generated = generate_on_device(
            target, program.pte, requests, settings, job_id, Path(local), status=say
        )
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
        request.memory_limit,
    )
    return lm_run_result(
        request.model, job_id, started, checked, program, target, report, generated, block,
        size, memory,
    )  # fmt: skip


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


def lm_run_result(
    model: str | None,
    job_id: str,
    started: float,
    checked: LmJob,
    program: LmProgram,
    target: Target,
    report: PreflightReport,
    generated: DeviceGeneration,
    block: LanguageModelResult,
    size: SizeSummary | None,
    memory: JudgedMemory,
) -> RunResult:
    """The run's one verdict: the token-level gates, the store size and the memory
    (its limit judged on the runner's peak) together, as a program's run decides it."""
    results = generated.results
    decode_ms = [ms for r in results for ms in r.timings.decode_ms]
    comparison = block.comparison("quantized eager")
    passed = block.passed and (size is None or size.passed) and memory.passed
    return RunResult(
        etdeploy=etdeploy.__version__,
        status="passed" if passed else "failed",
        exit_code=EXIT_OK if passed else EXIT_CHECK_FAILED,
        job=JobInfo(
            id=job_id,
            model=model,
            backend="xnnpack",
            quantization=block.quantization,
            method="forward",
            iterations=len(results),
            warmup=0,
        ),
        device=target.device_summary(),
        artifact=Artifact(
            pte=str(program.pte),
            sha256=program.sha256,
            size_bytes=program.size_bytes,
            backend="xnnpack",
            quantization=block.quantization,
            built_with=dict(program.built_with) if program.built_with else built_with(),
        ),
        runner=target.runner_info(results[0].runner_version if results else None),
        inputs=InputsInfo(
            names=("input_ids", "cache_position"),
            samples=tuple(p.name for p in checked.prompts),
            reference="eager",
        ),
        preflight=Preflight.from_json(report.to_json()),
        deploy=DeployStats(
            bytes_sent=generated.deployed.bytes_sent,
            files_sent=generated.deployed.files_sent,
            files_skipped=generated.deployed.files_skipped,
            seconds=round(generated.deployed.seconds, 3),
        ),
        # One decode call a token: the latency of a step of generation.
        latency_ms=latency_of(block.speed.load_ms, decode_ms),
        memory=memory.memory,
        size=size,
        verdict=Verdict(
            passed=block.passed,
            reason=block.reason,
            top1_agreement=comparison.top1_agreement if comparison else None,
            reference="quantized eager",
        ),
        language_model=block,
        warnings=memory.warnings,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        seconds=round(time.time() - started, 3),
    )


def lm_memory(program: LmProgram, peak_rss_bytes: int | None) -> LmMemory:
    """The memory account of an LM program, read from the .pte (no torch): the KV cache
    is the export's mutable key/value buffers, planned with the arena."""
    # Lazily: the reader's flatbuffer code is not every run's start-up (program.py).
    from etdeploy.pte import read_pte

    layout = read_pte(program.pte)
    planned = layout.method("forward").planned_arena_bytes
    return LmMemory(
        max_seq_len=program.options.max_seq_len,
        kv_cache_bytes=program.kv_cache_bytes,
        activations_bytes=max(planned - program.kv_cache_bytes, 0),
        planned_bytes=planned,
        weights_bytes=sum(segment.size for segment in layout.segments),
        peak_rss_bytes=peak_rss_bytes,
    )
