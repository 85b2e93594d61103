"""A farm spec: the TOML file that names a matrix of models x backends x
quantization x devices, read into a FarmSpec of FarmJobs.

The spec names the matrix in [farm] and the devices in the same [devices.NAME]
tables etdeploy.toml takes (see FARM_KEYS and the README):

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

    [[farm.job]]                         # a job bundle (etdeploy bundle): no build, no torch
    model = "digits"                     # its name in keys and reports
    bundle = "jobs/digits"               # the bundle's folder, relative to the spec
    devices = ["pixel8"]

    [farm.sources.stf]                   # phones claimed from STF/DeviceFarmer for the run
    url = "https://stf.example.org"
    devices = ["stf-pixel"]              # names farm.devices may list (etdeploy.farm.sources)

    [devices.pixel8]
    transport = "adb"
    serial = "..."

A job's settings are, in order of precedence: a [[farm.job]] entry, a model entry
of farm.models, [farm], the spec's [run] and [build], etdeploy run's defaults.
Each job has a stable key, `model|backend|quant|device`, that shards, resume and
reports key on. A models entry or [[farm.job]] with `bundle = "DIR"` runs that job
bundle: its model names the job, its backend and quantization are the bundle's (it
is not crossed with farm.backends and farm.quantize), its settings are the bundle's
under the spec's (those spent on making a bundle, such as inputs, do not apply), and
neither torch nor executorch is needed to run it. Every value is checked here (etdeploy.farm.checks); a bad one is
a UsageError naming its key. A cell of the matrix that cannot run (int8 crossed
with a backend that has no quantizer: etdeploy.farm.checks.cannot_run) is not a
job but a SkippedJob with its reason, which every report lists; an explicit
[[farm.job]] that cannot run is a UsageError, since someone asked for it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etdeploy import settings
from etdeploy.build_options import ProgramOptions
from etdeploy.bundle.job_bundle import read_bundle_manifest
from etdeploy.config import Config, DeviceConfig, config_settings, parse_config
from etdeploy.declaration import declared, expect_type
from etdeploy.devices.registry import config_label
from etdeploy.errors import UsageError
from etdeploy.farm.checks import (
    NO_QUANT,
    NUMBER,
    cannot_run,
    check_backend,
    check_device_tables,
    check_model_ref,
    check_settings,
    parse_quant,
    strings,
)
from etdeploy.farm.exclude import excluded, parse_excludes
from etdeploy.farm.sources.parse import DeviceSource, check_source_names, parse_sources
from etdeploy.jsonvalue import JsonArray, JsonObject, JsonValue, read_array, read_str
from etdeploy.memory.limit import device_max_memory
from etdeploy.pipeline import RunJob
from etdeploy.pipeline.job import farm_bundle_job
from etdeploy.results.baseline_memory import DEFAULT_MEMORY_GROWTH
from etdeploy.settings import RunSettings

if TYPE_CHECKING:
    from etdeploy.pipeline import RunJob

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib


# The whole attempt, build included: a cold int8 build of a large model takes
# minutes, so the default is generous; nightly specs set their own.
DEFAULT_JOB_TIMEOUT_S = 1800.0
DEFAULT_RETRIES = 2
DEFAULT_BACKOFF_S = 5.0
DEFAULT_BACKOFF_MAX_S = 60.0

# Knobs of one job (RunJob fields, plus how the farm treats the job). [run] in the
# spec, then [farm], then a model entry, then a [[farm.job]] entry may set them.
# What a farm does with a job beyond running it; the job's own settings are
# etdeploy.settings' (those whose Option says farm=True), never listed here.
_FARM_JOB_KEYS: dict[str, type | tuple[type, ...]] = {"job_timeout_s": NUMBER, "retries": int}
JOB_SETTING_TYPES: dict[str, type | tuple[type, ...]] = {
    **{key: entry.toml_type for key, entry in settings.farm_settings().items()},
    **_FARM_JOB_KEYS,
}

# The build options the farm crosses, by the [farm] list that names their values
# (backends, quantize): their declarations say so (etdeploy.build_options), and a
# [[farm.job]] gives one value under the option's own key (backend, quantize).
AXES = {d.option.farm_axis: d for d in declared(ProgramOptions) if d.option.farm_axis}

# Keys of [farm] beyond the job settings.
FARM_KEYS: dict[str, type | tuple[type, ...]] = {
    "models": list,
    **dict.fromkeys(AXES, list),
    "devices": list,
    "backoff_s": NUMBER,
    "backoff_max_s": NUMBER,
    "lock_timeout_s": NUMBER,
    "cooldown_s": NUMBER,
    # Memory growing more than this share over the baseline fails a job (naming the part).
    "memory_growth": NUMBER,
    "jobs_per_device": int,
    "job": list,
    "exclude": list,
    "sources": dict,
    # The farm's history store: a SQLite path (relative to the spec) or a postgresql:// URL.
    "history": str,
    **JOB_SETTING_TYPES,
}

# A job bundle's folder (etdeploy bundle), in a models entry or a [[farm.job]].
BUNDLE_KEY = "bundle"

# Keys of a [[farm.job]] entry beyond the job settings.
_ENTRY_KEYS: dict[str, type | tuple[type, ...]] = {
    "model": str,
    BUNDLE_KEY: str,
    **{entry.key: str for entry in AXES.values()},
    "device": str,
    "devices": list,
    **JOB_SETTING_TYPES,
}
_SECTIONS = ("farm", "build", "run", "verify", "devices", "limits", "sizecheck")


def job_key(model: str, backend: str, quantize: str | None, device: str) -> str:
    """The stable name of one job: what shards, resume and reports key on."""
    return f"{model}|{backend}|{quantize or NO_QUANT}|{device}"


@dataclass(frozen=True)
class MatrixCell:
    """A model built for a backend (and quantization) on one device: what a job and
    a skipped cell share, and what they are keyed and labelled by."""

    model: str
    backend: str
    quantize: str | None
    device: str

    @property
    def key(self) -> str:
        return job_key(self.model, self.backend, self.quantize, self.device)

    @property
    def label(self) -> str:
        variant = f"{self.backend}+{self.quantize}" if self.quantize else self.backend
        return f"{self.model}[{variant}] on {self.device}"

    def key_json(self) -> dict[str, str | None]:
        """The key as the report package spells it (etdeploy.results.JobKey)."""
        return {"model": self.model, "backend": self.backend,
                "quantization": self.quantize, "device": self.device}  # fmt: skip


@dataclass(frozen=True)
class FarmJob(MatrixCell):
    """One cell of the matrix to run, with its resolved settings."""

    # RunJob keyword arguments besides model/device/backend/quantize.
    settings: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    job_timeout_s: float = DEFAULT_JOB_TIMEOUT_S
    retries: int = DEFAULT_RETRIES

    def run_job(self) -> RunJob:
        """The pipeline's RunJob (its checks run here: bad values fail at parse time)."""
        bundle = self.settings.get(BUNDLE_KEY)
        if bundle is not None:
            return farm_bundle_job(Path(bundle), self.device, self.settings)

        return RunJob(
            model=self.model, device=self.device, backend=self.backend,
            quantize=self.quantize, **self.settings,
        )  # fmt: skip


