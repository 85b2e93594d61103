"""resolve: the frozen job a run carries out.

A RunJob is a run's settings (etdeploy.settings.RunSettings: flags over etdeploy.toml
over defaults, each declared once there) plus what one invocation names: the model,
a --pte built elsewhere, a --reference, or a --bundle that carries all of it (its
settings come from the bundle: bundle_job below). Its checks run when it is
made, so a bad value
fails before anything is built. A farm worker receives it as JSON (to_json/from_json).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etdeploy.build_options import CacheChoice
from etdeploy.bundle.job_bundle import read_bundle_manifest
from etdeploy.config import Config, config_settings
from etdeploy.devices.base import ProgressCallback
from etdeploy.errors import UsageError
from etdeploy.jsonvalue import JsonObject
from etdeploy.memory.limit import device_max_memory
from etdeploy.pipeline.shape_points import parse_points
from etdeploy.settings import (
    BUILD,
    INPUTS_PANEL,
    JOB,
    MACHINE,
    MODEL_PANEL,
    Declared,
    RunSettings,
    declared,
    from_flags,
    layered,
    setting,
)

# Called with a short description of what the pipeline is doing now.
StatusCallback = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class RunJob(CacheChoice, RunSettings):
    """Everything one run needs to know: its settings (etdeploy.settings, declared
    there once), whether its build may come from the cache (CacheChoice), and what one
    invocation names. `model` may be None only with both
    `pte` and `reference` (then there is no eager model to compare with), or with a
    `bundle`, which names its own."""

    model: str | None
    # A job bundle (etdeploy bundle): its program, runners, inputs, references and
    # settings; nothing is built and neither torch nor executorch is imported.
    bundle: Path | None = setting(
        None, "Run a job bundle made by `etdeploy bundle` (program, runners, inputs, references, settings): no build, no torch.",
        flags=("--bundle",), metavar="DIR", panel=MODEL_PANEL, scope=MACHINE,
    )  # fmt: skip
    pte: Path | None = setting(
        None, "Run this .pte; MODEL is then only the eager reference.",
        flags=("--pte",), metavar="PATH", panel=MODEL_PANEL, scope=BUILD,
    )  # fmt: skip
    # None: the .ptd its manifest names beside it.
    data: Path | None = setting(
        None, "The external weights (.ptd) of --pte (default: the one its manifest names).",
        flags=("--data",), metavar="PTD", panel=MODEL_PANEL, scope=BUILD,
    )  # fmt: skip
    # >0: that many noise samples; the verdict is labelled as such.
    random_inputs: int = setting(
        0, "Verify on N random samples instead (the verdict says so).",
        flags=("--random",), metavar="N", panel=INPUTS_PANEL, low=0, example="16", scope=BUILD,
    )  # fmt: skip
    reference: Path | None = setting(
        None, "Expected outputs (.npz: s<S>_o<K>) instead of the eager model.",
        flags=("--reference",), metavar="NPZ", panel=INPUTS_PANEL, scope=BUILD,
    )  # fmt: skip
    # Where max_memory_bytes was set ("--max-memory", "etdeploy.toml: devices.pixel8.max_memory"):
    # what the memory verdict names.
    max_memory_source: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bundle is not None:
            return  # bundle_job checked what may go with it
        if self.model is None and (self.pte is None or self.reference is None):
            raise UsageError(
                "no model given",
                "name MODEL (the eager reference), or give both --pte and --reference",
            )
        if self.data is not None and self.pte is None:
            raise UsageError(
                "--data names the weights of a .pte built elsewhere, but no --pte was given",
                "give the pair: --pte model.pte --data model.ptd",
            )
        if self.random_inputs and self.inputs:
            raise UsageError(
                "--random and --inputs both given", "verify on real inputs or on noise, not both"
            )
        if self.localize and self.model is None:
            raise UsageError(
                "--localize needs MODEL: a --pte alone has no graph to tap",
                "name the model the .pte was built from: etdeploy run MODEL --pte FILE --localize",
            )
        if self.shapes:
            parse_points(self.shapes)  # a malformed point fails here; ranges once built
            if self.model is None:
                raise UsageError(
                    "--shapes needs MODEL: the outputs at each point are compared with its eager "
                    "outputs",
                    "name the model the .pte was built from: etdeploy run MODEL --pte FILE --shapes ...",
                )

    @property
    def label(self) -> str:
        return self.model or (self.pte.name if self.pte else "?")

    @classmethod
    def resolve(
        cls, model: str | None, config: Config, flags: Mapping[str, object] | None = None
    ) -> RunJob:
        """The job of `etdeploy run MODEL [flags]`: the flags given over etdeploy.toml
        over the defaults (etdeploy.settings); with --bundle, over the bundle's settings
        (bundle_job). The memory limit has one more layer: a device's own
        [devices.NAME] max_memory lies between the flag and [run]'s (or the bundle's)."""
        given = from_flags(flags or {}, cls)
        if given.get("bundle") is not None:
            job = bundle_job(given["bundle"], model, config_settings(config), given)
            mine = {"device": job.device, "max_memory_bytes": job.max_memory_bytes}
            limit, source = memory_limit(config, mine, given)
            return dataclasses.replace(job, max_memory_bytes=limit, max_memory_source=source)
        values = layered(config_settings(config), given)
        values["max_memory_bytes"], values["max_memory_source"] = memory_limit(
            config, values, given
        )
        return cls(model=model, **values)

    def to_json(self) -> JsonObject:
        """The job as JSON, for a farm's worker process."""
        out: JsonObject = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunJob:
        values = dict(data)
        for f in dataclasses.fields(cls):
            value = values.get(f.name)
            if value is None:
                continue
            if f.name in _PATH_FIELDS and not isinstance(value, Path):
                values[f.name] = Path(value)
            elif isinstance(value, list):
                values[f.name] = tuple(value)
        return cls(**values)


