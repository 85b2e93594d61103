"""Running a farm: this shard's jobs over every device at once, with retries.

- One thread per device (times --jobs-per-device), taking that device's jobs in
  spec order; devices work in parallel, and the device lock (Device.lock) keeps
  one job per device across processes, including other farms and `etdeploy run`.
- Each attempt runs in a worker process of its own (etdeploy.farm.attempt),
  stopped at the job's timeout.
- Retries: only results whose error is an InfraError with retryable=True (a
  dropped connection, a device gone offline, a restarted server), at most
  `retries` more attempts, waiting backoff_s, 2*backoff_s, ... (capped at
  backoff_max_s) between them. Every attempt is kept in the result's
  "attempts". A numeric mismatch is a result with status "failed", never an
  error, so it is never retried; a job timeout or a crashed worker is not
  retried either (a retry would most likely hang or crash again).
- Each finished job goes to the results log (etdeploy.farm.store) before the
  next job starts on that device.
- Cells of the matrix that cannot run (FarmSpec.skipped) are reported as
  skipped, never started. With resume, jobs the log holds are not run again,
  except, with retry_errors, those whose result was an infrastructure error.
- Every event carries the count of jobs finished out of those this run starts,
  and the time since it started: progress a log can show as [n/N].
- Ctrl-C (KeyboardInterrupt): every worker is stopped (SIGTERM, so it releases
  its device; SIGKILL after the grace period), device sources release their
  claims, the results log keeps what finished, and the interrupt goes on to the
  caller (the CLI exits 130).
- Devices from a device source (etdeploy.farm.sources: STF) are claimed for the
  run's jobs before they start and released when the run ends, however it ends;
  claims an earlier, killed farm left out on this OUT are released first. A
  device that could not be claimed gives each of its jobs that error.

Nothing here prints: progress goes through an event callback.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from etdeploy.errors import EtdeployError, InfraError, UsageError
from etdeploy.farm.attempt import WorkerProcesses, run_attempt
from etdeploy.farm.results import (
    Result,
    annotate,
    attempt_record,
    error_result,
    timestamp,
    with_attempts,
)
from etdeploy.farm.sources import lease_devices, release_leftovers
from etdeploy.farm.spec import FarmJob, FarmSpec, SkippedJob
from etdeploy.farm.store import (
    RESULTS_NAME,
    ResultsLog,
    claim_out_dir,
    finished_results,
    select_shard,
)
from etdeploy.farm.worker import TERMINATE_GRACE_S
from etdeploy.results.result import Attempt, RunResult

# Worker logs and requests: OUT/work/JOB_ID/.
WORK_DIR_NAME = "work"


@dataclass(frozen=True)
class FarmEvent:
    """What the farm tells its caller, and how far it has come.

    kind: "start" (an attempt starts), "retry" (an attempt failed and another
    follows after wait_s), "finish" (a job's final result), "earlier" (finished
    by an earlier run: resumed, not run again), "rerun" (an earlier run's
    infrastructure error, run again: result is that earlier result), "skip" (a
    cell that cannot run: job is a SkippedJob with its reason).
    """

    kind: str
    job: FarmJob | SkippedJob
    attempt: int = 0
    result: Result | None = None
    wait_s: float = 0.0
    # Jobs finished so far, of the `total` this run starts; seconds since it started.
    done: int = 0
    total: int = 0
    elapsed_s: float = 0.0


EventCallback = Callable[[FarmEvent], None]


@dataclass
class FarmOutcome:
    """What run_farm did: the shard's plan and every result it has."""

    spec: FarmSpec
    planned: list[FarmJob]
    # One per planned job that finished (now or in an earlier run), in plan order.
    results: list[Result]
    resumed: int
    started_at: str
    finished_at: str | None
    out_dir: Path
    shard: tuple[int, int]
    # What the device sources did (claims and releases), a line each, for the log.
    source_notes: list[str] = field(default_factory=list)
    # This shard's cells of the matrix that cannot run, not started.
    skipped: list[SkippedJob] = field(default_factory=list)
    # Earlier infrastructure errors run again (resume with retry_errors).
    rerun: int = 0

    @property
    def results_path(self) -> Path:
        return self.out_dir / RESULTS_NAME