@dataclass(frozen=True)
class SkippedJob(MatrixCell):
    """A cell of the matrix that cannot run, and why: left out before anything
    starts, listed as skipped in every report, never counted against the farm."""

    reason: str


@dataclass(frozen=True)
class FarmSpec:
    """A whole spec: its jobs in spec order, its devices and defaults, and how
    the farm paces them."""

    path: Path
    # Devices, [run]/[build] defaults, size limits: what etdeploy.toml would hold.
    config: Config
    jobs: tuple[FarmJob, ...]
    backoff_s: float = DEFAULT_BACKOFF_S
    backoff_max_s: float = DEFAULT_BACKOFF_MAX_S
    lock_timeout_s: float = RunSettings.lock_timeout_s
    jobs_per_device: int = 1
    # A pause on a device after each of its jobs, so a phone that heated up and
    # throttled under one job does not slow the next one's latency figures.
    cooldown_s: float = 0.0
    # Memory growing more than this share over the baseline fails the job.
    memory_growth: float = DEFAULT_MEMORY_GROWTH
    # Services the run claims devices from ([farm.sources.KIND]).
    sources: tuple[DeviceSource, ...] = ()
    # The tables of the devices claimed for this run (set by the scheduler while
    # it holds them; a worker opens its device with the table given here).
    leased: Mapping[str, DeviceConfig] = field(default_factory=dict, compare=False)
    # Cells of the matrix that cannot run, in spec order (not in `jobs`).
    skipped: tuple[SkippedJob, ...] = ()
    # farm.history: where the nights are kept (etdeploy.history.store); None: the default.
    history: str | None = None

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


