"""One attempt of a farm job: a worker process (etdeploy.farm.worker) started,
watched and, past the job's timeout, stopped.

A job-level timeout (job_timeout_s: the whole attempt, waiting for the device,
build, deploy, every runner call) is enforced by signalling the worker's process
group: SIGTERM, so the worker unwinds its `finally` blocks (the device lock, the
job directory), then SIGKILL after a grace period. A thread stuck in a socket
read cannot be killed; a process can, so one hung device costs its own timeout
and never stalls the farm. The process also isolates crashes (a segfault in a
native library is one job's error) and costs little: the build, the runner and
the eager reference are cached on disk and shared by every worker, so a worker
only imports torch when it has to build or compute a reference.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from etdeploy.errors import InfraError
from etdeploy.farm.results import Result, error_result
from etdeploy.farm.spec import FarmJob, FarmSpec
from etdeploy.farm.worker import (
    LOG_NAME,
    TERMINATE_GRACE_S,
    read_result,
    worker_command,
    worker_env,
    write_request,
)
from etdeploy.pipeline import new_job_id

# The last lines of a worker's log kept in a timeout or crash result.
WORKER_LOG_TAIL_LINES = 60
# How often a waiting attempt looks at its stop flag.
_POLL_S = 0.5


class JobTimeout(InfraError):
    """The whole job outran job_timeout_s and its worker was killed."""


class WorkerCrashed(InfraError):
    """The worker process died without writing a result (a crash in native code,
    out of memory, killed from outside)."""


class WorkerProcesses:
    """The farm's live worker processes, so that a stop can end them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen[bytes]] = set()

    @contextlib.contextmanager
    def started(self, folder: Path, cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
        """The worker for FOLDER's request, its output in FOLDER's log."""
        with open(folder / LOG_NAME, "wb") as log:
            process = subprocess.Popen(
                worker_command(folder), cwd=cwd, env=worker_env(), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT,
                # Its own process group: the timeout's signals reach the worker and what
                # shares its group, and a Ctrl-C meant for the farm does not reach it.
                start_new_session=True,
            )  # fmt: skip
        with self._lock:
            self._live.add(process)
        try:
            yield process
        finally:
            with self._lock:
                self._live.discard(process)

    def terminate_all(self) -> None:
        with self._lock:
            live = list(self._live)
        # Every worker told first, so all unwind (releasing their devices) at once:
        # one grace period in all, not one per worker.
        for process in live:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in live:
            terminate(process)


def run_attempt(
    job: FarmJob,
    spec: FarmSpec,
    work_dir: Path,
    processes: WorkerProcesses,
    stop: threading.Event,
) -> Result | None:
    """One attempt in its own worker process, killed at job_timeout_s: its result,
    an error result for a timeout or a crash, or None when the farm was stopped."""
    job_id = new_job_id()
    folder = work_dir / job_id
    write_request(
        folder,
        spec_path=spec.path,
        device=job.device,
        job=job.run_job(),
        job_id=job_id,
        lock_timeout_s=spec.lock_timeout_s,
        device_table=spec.leased.get(job.device),
    )
    started = time.time()
    with processes.started(folder, cwd=spec.path.parent) as process:
        deadline = time.monotonic() + job.job_timeout_s
        while True:
            if stop.is_set():
                terminate(process)
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                terminate(process)
                return error_result(job, JobTimeout(
                    f"job timed out after {job.job_timeout_s:g} s (job_timeout_s); its worker was stopped",
                    "raise job_timeout_s for this job, or look at the device: the log says "
                    "what the job was doing", device=job.device,
                    log=_tail(folder / LOG_NAME),
                ), started, job_id)  # fmt: skip
            try:
                process.wait(timeout=min(_POLL_S, remaining))
                break
            except subprocess.TimeoutExpired:
                continue
    result = read_result(folder)
    if result is None and stop.is_set():
        # Stopped by the farm (Ctrl-C) while it ended: not a crash, and no result,
        # so a resumed farm runs the job again.
        return None
    if result is None:
        code = process.returncode
        how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
        return error_result(job, WorkerCrashed(
            f"the job's worker process {how} without a result",
            "the log holds its last words; rerun the job with `etdeploy run -v` to see more",
            device=job.device, log=_tail(folder / LOG_NAME),
        ), started, job_id)  # fmt: skip
    return result


def terminate(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the worker's group (it unwinds and releases the device), then
    SIGKILL to whatever is left after the grace period."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=TERMINATE_GRACE_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-WORKER_LOG_TAIL_LINES:])
