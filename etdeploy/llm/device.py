"""Generation on the device: one `etdeploy_runner --generate` call per prompt.

The runner, the program and every prompt's ids file go in one push (content-addressed,
so an unchanged program is not sent again); each call writes its generated ids, its
teacher-forced logits and its result document into the job's directory, which are
pulled and read against the request (etdeploy.runner.generation). The job's directory
is removed after the run (unless --keep), as for any run.

`host_generation` is the same contract computed by ExecuTorch's Python runtime on this
machine (executorch.runtime): the --host-check of a language model, and the check that
the runner and the Python bindings run one program alike.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from etdeploy.devices.base import Push, job_dir
from etdeploy.devices.workdir import JobDirs
from etdeploy.llm.export import LmProgram
from etdeploy.pipeline.deploy import Target
from etdeploy.pipeline.job import RunJob
from etdeploy.runner.generation import (
    GenerationFiles,
    GenerationRequest,
    GenerationResult,
    GenerationTimings,
    generation_argv,
    generation_invocation,
    read_generation,
)


@dataclass(frozen=True)
class DeviceGeneration:
    results: tuple[GenerationResult, ...]
    bytes_sent: int
    files_sent: int
    files_skipped: int
    deploy_seconds: float


def _ids_file(request: GenerationRequest) -> Path:
    """The request's ids in a local file named by their content (kept in the cache, so
    a transport's digest record knows it next time)."""
    from etdeploy.atomic import atomic_write
    from etdeploy.paths import cache_dir

    data = request.ids_bytes()
    path = cache_dir("llm-inputs") / f"{hashlib.sha256(data).hexdigest()[:24]}.ids"
    if not path.is_file():
        atomic_write(path, data)
    return path


def generate_on_device(
    target: Target,
    program: LmProgram,
    requests: Sequence[GenerationRequest],
    job: RunJob,
    job_id: str,
) -> DeviceGeneration:
    """Every request run by the runner on the device, its files pulled and read."""
    from etdeploy.preflight.describe import remote_runner_dir

    device, bundle = target.device, target.bundle
    base = device.workdir.rstrip("/")
    runners, jdir = remote_runner_dir(device, bundle), job_dir(device, job_id)
    remote_pte = f"{base}/programs/{program.sha256[:24]}.pte"
    pushes = [
        Push(path, f"{runners}/{path.name}", 0o755 if path.name == bundle.executable else 0o644)
        for path in bundle.files
    ]
    pushes.append(Push(program.pte, remote_pte))
    id_files = [_ids_file(request) for request in requests]
    pushes += [Push(path, f"{base}/inputs/{path.name}") for path in dict.fromkeys(id_files)]
    jobs = JobDirs(device)
    jobs.sweep(but=job_id)
    jobs.begin(job_id)
    try:
        started = time.perf_counter()
        sent = device.push_many(pushes, directories=(jdir,), verify=job.verify_remote)
        deployed = time.perf_counter() - started
        with tempfile.TemporaryDirectory(prefix="etdeploy-lm-") as tmp:
            results = tuple(
                _one_call(target, job, f"{runners}/{bundle.executable}", remote_pte, request,
                          f"{base}/inputs/{ids.name}", f"{jdir}/p{i}", Path(tmp) / f"p{i}")
                for i, (request, ids) in enumerate(zip(requests, id_files, strict=True))
            )  # fmt: skip
    finally:
        jobs.end(job_id, keep=job.keep)
    return DeviceGeneration(
        results, sum(p.bytes_sent for p in sent), sum(not p.skipped for p in sent),
        sum(p.skipped for p in sent), deployed,
    )  # fmt: skip


def _one_call(
    target: Target, job: RunJob, runner: str, pte: str, request: GenerationRequest,
    ids: str, remote_base: str, local_base: Path,
) -> GenerationResult:  # fmt: skip
    from etdeploy import runner as contract

    files = GenerationFiles.under(remote_base, ids)
    invocation = generation_invocation(pte, request, files, cpu_threads=job.cpu_threads)
    out = target.device.run(
        generation_argv(runner, invocation),
        deadline_s=job.deadline_s,
        idle_timeout_s=job.idle_timeout_s,
        device_log=False,
    )
    if out.timed_out or out.exit_code != 0:
        raise contract.runner_failure(
            None if out.timed_out else out.exit_code, out.stdout, out.stderr,
            device_log=out.device_log, timed_out=out.timed_out, command=out.command,
            device=target.device.name,
            silent_for_s=job.idle_timeout_s if out.idle else None,
        )  # fmt: skip
    local = {
        files.result_json: local_base.with_suffix(".json"),
        files.generated: local_base.with_suffix(".generated.bin"),
        str(files.logits): local_base.with_suffix(".logits.bin"),
    }
    target.device.pull_files(list(local.items()))
    return read_generation(
        request, local[files.result_json], local[files.generated], local[str(files.logits)]
    )


def host_generation(pte: Path, request: GenerationRequest) -> GenerationResult:
    """The runner's contract computed by ExecuTorch's Python runtime here: greedy
    generation from the prompt, then every position's logits, one token per call."""
    import torch
    from executorch.runtime import Runtime

    started = time.perf_counter()
    method = Runtime.get().load_program(str(pte)).load_method("forward")
    load_ms = (time.perf_counter() - started) * 1000

    def step(token: int, position: int) -> Any:
        args = [torch.tensor([[token]], dtype=torch.long), torch.tensor([position])]
        return method.execute(args)[0].reshape(-1)

    started = time.perf_counter()
    for position, token in enumerate(request.token_ids[: request.prompt_len]):
        logits = step(token, position)
    generated = [int(logits.argmax())]
    prefill_ms = (time.perf_counter() - started) * 1000
    decode_ms = []
    for position in range(request.prompt_len, request.prompt_len + request.max_new_tokens - 1):
        started = time.perf_counter()
        generated.append(int(step(generated[-1], position).argmax()))
        decode_ms.append((time.perf_counter() - started) * 1000)
    started = time.perf_counter()
    table = np.stack([step(t, p).numpy() for p, t in enumerate(request.token_ids)])
    forced_ms = (time.perf_counter() - started) * 1000
    total = sum(decode_ms)
    timings = GenerationTimings(
        load_ms=load_ms,
        prefill_ms=prefill_ms,
        prefill_tokens_per_s=request.prompt_len / (prefill_ms / 1000),
        decode_ms=tuple(decode_ms),
        decode_tokens_per_s=len(decode_ms) / (total / 1000) if total > 0 else None,
        teacher_forced_ms=forced_ms,
    )
    return GenerationResult(
        tuple(generated), table.astype(np.float32), timings, int(table.shape[1]), None, 1,
        None, None,
    )  # fmt: skip