def parse_farm_spec(data: Mapping[str, JsonValue], path: Path) -> FarmSpec:
    """The spec of a parsed TOML document; path is where it was read (relative
    model paths are relative to its folder, and errors name its file)."""
    label = path.name
    farm = _farm_table(data, label)
    # Devices and defaults are etdeploy.toml's tables, read by its own parser.
    config = parse_config({k: v for k, v in data.items() if k != "farm"}, path)
    check_device_tables(config, label)
    for key, value in farm.items():
        if key not in FARM_KEYS:
            raise UsageError(
                f"{label}: unknown key farm.{key}", f"keys of [farm]: {', '.join(FARM_KEYS)}"
            )
        expect_type(value, FARM_KEYS[key], f"farm.{key}", label)

    check_settings(farm, "farm.", label)
    sources = parse_sources(farm["sources"], label, path.parent) if "sources" in farm else ()
    check_source_names(sources, config.devices, label)
    matrix = _matrix(farm, config, label, path.parent)
    jobs, skipped = _matrix_jobs(farm.get("models", []), matrix)
    _add_explicit_jobs(farm.get("job", []), matrix, jobs)
    if not jobs:
        if skipped:
            first = next(iter(skipped.values()))
            raise UsageError(
                f"{label}: no cell of the matrix can run ({first.label}: {first.reason})",
                "list a backend and quantization that go together in farm.backends and farm.quantize",
            )
        raise UsageError(
            f"{label}: the matrix is empty",
            "list farm.models and farm.devices, or add [[farm.job]] entries",
        )
    jobs_per_device = farm.get("jobs_per_device", 1)
    if jobs_per_device < 1:
        raise UsageError(f"{label}: farm.jobs_per_device: must be at least 1, got {jobs_per_device}",
                         f"fix farm.jobs_per_device in {label}")  # fmt: skip
    for key in ("backoff_s", "backoff_max_s", "lock_timeout_s", "cooldown_s", "memory_growth"):
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
                "lock_timeout_s",
                config.run.get("lock_timeout_s", settings.defaults()["lock_timeout_s"]),
            )
        ),
        jobs_per_device=int(jobs_per_device),
        cooldown_s=float(farm.get("cooldown_s", 0.0)),
        memory_growth=float(farm.get("memory_growth", DEFAULT_MEMORY_GROWTH)),
        sources=sources,
        skipped=tuple(skipped.values()),
        history=_history_store(farm.get("history"), path.parent),
    )


def _history_store(given: str | None, base_dir: Path) -> str | None:
    """farm.history as the store takes it: a URL as given, a path from the spec's folder."""
    if given is None or "://" in given:
        return given
    return str((base_dir / Path(given).expanduser()).resolve())


def _farm_table(data: Mapping[str, JsonValue], label: str) -> dict[str, Any]:
    """The spec's [farm], once every section is one a spec may have (its values are
    checked against FARM_KEYS' types before they are read)."""
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
    return farm


@dataclass(frozen=True)
class _Matrix:
    """What [farm] crosses, checked, and what every job of the spec starts from."""

    label: str  # the spec's file name, in every error
    base_dir: Path  # relative model and bundle paths are relative to it
    config: Config
    # The spec's [run], [build] and [verify] under [farm]'s job settings.
    base: dict[str, Any]
    default_backend: str
    backends: list[str]
    quants: list[str | None]
    devices: list[str]
    excludes: list[dict[str, list[str]]]


def _matrix(farm: JsonObject, config: Config, label: str, base_dir: Path) -> _Matrix:
    base = _base_settings(config)
    base.update(_job_settings(farm, "farm", label))
    default_backend = read_str(config.build, "backend", ProgramOptions.backend, "build")
    default_quant = read_str(config.build, "quantize", None, "build") or NO_QUANT
    backends = strings(_listed(farm, "backends", [default_backend]), "farm.backends", label)
    quantize = strings(_listed(farm, "quantize", [default_quant]), "farm.quantize", label)
    devices = strings(_listed(farm, "devices", []), "farm.devices", label)
    for i, backend in enumerate(backends):
        check_backend(backend, f"farm.backends[{i}]", label)
    quants = [parse_quant(q, f"farm.quantize[{i}]", label) for i, q in enumerate(quantize)]
    excludes = parse_excludes(_listed(farm, "exclude", []), label)
    if farm.get("models") and not devices:
        raise UsageError(
            f"{label}: farm.models is given but farm.devices is not", "list the devices to run on"
        )
    return _Matrix(
        label, base_dir, config, base, default_backend, backends, quants, devices, excludes
    )


def _listed(table: JsonObject, key: str, default: list[str]) -> JsonArray:
    """A list the table gives (its type checked against FARM_KEYS), else `default`."""
    return read_array(table, key, "farm") if key in table else list(default)


