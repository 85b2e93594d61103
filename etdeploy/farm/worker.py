"""The worker: one attempt of one farm job, in a process of its own.

The whole protocol between the farm (etdeploy.farm.attempt) and a worker:

- The farm writes FOLDER/request.json (write_request): the spec's path, the
  device's name, the job (a RunJob as JSON), its job id, how long to wait for
  the device lock, and the farm's pid; for a device claimed from a device
  source (etdeploy.farm.sources), also its [devices.NAME] table, which the
  spec file does not hold.
- It starts worker_command(FOLDER) in the spec's folder, in a session of its
  own, with worker_env(): this etdeploy first on PYTHONPATH, so the worker runs
  the farm's code whatever else is installed.
- The worker (worker_main) opens the device, runs pipeline.run_job, writes
  FOLDER/result.json (etdeploy.result/N; status "error" when the job raised) and
  exits 0. Its stderr goes to FOLDER/worker.log, a line per step, so the last
  line of a hung job's log says where it hung.
- SIGTERM: the worker unwinds its `finally` blocks (the device lock, the job
  directory) and exits 143; the farm sends SIGKILL after TERMINATE_GRACE_S.
  A worker whose farm died stops itself the same way.
- read_result(FOLDER): the result, or None when the worker died without one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import etdeploy
from etdeploy.config import DeviceConfig
from etdeploy.devices.registry import configured_runner, open_device
from etdeploy.errors import EXIT_INFRA, EtdeployError, InfraError
from etdeploy.farm.spec import load_farm_spec
from etdeploy.results.result import RunResult

if TYPE_CHECKING:
    from etdeploy.pipeline import RunJob
    from etdeploy.results.result import RunResult

REQUEST_NAME = "request.json"
RESULT_NAME = "result.json"
LOG_NAME = "worker.log"
# After SIGTERM, how long a worker may take to release the device before SIGKILL.
TERMINATE_GRACE_S = 10.0
# How a worker stopped by SIGTERM exits (128 + SIGTERM, as a shell reports it).
EXIT_TERMINATED = 143

# Names this module, so the command follows it if it moves. `-c`, not `-m`: the
# package imports this module, and runpy would run a second copy as __main__.
WORKER_CODE = f"import sys; from {__name__} import worker_main; sys.exit(worker_main(sys.argv[1:]))"


# -- the farm's side ----------------------------------------------------------------------


def write_request(
    folder: Path,
    *,
    spec_path: Path,
    device: str,
    job: RunJob,
    job_id: str,
    lock_timeout_s: float,
    device_table: DeviceConfig | None = None,
) -> None:
    """FOLDER/request.json: what the worker started on FOLDER is to do."""
    request = {
        "spec": str(spec_path),
        "device": device,
        "job": job.to_json(),
        "job_id": job_id,
        "lock_timeout_s": lock_timeout_s,
        "parent_pid": os.getpid(),
    }
    if device_table is not None:
        request["device_table"] = {
            "transport": device_table.transport,
            "settings": dict(device_table.settings),
        }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / REQUEST_NAME).write_text(json.dumps(request, indent=2))


def worker_command(folder: Path) -> list[str]:
    """The worker's command line for FOLDER's request."""
    # Absolute: the worker starts in the spec's folder, not in the farm's.
    folder = folder.absolute()
    return [
        sys.executable,
        "-c",
        WORKER_CODE,
        str(folder / REQUEST_NAME),
        str(folder / RESULT_NAME),
    ]


def worker_env() -> dict[str, str]:
    """This environment, with the etdeploy this farm runs first on PYTHONPATH."""
    env = dict(os.environ)
    # The worker runs in the spec's folder; make sure it imports this etdeploy.
    package_root = str(Path(etdeploy.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


def read_result(folder: Path) -> RunResult | None:
    """The worker's result; None when it wrote none (it crashed or was killed)."""
    try:
        result = RunResult.from_json(json.loads((folder / RESULT_NAME).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    # The result goes on to results.jsonl; the worker's log stays in FOLDER.
    for name in (REQUEST_NAME, RESULT_NAME):
        (folder / name).unlink(missing_ok=True)
    return result


# -- the worker's side --------------------------------------------------------------------


class _Terminated(BaseException):
    """SIGTERM from the farm: unwind (releasing the device lock), then exit."""


def worker_main(argv: Sequence[str]) -> int:
    """Run one job attempt: REQUEST.json in, RESULT.json out (etdeploy.result/N,
    "error" when it raised). The exit code is 0 whenever a result was written."""
    request_path, result_path = Path(argv[0]), Path(argv[1])
    request = json.loads(request_path.read_text())

    def on_term(_signum: int, _frame: Any) -> None:
        raise _Terminated

    signal.signal(signal.SIGTERM, on_term)
    _watch_parent(int(request["parent_pid"]))

    from etdeploy.pipeline import RunContext, RunJob, error_result, run_job, write_result_json

    job = RunJob.from_json(request["job"])
    device_name, job_id = request["device"], request["job_id"]
    started = time.time()

    def say(text: str) -> None:
        # The worker's log: after a timeout, its last line says where the job was.
        print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)

    try:
        spec = load_farm_spec(Path(request["spec"]))
        config = spec.config
        table = request.get("device_table")
        if table is not None:  # a leased device: the farm's table, not the spec's
            leased = DeviceConfig(device_name, table["transport"], dict(table["settings"]))
            config = dataclasses.replace(config, devices={**config.devices, device_name: leased})
        say(f"opening {device_name}")
        device = open_device(device_name, config, lock_timeout_s=float(request["lock_timeout_s"]))
        context = RunContext(
            status=say,
            size_config=spec.config,
            device_runner=configured_runner(device_name, config),
        )
        with contextlib.closing(device):
            result = run_job(job, device, context, job_id=job_id)
    except EtdeployError as exc:
        say(f"error: {exc}")
        result = error_result(job, device_name, exc, started, job_id)
    except _Terminated:
        say("stopped by the farm")
        return EXIT_TERMINATED
    except Exception as exc:  # a bug: kept as this job's error, with the trace
        import traceback

        wrapped = InfraError(
            f"internal error: {type(exc).__name__}: {exc}",
            "report the traceback in the log",
            device=device_name,
            log=traceback.format_exc(),
        )
        result = error_result(job, device_name, wrapped, started, job_id)
    say(f"done: {result.status}")
    write_result_json(result, result_path)
    return 0


def _watch_parent(parent_pid: int) -> None:
    """Stop when the farm that started this worker is gone (it was killed): a
    daemon thread, since a worker in its own session misses the farm's signals."""

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(TERMINATE_GRACE_S)
                os._exit(EXIT_INFRA)

    threading.Thread(target=watch, name="farm-parent-watch", daemon=True).start()
