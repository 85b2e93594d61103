"""`etdeploy farm SPEC.toml`: a matrix of models x backends x quantization x devices.

The spec (a TOML file) names the matrix in [farm] and the devices in the same
[devices.NAME] tables etdeploy.toml takes (see FARM_KEYS and the README):

    [farm]
    models = ["digits", "models/kws.py:build"]
    backends = ["xnnpack"]
    quantize = ["none", "int8"]          # "none": the float build
    devices = ["local", "pixel8", "mac"]
    iterations = 10
    retries = 2                          # extra attempts, infrastructure faults only

    [[farm.job]]                         # explicit entries, beside the matrix
    model = "models/big.py:build"
    devices = ["pixel8"]
    job_timeout_s = 3600

    [devices.pixel8]
    transport = "adb"
    serial = "..."

How it runs:

- Jobs have a stable key, `model|backend|quant|device`; sharding hashes it, so
  `--shard-index I --shard-count N` splits the matrix the same way on every host
  and a job added to the spec moves no other job to another shard.
- One thread per device (times --jobs-per-device), taking that device's jobs in
  spec order; devices work in parallel, and the device lock (Device.lock) keeps
  one job per device across processes, including other farms and `etdeploy run`.
- Each attempt runs in a worker process of its own (worker_main), which opens
  the device and calls pipeline.run_job. A job-level timeout (job_timeout_s,
  the whole attempt: waiting for the device, build, deploy, every runner call)
  is enforced by signalling that process's group: SIGTERM, so the worker unwinds
  its `finally` blocks (the device lock, the job directory), then SIGKILL after
  a grace period. A thread stuck in a socket read cannot be killed; a process
  can, so one hung device costs its own timeout and never stalls the farm. The
  process also isolates crashes (a segfault in a native library is one job's
  error) and costs little: the build, the runner and the eager reference are
  cached on disk and shared by every worker, so a worker only imports torch when
  it has to build or compute a reference.
- Retries: only results whose error is an InfraError with retryable=True (a
  dropped connection, a device gone offline, a restarted server), at most
  `retries` more attempts, waiting backoff_s, 2*backoff_s, ... (capped at
  backoff_max_s) between them. Every attempt is kept in the result's
  "attempts". A numeric mismatch is a result with status "failed", never an
  error, so it is never retried; a job timeout or a crashed worker is not
  retried either (a retry would most likely hang or crash again).
- Each finished job is one JSON line appended to OUT/results.jsonl, flushed and
  fsynced before the next job starts on that device, so a killed farm keeps
  everything that finished; `--resume` reads the file and skips those keys.

Nothing here prints: progress goes through an event callback, failures raise
EtdeployError kinds, and the CLI renders.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etdeploy.config import RUN_DEFAULTS, Config, parse_config, run_settings
from etdeploy.errors import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_INFRA,
    EXIT_OK,
    EtdeployError,
    InfraError,
    UsageError,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

RESULTS_NAME = "results.jsonl"
FARM_DOC_NAME = "farm.json"
NO_QUANT = "none"

# The whole attempt, build included: a cold int8 build of a large model takes
# minutes, so the default is generous; nightly specs set their own.
DEFAULT_JOB_TIMEOUT_S = 1800.0
DEFAULT_RETRIES = 2
DEFAULT_BACKOFF_S = 5.0
DEFAULT_BACKOFF_MAX_S = 60.0
# After SIGTERM, how long a worker may take to release the device before SIGKILL.
TERMINATE_GRACE_S = 10.0
# The last lines of a worker's log kept in a timeout or crash result.
WORKER_LOG_TAIL_LINES = 60

_NUM = (int, float)

# Knobs of one job (RunJob fields, plus how the farm treats the job). [run] in the
# spec, then [farm], then a model entry, then a [[farm.job]] entry may set them.
JOB_SETTING_TYPES: dict[str, type | tuple[type, ...]] = {
    "iterations": int,
    "warmup": int,
    "deadline_s": _NUM,
    "idle_timeout_s": _NUM,
    "atol": _NUM,
    "rtol": _NUM,
    "inputs": list,
    "preprocess": str,
    "calibration": list,
    "dynamic": list,
    "host_check": bool,
    "runner": str,
    "profile": bool,
    "job_timeout_s": _NUM,
    "retries": int,
}

# Keys of [farm] beyond the job settings.
FARM_KEYS: dict[str, type | tuple[type, ...]] = {
    "models": list,
    "backends": list,
    "quantize": list,
    "devices": list,
    "backoff_s": _NUM,
    "backoff_max_s": _NUM,
    "lock_timeout_s": _NUM,
    "cooldown_s": _NUM,
    "jobs_per_device": int,
    "job": list,
    "exclude": list,
    **JOB_SETTING_TYPES,
}

# Keys of a [[farm.job]] entry beyond the job settings.
_ENTRY_KEYS: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "backend": str,
    "quantize": str,
    "device": str,
    "devices": list,
    **JOB_SETTING_TYPES,
}
_EXCLUDE_KEYS = ("model", "backend", "quantize", "device")
_SECTIONS = ("farm", "build", "run", "devices", "limits", "sizecheck")


# -- the spec ------------------------------------------------------------------------------


def job_key(model: str, backend: str, quantize: str | None, device: str) -> str:
    """The stable name of one job: what shards, resume and reports key on."""
    return f"{model}|{backend}|{quantize or NO_QUANT}|{device}"


@dataclass(frozen=True)
class FarmJob:
    """One cell of the matrix: a model built for a backend (and quantization),
    run on one device, with its resolved settings."""

    model: str
    backend: str
    quantize: str | None
    device: str
    # RunJob keyword arguments besides model/device/backend/quantize.
    settings: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    job_timeout_s: float = DEFAULT_JOB_TIMEOUT_S
    retries: int = DEFAULT_RETRIES

    @property
    def key(self) -> str:
        return job_key(self.model, self.backend, self.quantize, self.device)

    @property
    def label(self) -> str:
        variant = f"{self.backend}+{self.quantize}" if self.quantize else self.backend
        return f"{self.model}[{variant}] on {self.device}"

    def run_job(self) -> Any:
        """The pipeline's RunJob (its checks run here: bad values fail at parse time)."""
        from etdeploy.pipeline import RunJob

        return RunJob(
            model=self.model, device=self.device, backend=self.backend,
            quantize=self.quantize, **self.settings,
        )  # fmt: skip

    def key_json(self) -> dict[str, str | None]:
        """The key as the report package spells it (etdeploy.report.JobKey)."""
        return {"model": self.model, "backend": self.backend,
                "quantization": self.quantize, "device": self.device}  # fmt: skip