def _matrix_jobs(
    models: JsonArray, matrix: _Matrix
) -> tuple[dict[str, FarmJob], dict[str, SkippedJob]]:
    """Each model crossed with the backends, quantizations and devices (a bundle with
    the one variant it was built as), less what farm.exclude drops; a cell that
    cannot run is skipped with its reason."""
    jobs: dict[str, FarmJob] = {}
    skipped: dict[str, SkippedJob] = {}
    for m, entry in enumerate(models):
        where = f"farm.models[{m}]"
        model, overrides = _model_entry(entry, where, matrix.label, matrix.base_dir)
        variants = [(backend, quant) for backend in matrix.backends for quant in matrix.quants]
        if BUNDLE_KEY in overrides:
            bundle, built_for, quantized = _bundle_of(
                overrides[BUNDLE_KEY], f"{where}.{BUNDLE_KEY}", matrix.label, matrix.base_dir
            )
            overrides[BUNDLE_KEY], variants = bundle, [(built_for, quantized)]
        for backend, quant in variants:
            for device in matrix.devices:
                if any(excluded(rule, model, backend, quant, device) for rule in matrix.excludes):
                    continue
                reason = cannot_run(backend, quant, device, matrix.config)
                if reason is not None:
                    cell = SkippedJob(model, backend, quant, device, reason)
                    skipped.setdefault(cell.key, cell)
                    continue
                job = _make_job(
                    MatrixCell(model, backend, quant, device),
                    {**matrix.base, **overrides},
                    where,
                    matrix,
                )
                jobs.setdefault(job.key, job)
    return jobs, skipped


def _add_explicit_jobs(entries: JsonArray, matrix: _Matrix, jobs: dict[str, FarmJob]) -> None:
    """Each [[farm.job]]'s jobs, over the matrix's cell of the same key; an entry that
    repeats another's job is an error."""
    explicit: dict[str, str] = {}
    for j, entry in enumerate(entries):
        where = f"farm.job[{j}]"
        for job in _explicit_jobs(entry, where, matrix):
            if job.key in explicit:
                raise UsageError(
                    f"{matrix.label}: {where} repeats {explicit[job.key]} ({job.label})",
                    "give each model, backend, quantization and device once",
                )
            explicit[job.key] = where
            jobs[job.key] = job  # an explicit entry overrides the matrix's cell


def _base_settings(config: Config) -> dict[str, Any]:
    """The spec's [run], [build] and [verify] (what etdeploy.toml would give `etdeploy
    run`), as the job settings a farm job takes."""
    names = {entry.name for entry in settings.farm_settings().values()}
    return {name: value for name, value in config_settings(config).items() if name in names}


def _job_settings(table: Mapping[str, JsonValue], where: str, label: str) -> dict[str, Any]:
    """A table's job settings as RunJob fields, plus the farm's own job keys as given.
    Paths stay as written: a worker runs in the spec's folder."""
    own = {key: table[key] for key in _FARM_JOB_KEYS if key in table}
    if "max_memory" in table:
        # A job's own limit, over its device's (etdeploy.memory.limit names where).
        own["max_memory_source"] = f"{label}: {where}.max_memory"
    return {**settings.from_farm_table(table, where, label, None), **own}


def _model_entry(
    entry: JsonValue, where: str, label: str, base_dir: Path
) -> tuple[str, dict[str, Any]]:
    """A models[] item: "ref", or {model = "ref", <job settings>...}."""
    if isinstance(entry, str):
        model, overrides = entry, {}
    elif isinstance(entry, dict):
        for key, value in entry.items():
            if key not in ("model", BUNDLE_KEY) and key not in JOB_SETTING_TYPES:
                raise UsageError(
                    f"{label}: unknown key {where}.{key}",
                    f"a model entry takes model, {BUNDLE_KEY} and: {', '.join(JOB_SETTING_TYPES)}",
                )
            kind = str if key in ("model", BUNDLE_KEY) else JOB_SETTING_TYPES[key]
            expect_type(value, kind, f"{where}.{key}", label)
        if "model" not in entry:
            raise UsageError(
                f"{label}: {where}: model is required", 'add model = "file.py:factory"'
            )
        model = str(entry["model"])  # a string: its type was checked above
        check_settings(entry, f"{where}.", label)
        overrides = _job_settings(entry, where, label)
        if BUNDLE_KEY in entry:
            overrides[BUNDLE_KEY] = entry[BUNDLE_KEY]
    else:
        raise UsageError(
            f"{label}: {where}: expected a model reference or a table, got {entry!r}",
            'write "file.py:factory", or {model = "file.py:factory", inputs = [...]}',
        )
    if BUNDLE_KEY not in overrides:  # with a bundle, the model is the job's name
        check_model_ref(model, f"{where}", label, base_dir)
    return model, overrides


