"""plan: a RunJob read once into the narrow records its stages take.

A stage takes what it needs, not the whole job: build a BuildRequest, stage a
StageRequest, execute its ExecuteSettings, verify its VerifySettings (memory's limit
beside them), --shapes a ShapesRequest, localize a LocalizeRequest (declared here:
localize's modules import the tapped build, which a run without --localize does
not). The job's settings are turned into those records here and nowhere else, so
what each stage depends on is written in its signature. A language model's road
(etdeploy.pipeline.llm) takes its own record of the job, an LmRequest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from etdeploy.accuracy import Gate
from etdeploy.builder.options import BuildOptions
from etdeploy.memory.limit import MaxMemory
from etdeploy.numerics import DEFAULT_THRESHOLDS
from etdeploy.pipeline.build import BuildRequest, SampleSource
from etdeploy.pipeline.execute import ExecuteSettings, Timing
from etdeploy.pipeline.generate import GenerationSettings
from etdeploy.pipeline.job import RunJob
from etdeploy.pipeline.llm.lm_export import LmBuildOptions
from etdeploy.pipeline.shapes import ShapesRequest
from etdeploy.pipeline.stage import StageRequest
from etdeploy.pipeline.verify import VerifySettings
from etdeploy.results.result import Thresholds
from etdeploy.results.result_lm import LmGates
from etdeploy.settings import (
    DEFAULT_MAX_KLD,
    DEFAULT_MAX_PPL_INCREASE,
    DEFAULT_MIN_TOKEN_AGREEMENT,
)


@dataclass(frozen=True)
class LocalizeRequest:
    """What localize takes of a run's settings: MODEL (the graph to tap) and the
    options it is built with, a --pte's path (its manifest then says how it was
    built), the module to look into, how many samples beside the worst, the tapped
    program's size budget, and how its runs on the device are made."""

    model: str | None
    options: BuildOptions
    execute: ExecuteSettings
    pte: Path | None = None
    module: str | None = None  # --localize-module
    samples: int = 0  # --localize-samples
    budget_bytes: int | None = None  # --localize-budget; None: tap_plan's default
    keep: bool = False
    verify_remote: bool = False


@dataclass(frozen=True)
class RunPlan:
    """Every stage's record of one job, and what run_job itself decides by."""

    build: BuildRequest
    stage: StageRequest
    execute: ExecuteSettings
    verify: VerifySettings
    memory_limit: MaxMemory | None
    runner: Path | None  # --runner
    host_check: bool
    verify_remote: bool
    keep: bool
    shapes: ShapesRequest | None  # None: no --shapes
    localize: LocalizeRequest | None  # None: no --localize


def plan_of(job: RunJob) -> RunPlan:
    """The job's stages' records."""
    options = build_options(job)
    samples = SampleSource(job.inputs, job.preprocess, job.random_inputs, job.labels)
    execute = execute_settings(job)
    verify = verify_settings(job)
    return RunPlan(
        build=BuildRequest(job.model, options, job.pte, job.data, samples),
        stage=StageRequest(
            job.model, options, samples, job.reference, job.declared_kinds(), job.task
        ),
        execute=execute,
        verify=verify,
        memory_limit=_max_memory(job),
        runner=job.runner,
        host_check=job.host_check,
        verify_remote=job.verify_remote,
        keep=job.keep,
        shapes=ShapesRequest(job.shapes, job.model, job.use_cache, execute, verify)
        if job.shapes
        else None,
        localize=LocalizeRequest(
            model=job.model,
            options=options,
            execute=execute,
            pte=job.pte,
            module=job.localize_module,
            samples=job.localize_samples,
            budget_bytes=job.localize_budget_bytes,
            keep=job.keep,
            verify_remote=job.verify_remote,
        )
        if job.localize
        else None,
    )