@dataclass(frozen=True)
class FarmSpec:
    path: Path
    # Devices, [run]/[build] defaults, size limits: what etdeploy.toml would hold.
    config: Config
    jobs: tuple[FarmJob, ...]
    backoff_s: float = DEFAULT_BACKOFF_S
    backoff_max_s: float = DEFAULT_BACKOFF_MAX_S
    lock_timeout_s: float = float(RUN_DEFAULTS["lock_timeout_s"])
    jobs_per_device: int = 1
    # A pause on a device after each of its jobs, so a phone that heated up and
    # throttled under one job does not slow the next one's latency figures.
    cooldown_s: float = 0.0

    @property
    def devices(self) -> list[str]:
        return list(dict.fromkeys(job.device for job in self.jobs))


def load_farm_spec(path: Path) -> FarmSpec:
    """Read and check a farm spec; a bad key or value is a UsageError naming it."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"farm spec not found: {path}", "give the path of a farm .toml file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(
            f"{path.name}: not valid TOML: {exc}", "fix the syntax at that line"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}", "check the file") from None
    return parse_farm_spec(data, path.resolve())


def parse_farm_spec(data: Mapping[str, Any], path: Path) -> FarmSpec:
    label = path.name
    for key in data:
        if key not in _SECTIONS:
            raise UsageError(
                f"{label}: unknown section [{key}]", f"a farm spec has: {', '.join(_SECTIONS)}"
            )
    farm = data.get("farm")
    if not isinstance(farm, dict):
        raise UsageError(
            f"{label}: no [farm] table", "add [farm] with models = [...] and devices = [...]"
        )
    # Devices and defaults are etdeploy.toml's tables, read by its own parser.
    config = parse_config({k: v for k, v in data.items() if k != "farm"}, path)
    _check_device_tables(config, label)
    for key, value in farm.items():
        if key not in FARM_KEYS:
            raise UsageError(
                f"{label}: unknown key farm.{key}", f"keys of [farm]: {', '.join(FARM_KEYS)}"
            )
        _expect(value, FARM_KEYS[key], f"farm.{key}", label)

    _check_settings(config.run, "run.", label)
    _check_settings(farm, "farm.", label)
    base = _base_settings(config)
    base.update({k: v for k, v in farm.items() if k in JOB_SETTING_TYPES})
    default_backend = str(config.build.get("backend", RUN_DEFAULTS["backend"]))
    default_quant = config.build.get("quantize") or NO_QUANT
    backends = _strings(farm.get("backends", [default_backend]), "farm.backends", label)
    quantize = _strings(farm.get("quantize", [default_quant]), "farm.quantize", label)
    devices = _strings(farm.get("devices", []), "farm.devices", label)
    for i, backend in enumerate(backends):
        _check_backend(backend, f"farm.backends[{i}]", label)
    quants = [_quant(q, f"farm.quantize[{i}]", label) for i, q in enumerate(quantize)]
    excludes = _excludes(farm.get("exclude", []), label)
    if farm.get("models") and not devices:
        raise UsageError(
            f"{label}: farm.models is given but farm.devices is not", "list the devices to run on"
        )

    jobs: dict[str, FarmJob] = {}
    models = farm.get("models", [])
    for m, entry in enumerate(models):
        where = f"farm.models[{m}]"
        model, overrides = _model_entry(entry, where, label, path.parent)
        for backend in backends:
            for quant in quants:
                for device in devices:
                    if any(_excluded(rule, model, backend, quant, device) for rule in excludes):
                        continue
                    job = _make_job(
                        model, backend, quant, device, {**base, **overrides}, where, label
                    )
                    jobs.setdefault(job.key, job)
    explicit: dict[str, str] = {}
    for j, entry in enumerate(farm.get("job", [])):
        where = f"farm.job[{j}]"
        for job in _explicit_jobs(entry, where, label, path.parent, base, devices, default_backend):
            if job.key in explicit:
                raise UsageError(
                    f"{label}: {where} repeats {explicit[job.key]} ({job.label})",
                    "give each model, backend, quantization and device once",
                )
            explicit[job.key] = where
            jobs[job.key] = job  # an explicit entry overrides the matrix's cell
    if not jobs:
        raise UsageError(
            f"{label}: the matrix is empty",
            "list farm.models and farm.devices, or add [[farm.job]] entries",
        )
    jobs_per_device = farm.get("jobs_per_device", 1)
    if jobs_per_device < 1:
        raise UsageError(f"{label}: farm.jobs_per_device: must be at least 1, got {jobs_per_device}",
                         f"fix farm.jobs_per_device in {label}")  # fmt: skip
    for key in ("backoff_s", "backoff_max_s", "lock_timeout_s", "cooldown_s"):
        if key in farm and farm[key] < 0:
            raise UsageError(
                f"{label}: farm.{key}: must not be negative, got {farm[key]}",
                f"fix farm.{key} in {label}",
            )
    return FarmSpec(
        path=path,
        config=config,
        jobs=tuple(jobs.values()),
        backoff_s=float(farm.get("backoff_s", DEFAULT_BACKOFF_S)),
        backoff_max_s=float(farm.get("backoff_max_s", DEFAULT_BACKOFF_MAX_S)),
        lock_timeout_s=float(
            farm.get(
                "lock_timeout_s", config.run.get("lock_timeout_s", RUN_DEFAULTS["lock_timeout_s"])
            )
        ),
        jobs_per_device=int(jobs_per_device),
        cooldown_s=float(farm.get("cooldown_s", 0.0)),
    )


def _check_device_tables(config: Config, label: str) -> None:
    """Each [devices.NAME] table's keys and values, as its transport reads them,
    without connecting: a typo fails the spec, not every job on that device."""
    from etdeploy.devices.registry import ADB_KEYS, COMMON_KEYS, LOCAL_KEYS, adb_settings

    for name, device in config.devices.items():
        where = f"{label}: devices.{name}"
        table = {k: v for k, v in device.settings.items() if k not in COMMON_KEYS}
        runner = device.settings.get("runner")
        if runner is not None and not isinstance(runner, str):
            raise UsageError(
                f"{where}.runner: expected str, got {runner!r}", "give the runner's path"
            )
        if device.transport in ("adb", "local"):
            allowed = ADB_KEYS if device.transport == "adb" else LOCAL_KEYS
            unknown = sorted(set(table) - set(allowed))
            if unknown:
                raise UsageError(
                    f"{where}.{unknown[0]}: unknown key",
                    f"{device.transport} devices take: {', '.join((*allowed, *COMMON_KEYS))}",
                )
            if device.transport == "adb":
                adb_settings(table, where=where)
        elif device.transport == "ssh":
            from etdeploy.devices.ssh import SshSettings

            SshSettings.from_mapping(table, where=where)
        elif device.transport == "ios-simulator":
            from etdeploy.devices.simulator import SimulatorSettings

            SimulatorSettings.from_mapping(table, where=where)


def _base_settings(config: Config) -> dict[str, Any]:
    """[run] and [build] of the spec over etdeploy run's defaults (the same merge
    `etdeploy run` makes), as job settings."""
    return {k: v for k, v in run_settings(config).items() if k in JOB_SETTING_TYPES}


# The smallest value each numeric job setting may take, and whether it is excluded.
_MINIMUM: dict[str, tuple[float, bool]] = {
    "iterations": (1, False), "warmup": (0, False), "deadline_s": (0, True),
    "idle_timeout_s": (0, True), "atol": (0, False), "rtol": (0, False),
    "job_timeout_s": (0, True), "retries": (0, False),
}  # fmt: skip


def _check_settings(settings: Mapping[str, Any], prefix: str, label: str) -> None:
    """Ranges of the job settings a table gives, named where they are written."""
    for key, (low, exclusive) in _MINIMUM.items():
        value = settings.get(key)
        if value is None or isinstance(value, bool) or not isinstance(value, _NUM):
            continue
        if value < low or (exclusive and value == low):
            bound = f"greater than {low:g}" if exclusive else f"at least {low:g}"
            raise UsageError(
                f"{label}: {prefix}{key}: must be {bound}, got {value!r}",
                f"fix {prefix}{key} in {label}",
            )


def _expect(value: Any, expected: type | tuple[type, ...], key: str, label: str) -> None:
    # bool is an int in Python; a boolean where a number belongs is a mistake.
    ok = False if isinstance(value, bool) and expected is not bool else isinstance(value, expected)
    if not ok:
        names = (
            expected.__name__
            if isinstance(expected, type)
            else " or ".join(t.__name__ for t in expected)
        )
        shown = "a table" if isinstance(value, dict) else repr(value)
        raise UsageError(f"{label}: {key}: expected {names}, got {shown}", f"fix {key} in {label}")


def _strings(values: list[Any], key: str, label: str) -> list[str]:
    for i, value in enumerate(values):
        _expect(value, str, f"{key}[{i}]", label)
    if len(set(values)) != len(values):
        raise UsageError(f"{label}: {key} lists a value twice", f"list each once in {key}")
    return list(values)


def _check_backend(name: str, key: str, label: str) -> None:
    from etdeploy.builder.backends import get_backend

    try:
        get_backend(name)
    except UsageError as exc:
        raise UsageError(f"{label}: {key}: {exc.message}", exc.hint) from None


def _quant(value: str, key: str, label: str) -> str | None:
    from etdeploy.builder.quantize import MODES

    if value == NO_QUANT:
        return None
    if value not in MODES:
        raise UsageError(
            f"{label}: {key}: unknown quantization {value!r}",
            f'use "{NO_QUANT}" (the float build) or one of: {", ".join(MODES)}',
        )
    return value


def _model_entry(entry: Any, where: str, label: str, base_dir: Path) -> tuple[str, dict[str, Any]]:
    """A models[] item: "ref", or {model = "ref", <job settings>...}."""
    if isinstance(entry, str):
        model, overrides = entry, {}
    elif isinstance(entry, dict):
        for key, value in entry.items():
            if key != "model" and key not in JOB_SETTING_TYPES:
                raise UsageError(
                    f"{label}: unknown key {where}.{key}",
                    f"a model entry takes model and: {', '.join(JOB_SETTING_TYPES)}",
                )
            _expect(
                value, str if key == "model" else JOB_SETTING_TYPES[key], f"{where}.{key}", label
            )
        if "model" not in entry:
            raise UsageError(
                f"{label}: {where}: model is required", 'add model = "file.py:factory"'
            )
        model = entry["model"]
        overrides = {k: v for k, v in entry.items() if k != "model"}
        _check_settings(overrides, f"{where}.", label)
    else:
        raise UsageError(
            f"{label}: {where}: expected a model reference or a table, got {entry!r}",
            'write "file.py:factory", or {model = "file.py:factory", inputs = [...]}',
        )
    _check_model_ref(model, f"{where}", label, base_dir)
    return model, overrides


def _check_model_ref(model: str, where: str, label: str, base_dir: Path) -> None:
    """A file reference must exist (relative paths are relative to the spec): caught
    here, before any device is touched, rather than once per device."""
    if model.endswith(".pt2"):
        location = model
    else:
        location, sep, _factory = model.rpartition(":")
        if not sep or not location.endswith(".py"):
            return  # an example or a module: the worker's loader checks it
    path = Path(location).expanduser()
    if not (path if path.is_absolute() else base_dir / path).is_file():
        raise UsageError(
            f"{label}: {where}: model file not found: {location}",
            f"paths in a farm spec are relative to its folder ({base_dir})",
        )


def _explicit_jobs(
    entry: Any,
    where: str,
    label: str,
    base_dir: Path,
    base: dict[str, Any],
    farm_devices: list[str],
    default_backend: str,
) -> list[FarmJob]:
    if not isinstance(entry, dict):
        raise UsageError(
            f"{label}: {where}: expected a table", "write [[farm.job]] with keys below it"
        )
    for key, value in entry.items():
        if key not in _ENTRY_KEYS:
            raise UsageError(
                f"{label}: unknown key {where}.{key}",
                f"keys of [[farm.job]]: {', '.join(_ENTRY_KEYS)}",
            )
        _expect(value, _ENTRY_KEYS[key], f"{where}.{key}", label)
    _check_settings(entry, f"{where}.", label)
    if "model" not in entry:
        raise UsageError(f"{label}: {where}: model is required", 'add model = "file.py:factory"')
    if "device" in entry and "devices" in entry:
        raise UsageError(f"{label}: {where}: both device and devices given", "give one of them")
    _check_model_ref(entry["model"], f"{where}.model", label, base_dir)
    backend = entry.get("backend", default_backend)
    _check_backend(backend, f"{where}.backend", label)
    quant = _quant(entry.get("quantize", NO_QUANT), f"{where}.quantize", label)
    if "device" in entry:
        devices = [entry["device"]]
    else:
        devices = _strings(entry.get("devices", farm_devices), f"{where}.devices", label)
    if not devices:
        raise UsageError(
            f"{label}: {where}: no devices", 'give device = "NAME", or list farm.devices'
        )
    settings = {**base, **{k: v for k, v in entry.items() if k in JOB_SETTING_TYPES}}
    return [_make_job(entry["model"], backend, quant, d, settings, where, label) for d in devices]


def _make_job(
    model: str, backend: str, quant: str | None, device: str,
    settings: Mapping[str, Any], where: str, label: str,
) -> FarmJob:  # fmt: skip
    run_settings = {k: v for k, v in settings.items() if k not in ("job_timeout_s", "retries")}
    for key in ("inputs", "calibration", "dynamic"):
        if key in run_settings:
            items = run_settings[key]
            for i, item in enumerate(items):
                _expect(item, str, f"{where}.{key}[{i}]", label)
            run_settings[key] = tuple(items)
    if "runner" in run_settings:
        run_settings["runner"] = Path(run_settings["runner"])
    for key in ("deadline_s", "idle_timeout_s", "atol", "rtol"):
        if key in run_settings:
            run_settings[key] = float(run_settings[key])
    timeout = float(settings.get("job_timeout_s", DEFAULT_JOB_TIMEOUT_S))
    retries = int(settings.get("retries", DEFAULT_RETRIES))
    job = FarmJob(model, backend, quant, device, run_settings, timeout, retries)
    try:
        job.run_job()
    except UsageError as exc:
        raise UsageError(f"{label}: {where}: {exc.message}", exc.hint) from None
    return job


def _excludes(rules: list[Any], label: str) -> list[dict[str, list[str]]]:
    parsed = []
    for r, rule in enumerate(rules):
        where = f"farm.exclude[{r}]"
        if not isinstance(rule, dict) or not rule:
            raise UsageError(
                f"{label}: {where}: expected a table of model/backend/quantize/device",
                'write [[farm.exclude]] with e.g. backend = "coreml" and device = "pixel8"',
            )
        entry: dict[str, list[str]] = {}
        for key, value in rule.items():
            if key not in _EXCLUDE_KEYS:
                raise UsageError(
                    f"{label}: unknown key {where}.{key}",
                    f"keys of [[farm.exclude]]: {', '.join(_EXCLUDE_KEYS)}",
                )
            values = [value] if isinstance(value, str) else value
            if not isinstance(values, list):
                raise UsageError(
                    f"{label}: {where}.{key}: expected str or list, got {value!r}",
                    f"fix {where}.{key}",
                )
            entry[key] = _strings(values, f"{where}.{key}", label)
        parsed.append(entry)
    return parsed


def _excluded(
    rule: Mapping[str, list[str]], model: str, backend: str, quant: str | None, device: str
) -> bool:
    actual = {"model": model, "backend": backend, "quantize": quant or NO_QUANT, "device": device}
    return all(actual[key] in values for key, values in rule.items())


# -- shards --------------------------------------------------------------------------------


def shard_of(key: str, count: int) -> int:
    """The shard a job key falls in: sha256, not Python's salted hash(), so every
    host and every run agrees."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % count