def _explicit_jobs(entry: JsonValue, where: str, matrix: _Matrix) -> list[FarmJob]:
    """A [[farm.job]] entry: one job per device it names (else per farm.devices)."""
    label, base_dir = matrix.label, matrix.base_dir
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
        expect_type(value, _ENTRY_KEYS[key], f"{where}.{key}", label)
    check_settings(entry, f"{where}.", label)
    if "model" not in entry:
        raise UsageError(f"{label}: {where}: model is required", 'add model = "file.py:factory"')
    if "device" in entry and "devices" in entry:
        raise UsageError(f"{label}: {where}: both device and devices given", "give one of them")
    model = str(entry["model"])  # the types of the entry's values were checked above
    merged = {**matrix.base, **_job_settings(entry, where, label)}
    if BUNDLE_KEY in entry:
        bundle, backend, quant = _bundle_of(
            str(entry[BUNDLE_KEY]), f"{where}.{BUNDLE_KEY}", label, base_dir
        )
        for key, value in (("backend", backend), ("quantize", quant or NO_QUANT)):
            if entry.get(key, value) != value:
                raise UsageError(
                    f"{label}: {where}.{key}: the bundle was built with {key} {value}",
                    f"drop {where}.{key}: a bundle's program is built",
                )
        merged[BUNDLE_KEY] = bundle
    else:
        check_model_ref(model, f"{where}.model", label, base_dir)
        backend = read_str(entry, "backend", matrix.default_backend, where)
        check_backend(backend, f"{where}.backend", label)
        quant = parse_quant(
            read_str(entry, "quantize", NO_QUANT, where), f"{where}.quantize", label
        )
    device = read_str(entry, "device", None, where)
    if device is not None:
        devices = [device]
    else:
        listed = read_array(entry, "devices", where) if "devices" in entry else matrix.devices
        devices = strings(listed, f"{where}.devices", label)
    if not devices:
        raise UsageError(
            f"{label}: {where}: no devices", 'give device = "NAME", or list farm.devices'
        )
    for device in devices:
        # Asked for by name: a mistake to say, not a cell to skip quietly.
        reason = cannot_run(backend, quant, device, matrix.config)
        if reason is not None:
            raise UsageError(
                f"{label}: {where}: cannot run on {device}: {reason}",
                f"change {where}'s backend or quantize, or remove the entry",
            )
    return [_make_job(MatrixCell(model, backend, quant, d), merged, where, matrix) for d in devices]


def _bundle_of(
    given: str | Path, where: str, label: str, base_dir: Path
) -> tuple[str, str, str | None]:
    """A job bundle a spec names (relative to its folder): its absolute path, and the
    backend and quantization it was built with (from its recorded settings)."""
    path = Path(given).expanduser()
    path = path if path.is_absolute() else base_dir / path
    try:
        manifest = read_bundle_manifest(path)
    except UsageError as exc:
        raise UsageError(f"{label}: {where}: {exc.message}", exc.hint) from None
    recorded = manifest.settings
    backend = str(recorded.get("backend") or settings.defaults()["backend"])
    quant = recorded.get("quantize")
    return str(path.resolve()), backend, str(quant) if quant else None


def _make_job(cell: MatrixCell, merged: Mapping[str, Any], where: str, matrix: _Matrix) -> FarmJob:
    """A job with its merged settings typed as RunJob takes them; RunJob's own
    checks run here, so a bad value fails the spec, named where it was written."""
    run_settings = {k: v for k, v in merged.items() if k not in _FARM_JOB_KEYS}
    run_settings.update(_memory_limit(merged, cell.device, matrix.config))
    timeout = float(merged.get("job_timeout_s", DEFAULT_JOB_TIMEOUT_S))
    retries = int(merged.get("retries", DEFAULT_RETRIES))
    job = FarmJob(
        cell.model, cell.backend, cell.quantize, cell.device, run_settings, timeout, retries
    )
    try:
        job.run_job()
    except UsageError as exc:
        raise UsageError(f"{matrix.label}: {where}: {exc.message}", exc.hint) from None
    return job


def _memory_limit(merged: Mapping[str, object], device: str, config: Config) -> dict[str, object]:
    """A job's max_memory ([farm], a model entry, [[farm.job]]: it carries where it was
    set), else its device's own, else [run]'s: the job's limit and where it was set."""
    if merged.get("max_memory_source") is not None:
        return {}
    label = config_label(config)
    own = device_max_memory(config.devices, device, label)
    if own is not None:
        return {"max_memory_bytes": own.bytes, "max_memory_source": own.source}
    if merged.get("max_memory_bytes") is not None:
        return {"max_memory_source": f"{label}: run.max_memory"}
    return {}