def run_farm(
    spec: FarmSpec,
    out_dir: Path,
    *,
    shard: tuple[int, int] = (0, 1),
    resume: bool = False,
    retry_errors: bool = False,
    jobs_per_device: int | None = None,
    on_event: EventCallback | None = None,
) -> FarmOutcome:
    """Run this shard of the matrix; return every result (earlier ones too on --resume).

    Results are appended to OUT/results.jsonl as each job finishes. Raises
    UsageError when OUT holds an earlier run and resume is off, or when another
    farm writes to OUT. With resume, retry_errors runs again the jobs whose
    earlier result is an infrastructure error (a new line in the log supersedes
    it). KeyboardInterrupt stops the workers (what finished stays).
    """
    if retry_errors and not resume:
        raise UsageError(
            "--retry-errors goes with --resume", "add --resume to finish the run in --out"
        )
    clock = time.monotonic()
    planned = select_shard(spec.jobs, *shard)
    skipped = select_shard(spec.skipped, *shard)
    out_dir = Path(out_dir)
    with claim_out_dir(out_dir):
        log = ResultsLog(out_dir / RESULTS_NAME)
        source_notes = release_leftovers(spec, out_dir)
        finished = finished_results(log, resume)
        again = {
            key: result
            for key, result in finished.items()
            if retry_errors and result.status == "error" and result.is_infrastructure
        }
        todo = [job for job in planned if job.key not in finished or job.key in again]
        user_emit = on_event or (lambda _event: None)

        def emit(event: FarmEvent) -> None:
            user_emit(
                dataclasses.replace(event, total=len(todo), elapsed_s=time.monotonic() - clock)
            )

        for cell in skipped:
            emit(FarmEvent("skip", cell))
        for job in planned:
            if job.key in again:
                emit(FarmEvent("rerun", job, result=again[job.key]))
            elif job.key in finished:
                emit(FarmEvent("earlier", job, result=finished[job.key]))
        started_at = timestamp()
        with lease_devices(spec, out_dir, [job.device for job in todo]) as lease:
            runner = _FarmRunner(
                lease.applied(spec), out_dir, log, emit, shard,
                jobs_per_device or spec.jobs_per_device, unavailable=lease.unavailable,
            )  # fmt: skip
            fresh = runner.run(todo)
        source_notes += lease.notes  # the claims, and (on leaving) the releases
        results = [fresh.get(job.key) or finished.get(job.key) for job in planned]
        return FarmOutcome(
            spec=spec,
            planned=planned,
            results=[r for r in results if r is not None],
            resumed=sum(1 for job in planned if job.key in finished and job.key not in again),
            started_at=started_at,
            finished_at=timestamp(),
            out_dir=out_dir,
            shard=shard,
            source_notes=source_notes,
            skipped=skipped,
            rerun=len(again),
        )


class _FarmRunner:
    """One run's device threads, its results so far, and its worker processes."""

    def __init__(
        self, spec: FarmSpec, out_dir: Path, log: ResultsLog, emit: EventCallback,
        shard: tuple[int, int], slots: int, unavailable: dict[str, InfraError] | None = None,
    ) -> None:  # fmt: skip
        self.spec = spec
        # Devices a source could not provide: their jobs get this error, unrun.
        self.unavailable: dict[str, EtdeployError] = dict(unavailable or {})
        self.work = out_dir / WORK_DIR_NAME
        self.log = log
        self.emit = emit
        self.shard = shard
        self.slots = max(1, slots)
        self.stop = threading.Event()
        self.results: dict[str, Result] = {}
        self._lock = threading.Lock()
        self._processes = WorkerProcesses()

    def run(self, jobs: list[FarmJob]) -> dict[str, Result]:
        queues: dict[str, deque[FarmJob]] = {}
        for job in jobs:
            queues.setdefault(job.device, deque()).append(job)
        threads = [
            threading.Thread(
                target=self._device_loop, args=(queue,), name=f"farm-{device}-{slot}", daemon=True
            )
            for device, queue in queues.items()
            for slot in range(self.slots)
        ]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except BaseException:
            # Ctrl-C (or the CLI being told to stop): end every worker, keep what finished.
            self.stop.set()
            self._processes.terminate_all()
            for thread in threads:
                thread.join(TERMINATE_GRACE_S + 5)
            raise
        return self.results

    def _device_loop(self, queue: deque[FarmJob]) -> None:
        while not self.stop.is_set():
            with self._lock:
                if not queue:
                    return
                job = queue.popleft()
            result: RunResult | None
            try:
                failure = self.unavailable.get(job.device)
                if failure is not None:
                    result = with_attempts(error_result(job, failure, time.time(), None), [])
                else:
                    result = self._run_with_retries(job)
            except Exception as exc:  # a bug of ours: the job gets an error, the farm goes on
                result = error_result(job, InfraError(
                    f"internal error in the farm: {type(exc).__name__}: {exc}",
                    "rerun with --verbose and report the traceback", device=job.device,
                ), time.time(), None)  # fmt: skip
                result = with_attempts(result, [])
            if result is None:
                return  # stopped
            result = annotate(result, job, self.shard, str(self.spec.path))
            self.log.append(result)
            with self._lock:
                self.results[job.key] = result
                # Under the lock, so the counts reach the caller in order.
                self.emit(FarmEvent("finish", job, attempt=len(result.attempts or ()),
                                    result=result, done=len(self.results)))  # fmt: skip
            if self.spec.cooldown_s and queue:
                self.stop.wait(self.spec.cooldown_s)

    def _done(self) -> int:
        with self._lock:
            return len(self.results)

    def _run_with_retries(self, job: FarmJob) -> Result | None:
        attempts: list[Attempt] = []
        attempt = 0
        while True:
            attempt += 1
            self.emit(FarmEvent("start", job, attempt=attempt, done=self._done()))
            started = time.time()
            result = run_attempt(job, self.spec, self.work, self._processes, self.stop)
            if result is None:
                return None
            record = attempt_record(result, attempt, started)
            if not result.retryable or attempt > job.retries:
                return with_attempts(result, [*attempts, record])
            wait = min(self.spec.backoff_max_s, self.spec.backoff_s * 2 ** (attempt - 1))
            attempts.append(dataclasses.replace(record, backoff_s=wait))
            self.emit(FarmEvent("retry", job, attempt=attempt, result=result, wait_s=wait,
                                done=self._done()))  # fmt: skip
            if self.stop.wait(wait):
                return None
