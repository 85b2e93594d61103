"""`etdeploy farm run SPEC.toml`: a matrix of models x backends x quantization x devices.

The modules, in the order a farm uses them:

- spec: the TOML spec read into a FarmSpec of FarmJobs (the matrix, explicit
  [[farm.job]] entries, excludes, settings) and SkippedJobs (cells that cannot
  run); checks: its value checks; select: `-k EXPR`, a subset by job names.
- store: shards, the results log OUT/results.jsonl, resume, one farm per OUT.
- scheduler: run_farm, one thread per device, retries, progress events.
- attempt: one attempt in a worker process, stopped at the job's timeout.
- worker: the protocol between the farm and a worker, and the worker itself.
- results: every question the farm asks of a result document.
- reports: OUT/farm.json, JSON/JUnit/HTML where asked, and the exit code.
- sources: devices claimed for a run from a device-farm service ([farm.sources.stf]:
  STF/DeviceFarmer), released whatever happens.
- merge: one farm's reports from the OUT folders of its shards or hosts.
- export: what a service that runs tests on its own hosts needs (aws-device-farm).

Nothing here prints: progress goes through an event callback, failures raise
EtdeployError kinds, and the CLI renders.
"""

from __future__ import annotations

from etdeploy.farm.attempt import JobTimeout, WorkerCrashed
from etdeploy.farm.checks import NO_QUANT
from etdeploy.farm.reports import FARM_DOC_NAME, exit_code
from etdeploy.farm.results import result_key
from etdeploy.farm.scheduler import EventCallback, FarmEvent, FarmOutcome, run_farm
from etdeploy.farm.spec import (
    DEFAULT_BACKOFF_MAX_S,
    DEFAULT_BACKOFF_S,
    DEFAULT_JOB_TIMEOUT_S,
    DEFAULT_RETRIES,
    FARM_KEYS,
    JOB_SETTING_TYPES,
    FarmJob,
    FarmSpec,
    SkippedJob,
    job_key,
    load_farm_spec,
    parse_farm_spec,
)
from etdeploy.farm.store import RESULTS_NAME, ResultsLog, select_shard, shard_of

__all__ = [
    "DEFAULT_BACKOFF_MAX_S",
    "DEFAULT_BACKOFF_S",
    "DEFAULT_JOB_TIMEOUT_S",
    "DEFAULT_RETRIES",
    "FARM_DOC_NAME",
    "FARM_KEYS",
    "JOB_SETTING_TYPES",
    "NO_QUANT",
    "RESULTS_NAME",
    "EventCallback",
    "FarmEvent",
    "FarmJob",
    "FarmOutcome",
    "FarmSpec",
    "JobTimeout",
    "ResultsLog",
    "SkippedJob",
    "WorkerCrashed",
    "exit_code",
    "job_key",
    "load_farm_spec",
    "parse_farm_spec",
    "result_key",
    "run_farm",
    "select_shard",
    "shard_of",
]