def build_options(job: RunJob) -> BuildOptions:
    """What MODEL is built with."""
    return BuildOptions(
        backend=job.backend,
        quantize=job.quantize,
        calibration=job.calibration,
        dynamic=job.dynamic,
        use_cache=job.use_cache,
        external_weights=job.external_weights,
    )


def execute_settings(job: RunJob) -> ExecuteSettings:
    """How the runner is called: the timed sample's timing, the deadlines, the threads."""
    return ExecuteSettings(
        Timing(job.iterations, job.warmup, job.profile),
        job.deadline_s,
        job.idle_timeout_s,
        job.cpu_threads,
    )


def verify_settings(job: RunJob) -> VerifySettings:
    """The limits the outputs and the task are held to: those given over
    etdeploy.numerics's defaults."""
    d = DEFAULT_THRESHOLDS
    return VerifySettings(
        thresholds=Thresholds(
            atol=_or(job.atol, d.atol),
            rtol=_or(job.rtol, d.rtol),
            min_sqnr_db=_or(job.min_sqnr_db, d.min_sqnr_db),
            min_top1=_or(job.min_top1, d.min_top1),
            min_cosine=_or(job.min_cosine, d.min_cosine),
            max_abs=job.max_abs_error,
            quant_steps=_or(job.quant_steps, d.quant_steps),
            quant_rtol=d.quant_rtol,
        ),
        declared_kinds=job.declared_kinds(),
        quantize=job.quantize,
        atol_given=job.atol is not None,
        gate=Gate(job.min_accuracy, job.max_accuracy_drop),
        labels=job.labels,
    )


@dataclass(frozen=True)
class LmRequest:
    """What a language model's road takes of a run's settings: MODEL (its label; the
    folder itself is found at the dispatch), a --pte built elsewhere, the build options,
    the prompts (--inputs), the tokens to generate and the gates, where its runner
    comes from (--runner), how each prompt's runner call runs, and the memory limit.
    --reference, --data and --backend are kept to be refused with a hint (a language
    model is its own reference, built for XNNPACK)."""

    model: str | None
    pte: Path | None
    options: LmBuildOptions
    inputs: tuple[str, ...]
    max_new_tokens: int
    gates: LmGates
    use_cache: bool
    runner: Path | None
    generation: GenerationSettings
    memory_limit: MaxMemory | None
    backend: str = "xnnpack"
    reference: Path | None = None
    data: Path | None = None


def lm_request_of(job: RunJob) -> LmRequest:
    """The language-model road's record of the job (the gates' defaults filled in)."""
    return LmRequest(
        model=job.model,
        pte=job.pte,
        options=LmBuildOptions(
            max_seq_len=job.max_seq_len,
            quantize=job.quantize,
            group_size=job.group_size,
            quantize_embeddings=job.quantize_embeddings,
        ),
        inputs=tuple(job.inputs),
        max_new_tokens=job.max_new_tokens,
        gates=LmGates(
            min_token_agreement=_or(job.min_token_agreement, DEFAULT_MIN_TOKEN_AGREEMENT),
            max_kld=_or(job.max_kld, DEFAULT_MAX_KLD),
            max_ppl_increase=_or(job.max_ppl_increase, DEFAULT_MAX_PPL_INCREASE),
        ),
        use_cache=job.use_cache,
        runner=job.runner,
        generation=GenerationSettings(
            cpu_threads=job.cpu_threads,
            deadline_s=job.deadline_s,
            idle_timeout_s=job.idle_timeout_s,
            verify_remote=job.verify_remote,
            keep=job.keep,
        ),
        memory_limit=_max_memory(job),
        backend=job.backend,
        reference=job.reference,
        data=job.data,
    )


def _max_memory(job: RunJob) -> MaxMemory | None:
    """The limit a run's settings set, named by where it was set."""
    if job.max_memory_bytes is None:
        return None
    return MaxMemory(job.max_memory_bytes, job.max_memory_source or "--max-memory")


def _or(value: float | None, default: float) -> float:
    return default if value is None else float(value)