def select_shard(jobs: Sequence[FarmJob], index: int, count: int) -> list[FarmJob]:
    if count < 1:
        raise UsageError(f"--shard-count must be at least 1, got {count}")
    if not 0 <= index < count:
        raise UsageError(
            f"--shard-index must be 0 to {count - 1} for {count} shard(s), got {index}",
            "shards are numbered from 0",
        )
    return [job for job in jobs if shard_of(job.key, count) == index]


# -- the results stream ---------------------------------------------------------------------


class ResultsLog:
    """OUT/results.jsonl: one result per line, each flushed and fsynced as written.

    A farm killed mid-write leaves at most a partial last line; opening the log
    cuts it off (after saying so) so the next line starts clean.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.dropped_partial = 0  # bytes of a cut last line removed on open

    def read(self) -> list[dict[str, Any]]:
        """Every complete result in the file; repairs a cut last line."""
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        tail = data[end:]
        results: list[dict[str, Any]] = []
        lines = data[:end].splitlines()
        if tail.strip():
            try:
                json.loads(tail)
                lines.append(tail)  # whole, only its newline missing
                with open(self.path, "ab") as handle:
                    handle.write(b"\n")
            except ValueError:
                self.dropped_partial = len(tail)
                with open(self.path, "r+b") as handle:
                    handle.truncate(end)
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError as exc:
                raise UsageError(
                    f"{self.path}:{number}: not JSON ({exc})",
                    "only a farm killed mid-write damages a results file, and only its last line; "
                    "start over with another --out",
                ) from None
            if isinstance(doc, dict):
                results.append(doc)
        return results

    def append(self, result: dict[str, Any]) -> None:
        line = json.dumps(result, default=str) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())


def result_key(result: Mapping[str, Any]) -> str | None:
    farm = result.get("farm")
    return farm.get("key") if isinstance(farm, dict) else None


# -- running ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FarmEvent:
    """What the farm tells its caller: a job started, will be retried, finished,
    or was skipped (finished by an earlier run)."""

    kind: str  # start | retry | finish | skip
    job: FarmJob
    attempt: int = 0
    result: dict[str, Any] | None = None
    wait_s: float = 0.0


EventCallback = Callable[[FarmEvent], None]


@dataclass
class FarmOutcome:
    spec: FarmSpec
    planned: list[FarmJob]
    # One per planned job that finished (now or in an earlier run), in plan order.
    results: list[dict[str, Any]]
    resumed: int
    started_at: str
    finished_at: str | None
    out_dir: Path
    shard: tuple[int, int]

    @property
    def results_path(self) -> Path:
        return self.out_dir / RESULTS_NAME


class JobTimeout(InfraError):
    """The whole job outran job_timeout_s and its worker was killed."""


class WorkerCrashed(InfraError):
    """The worker process died without writing a result (a crash in native code,
    out of memory, killed from outside)."""


@dataclass(eq=False)
class _Worker:
    process: subprocess.Popen[bytes]
    log: Path


def run_farm(
    spec: FarmSpec,
    out_dir: Path,
    *,
    shard: tuple[int, int] = (0, 1),
    resume: bool = False,
    jobs_per_device: int | None = None,
    on_event: EventCallback | None = None,
) -> FarmOutcome:
    """Run this shard of the matrix; return every result (earlier ones too on --resume).

    Results are appended to OUT/results.jsonl as each job finishes. Raises
    UsageError when OUT holds an earlier run and resume is off, or when another
    farm writes to OUT. KeyboardInterrupt stops the workers (what finished stays).
    """
    import filelock

    planned = select_shard(spec.jobs, *shard)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(out_dir / ".farm.lock"))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        raise UsageError(
            f"another etdeploy farm is writing to {out_dir}",
            "wait for it, or give this one another --out",
        ) from None
    try:
        log = ResultsLog(out_dir / RESULTS_NAME)
        earlier = log.read()
        if earlier and not resume:
            raise UsageError(
                f"{log.path} already holds {len(earlier)} result(s) of an earlier run",
                "pass --resume to finish that run, or give another --out",
            )
        finished: dict[str, dict[str, Any]] = {}
        for result in earlier:
            key = result_key(result)
            if key is not None:
                finished[key] = result  # the last line of a key wins
        emit = on_event or (lambda _event: None)
        todo = [job for job in planned if job.key not in finished]
        for job in planned:
            if job.key in finished:
                emit(FarmEvent("skip", job, result=finished[job.key]))
        started_at = _now()
        runner = _FarmRunner(
            spec, out_dir, log, emit, shard, jobs_per_device or spec.jobs_per_device
        )
        fresh = runner.run(todo)
        results = [fresh.get(job.key) or finished.get(job.key) for job in planned]
        return FarmOutcome(
            spec=spec,
            planned=planned,
            results=[r for r in results if r is not None],
            resumed=sum(1 for job in planned if job.key in finished),
            started_at=started_at,
            finished_at=_now(),
            out_dir=out_dir,
            shard=shard,
        )
    finally:
        lock.release()


class _FarmRunner:
    def __init__(
        self, spec: FarmSpec, out_dir: Path, log: ResultsLog, emit: EventCallback,
        shard: tuple[int, int], slots: int,
    ) -> None:  # fmt: skip
        self.spec = spec
        self.work = out_dir / "work"
        self.log = log
        self.emit = emit
        self.shard = shard
        self.slots = max(1, slots)
        self.stop = threading.Event()
        self.results: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._workers: set[_Worker] = set()

    def run(self, jobs: list[FarmJob]) -> dict[str, dict[str, Any]]:
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
            with self._lock:
                workers = list(self._workers)
            for worker in workers:
                _terminate(worker.process)
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
            try:
                result = self._run_with_retries(job)
            except Exception as exc:  # a bug of ours: the job gets an error, the farm goes on
                result = self._error(job, InfraError(
                    f"internal error in the farm: {type(exc).__name__}: {exc}",
                    "rerun with --verbose and report the traceback", device=job.device,
                ), time.time(), None)  # fmt: skip
                result["attempts"] = []
            if result is None:
                return  # stopped
            self._annotate(job, result)
            self.log.append(result)
            with self._lock:
                self.results[job.key] = result
            self.emit(FarmEvent("finish", job, attempt=len(result["attempts"]), result=result))
            if self.spec.cooldown_s and queue:
                self.stop.wait(self.spec.cooldown_s)

    def _run_with_retries(self, job: FarmJob) -> dict[str, Any] | None:
        attempts: list[dict[str, Any]] = []
        attempt = 0
        while True:
            attempt += 1
            self.emit(FarmEvent("start", job, attempt=attempt))
            started = time.time()
            result = self._attempt(job)
            if result is None:
                return None
            record: dict[str, Any] = {
                "attempt": attempt,
                "job_id": (result.get("job") or {}).get("id"),
                "status": result.get("status"),
                "started_at": _now(started),
                "seconds": round(time.time() - started, 3),
            }
            if result.get("error"):
                error = result["error"]
                record["error"] = {
                    k: error.get(k)
                    for k in ("kind", "message", "infrastructure", "retryable", "device")
                }
            attempts.append(record)
            if not _retryable(result) or attempt > job.retries:
                result["attempts"] = attempts
                return result
            wait = min(self.spec.backoff_max_s, self.spec.backoff_s * 2 ** (attempt - 1))
            record["backoff_s"] = wait
            self.emit(FarmEvent("retry", job, attempt=attempt, result=result, wait_s=wait))
            if self.stop.wait(wait):
                return None

    def _attempt(self, job: FarmJob) -> dict[str, Any] | None:
        """One attempt in its own worker process, killed at job_timeout_s."""
        from etdeploy.pipeline import new_job_id

        job_id = new_job_id()
        folder = self.work / job_id
        folder.mkdir(parents=True, exist_ok=True)
        request = {
            "spec": str(self.spec.path),
            "device": job.device,
            "job": _run_job_to_json(job.run_job()),
            "job_id": job_id,
            "lock_timeout_s": self.spec.lock_timeout_s,
            "parent_pid": os.getpid(),
        }
        (folder / "request.json").write_text(json.dumps(request, indent=2))
        result_path = folder / "result.json"
        log_path = folder / "worker.log"
        started = time.time()
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, str(folder / "request.json"), str(result_path)],
                cwd=self.spec.path.parent, env=_worker_env(), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT,
                # Its own process group: the timeout's signals reach the worker and what
                # shares its group, and a Ctrl-C meant for the farm does not reach it.
                start_new_session=True,
            )  # fmt: skip
        worker = _Worker(process, log_path)
        with self._lock:
            self._workers.add(worker)
        try:
            deadline = time.monotonic() + job.job_timeout_s
            while True:
                if self.stop.is_set():
                    _terminate(process)
                    return None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    _terminate(process)
                    return self._error(job, JobTimeout(
                        f"job timed out after {job.job_timeout_s:g} s (job_timeout_s); its worker was stopped",
                        "raise job_timeout_s for this job, or look at the device: the log says "
                        "what the job was doing", device=job.device,
                        log=_tail(log_path),
                    ), started, job_id)  # fmt: skip
                try:
                    process.wait(timeout=min(0.5, remaining))
                    break
                except subprocess.TimeoutExpired:
                    continue
        finally:
            with self._lock:
                self._workers.discard(worker)
        try:
            result = json.loads(result_path.read_text())
        except (OSError, ValueError):
            code = process.returncode
            how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
            return self._error(job, WorkerCrashed(
                f"the job's worker process {how} without a result",
                "the log holds its last words; rerun the job with `etdeploy run -v` to see more",
                device=job.device, log=_tail(log_path),
            ), started, job_id)  # fmt: skip
        # The result is in results.jsonl now; the worker's log stays beside it.
        for name in ("request.json", "result.json"):
            (folder / name).unlink(missing_ok=True)
        return result

    def _error(
        self, job: FarmJob, exc: EtdeployError, started: float, job_id: str | None
    ) -> dict[str, Any]:
        from etdeploy.pipeline import error_result

        return error_result(job.run_job(), job.device, exc, started, job_id)

    def _annotate(self, job: FarmJob, result: dict[str, Any]) -> None:
        # An error result has no artifact block: the job block names what was to be
        # built, so reports (etdeploy.report.job_key) key it like a result that ran.
        block = result.setdefault("job", {})
        block.setdefault("backend", job.backend)
        block.setdefault("quantization", job.quantize)
        result.setdefault("device", {}).setdefault("name", job.device)
        result["farm"] = {
            "key": job.key,
            "shard": {"index": self.shard[0], "count": self.shard[1]},
            "spec": str(self.spec.path),
        }


def _retryable(result: Mapping[str, Any]) -> bool:
    error = result.get("error") or {}
    return (
        result.get("status") == "error"
        and bool(error.get("infrastructure"))
        and bool(error.get("retryable"))
    )


def _terminate(process: subprocess.Popen[bytes]) -> None:
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


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    # The worker runs in the spec's folder; make sure it imports this etdeploy.
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


def _now(when: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def exit_code(results: Sequence[Mapping[str, Any]], regressions: Sequence[Any] = ()) -> int:
    """0 every job passed; 1 a job failed a check (numerics, size, or a regression
    against the baseline); else 2 a job had bad input; else 3 only infrastructure
    errors. A failed check outranks errors: it is the news a nightly run exists for."""
    statuses = [r.get("status") for r in results]
    if "failed" in statuses or regressions:
        return EXIT_CHECK_FAILED
    errors = [r for r in results if r.get("status") == "error"]
    if any(not (r.get("error") or {}).get("infrastructure") for r in errors):
        return EXIT_BAD_INPUT
    if errors:
        return EXIT_INFRA
    return EXIT_OK


# -- reports ---------------------------------------------------------------------------------


def write_reports(
    outcome: FarmOutcome,
    *,
    json_path: Path | None = None,
    junit_path: Path | None = None,
    html_path: Path | None = None,
    baseline_path: Path | None = None,
) -> list[Any]:
    """OUT/farm.json always, and the reports asked for; returns the regressions
    against the baseline (empty without one)."""
    from etdeploy.report import (
        compare_to_baseline,
        farm_document,
        load_results,
        write_html,
        write_json,
        write_junit,
    )

    baseline = load_results(baseline_path) if baseline_path is not None else None
    regressions = compare_to_baseline(outcome.results, baseline) if baseline is not None else []
    doc = farm_document(
        outcome.results,
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
        matrix=[job.key_json() for job in outcome.planned],
    )
    doc["shard"] = {"index": outcome.shard[0], "count": outcome.shard[1]}
    doc["spec"] = str(outcome.spec.path)
    write_json(doc, outcome.out_dir / FARM_DOC_NAME)
    if json_path is not None:
        write_json(doc, json_path)
    if junit_path is not None:
        write_junit(outcome.results, junit_path, regressions=regressions)
    if html_path is not None:
        write_html(outcome.results, html_path, baseline=baseline, regressions=regressions)
    return regressions


# -- the worker: one attempt in its own process ---------------------------------------------------

_WORKER_CODE = (
    "import sys; from etdeploy.farm import worker_main; sys.exit(worker_main(sys.argv[1:]))"
)

# RunJob fields that are paths or tuples in the dataclass and lists/strings in JSON.
_PATH_FIELDS = ("pte", "reference", "runner")
_TUPLE_FIELDS = ("calibration", "dynamic", "inputs")


def _run_job_to_json(job: Any) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(job):
        value = getattr(job, f.name)
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def _run_job_from_json(data: Mapping[str, Any]) -> Any:
    from etdeploy.pipeline import RunJob

    values = dict(data)
    for name in _PATH_FIELDS:
        if values.get(name) is not None:
            values[name] = Path(values[name])
    for name in _TUPLE_FIELDS:
        if name in values:
            values[name] = tuple(values[name])
    return RunJob(**values)


class _Terminated(BaseException):
    """SIGTERM from the farm: unwind (releasing the device lock), then exit."""


def worker_main(argv: Sequence[str]) -> int:
    """Run one job attempt: REQUEST.json in, RESULT.json out (etdeploy.result/1,
    "error" when it raised). The exit code is 0 whenever a result was written."""
    request_path, result_path = Path(argv[0]), Path(argv[1])
    request = json.loads(request_path.read_text())

    def on_term(_signum: int, _frame: Any) -> None:
        raise _Terminated

    signal.signal(signal.SIGTERM, on_term)
    _watch_parent(int(request["parent_pid"]))

    from etdeploy.devices.registry import open_device
    from etdeploy.pipeline import RunContext, error_result, run_job, write_result_json

    job = _run_job_from_json(request["job"])
    device_name, job_id = request["device"], request["job_id"]
    started = time.time()

    def say(text: str) -> None:
        # The worker's log: after a timeout, its last line says where the job was.
        print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)

    try:
        spec = load_farm_spec(Path(request["spec"]))
        say(f"opening {device_name}")
        device = open_device(
            device_name, spec.config, lock_timeout_s=float(request["lock_timeout_s"])
        )
        with device:
            result = run_job(
                job, device, RunContext(status=say, size_config=spec.config), job_id=job_id
            )
    except EtdeployError as exc:
        say(f"error: {exc}")
        result = error_result(job, device_name, exc, started, job_id)
    except _Terminated:
        say("stopped by the farm")
        return 143
    except Exception as exc:  # a bug: kept as this job's error, with the trace
        import traceback

        wrapped = InfraError(
            f"internal error: {type(exc).__name__}: {exc}",
            "report the traceback in the log",
            device=device_name,
            log=traceback.format_exc(),
        )
        result = error_result(job, device_name, wrapped, started, job_id)
    say(f"done: {result['status']}")
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
