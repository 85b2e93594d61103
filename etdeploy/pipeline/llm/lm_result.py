"""The RunResult of a language-model run: the ordinary blocks (job, device, artifact,
runner, preflight, deploy, latency, memory, verdict) filled from what the LM stages
returned, and the `language_model` block that carries the token-level comparison."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import etdeploy
from etdeploy.errors import EXIT_CHECK_FAILED, EXIT_OK
from etdeploy.results.result import (
    Artifact,
    DeployStats,
    DeviceSummary,
    InputsInfo,
    JobInfo,
    Preflight,
    RunnerInfo,
    RunResult,
    SizeSummary,
)
from etdeploy.results.result_lm import LmMemory
from etdeploy.results.result_verdict import Verdict

if TYPE_CHECKING:
    from etdeploy.memory.limit import JudgedMemory
    from etdeploy.pipeline.deploy import Target
    from etdeploy.pipeline.generate import DeviceGeneration
    from etdeploy.pipeline.llm.lm_export import LmProgram
    from etdeploy.pipeline.llm.lm_job import LmJob
    from etdeploy.preflight import PreflightReport
    from etdeploy.results.result_lm import LanguageModelResult


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
    from etdeploy.pipeline.execute import latency_of

    info, bundle = target.info, target.bundle
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
        device=DeviceSummary(
            name=info.name,
            transport=info.transport,
            serial=info.serial,
            os=info.os,
            os_version=info.os_version,
            abi=info.abi,
            model=info.model,
            soc=info.soc,
        ),
        artifact=Artifact(
            pte=str(program.pte),
            sha256=program.sha256,
            size_bytes=program.size_bytes,
            backend="xnnpack",
            quantization=block.quantization,
            built_with=dict(program.built_with) if program.built_with else built_with(),
        ),
        runner=RunnerInfo(
            flavor=bundle.flavor,
            abi=bundle.abi,
            kind=bundle.kind,
            version=results[0].runner_version if results else None,
            path=str(bundle.executable_path),
        ),
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


def built_with() -> dict[str, str | None]:
    """The versions of what makes an LM program, here (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    names = ("torch", "executorch", "transformers", "torchao")
    return {"etdeploy": etdeploy.__version__, **{n: installed(n) for n in names}}