_PATH_FIELDS = ("bundle", "pte", "data", "reference", "runner")


def memory_limit(
    config: Config, values: Mapping[str, object], given: Mapping[str, object]
) -> tuple[int | None, str | None]:
    """The job's max memory (bytes) and where it was set: the flag, else the device's
    own [devices.NAME] max_memory, else [run]'s (in `values`); (None, None) if none is."""
    label = config.path.name if config.path else "etdeploy.toml"
    layered_bytes = values.get("max_memory_bytes")
    chosen = layered_bytes if isinstance(layered_bytes, int) else None
    if "max_memory_bytes" in given:
        return chosen, "--max-memory"
    device = values.get("device")
    own = device_max_memory(config.devices, device if isinstance(device, str) else None, label)
    if own is not None:
        return own.bytes, own.source
    if chosen is not None:
        return chosen, f"{label}: run.max_memory"
    return None, None


def new_job_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


# -- the job of a bundle --------------------------------------------------------------
#
# The settings of a run of a job bundle: the bundle's own, the machine's, the flags.
#
# Each setting's Option says what a bundle does with it (etdeploy.settings scopes):
# - JOB settings (iterations, warm-up, deadline, tolerances, output kinds...) come from
#   the bundle, as it was made: the same verdict wherever it runs. A flag still wins
#   (`--iterations 50`), as it would over etdeploy.toml; this machine's etdeploy.toml
#   does not, since it was written for its own runs, not for this job;
# - MACHINE settings (the device, a runner, the lock timeout, --keep) come from this
#   machine's etdeploy.toml and the flags, never from the bundle;
# - BUILD settings were spent making the bundle (the build, the inputs, the
#   references): given as a flag with --bundle they are an error naming the flag, and
#   the backend and quantization are taken from the bundle, for the record.

# Recorded build settings a bundle's job keeps: what its results say was built.
_RECORDED = ("backend", "quantize")


def bundle_job(
    path: Path,
    model: str | None,
    machine_values: Mapping[str, object],
    flags: Mapping[str, object],
) -> RunJob:
    """The RunJob of `etdeploy run --bundle PATH [flags]`. `machine_values` are this
    machine's etdeploy.toml settings (only its MACHINE ones are used), `flags` the
    field values the flags gave."""
    entries = {entry.name: entry for entry in declared(RunJob)}
    if model is not None:
        raise UsageError(
            f"MODEL ({model}) and --bundle both given: a bundle names its own model",
            f"run it alone: etdeploy run --bundle {path}",
        )
    for name in flags:
        if entries[name].option.scope == BUILD:
            raise UsageError(
                f"{_flag(entries[name])} cannot be used with --bundle: the bundle was made with "
                "its program, inputs and references",
                f"make another bundle with it: etdeploy bundle MODEL {_flag(entries[name])} ... "
                "-o DIR",
            )
    # Here: a run without --bundle does not import its manifest's module (~0.01 s).

    manifest = read_bundle_manifest(Path(path))
    travelled = {}
    for name, value in manifest.settings.items():
        entry = entries.get(name)
        if entry is None:
            continue  # a setting this etdeploy no longer has: the bundle is older
        if entry.option.scope == JOB or name in _RECORDED:
            where = f"{path}: settings.{name}"
            travelled[name] = None if value is None else entry.from_given(value, where)
    machine = {
        name: value
        for name, value in machine_values.items()
        if name in entries and entries[name].option.scope == MACHINE
    }
    bundle_field = {"bundle": Path(path)}
    return RunJob(model=manifest.model, **layered(machine, travelled, flags, bundle_field))


def farm_bundle_job(path: Path, device: str, settings: Mapping[str, object]) -> RunJob:
    """The RunJob of a farm job that names a bundle (etdeploy.farm.spec): the spec's
    job settings act as flags would, except those spent on making a bundle, which a
    spec's [farm] or [run] may set for its other jobs."""
    entries = {entry.name: entry for entry in declared(RunJob)}
    given = {
        name: value
        for name, value in settings.items()
        if name != "bundle" and name in entries and entries[name].option.scope != BUILD
    }
    return bundle_job(path, None, {}, {**given, "device": device})


def _flag(entry: Declared) -> str:
    return entry.flag or entry.name


@dataclass(frozen=True)
class RunContext:
    """What the CLI or farm hands the pipeline besides the job."""

    status: StatusCallback | None = None
    progress: ProgressCallback | None = None  # for transfers
    size_config: Config | None = None  # etdeploy.toml for the size verdict
    # The runner the device's [devices.NAME] table names (registry.configured_runner),
    # used unless the job names one (--runner).
    device_runner: Path | None = None
