"""The settings of a run of a job bundle: the bundle's own, the machine's, the flags.

Each setting's Option says what a bundle does with it (etdeploy.settings scopes):
- JOB settings (iterations, warm-up, deadline, tolerances, output kinds...) come from
  the bundle, as it was made: the same verdict wherever it runs. A flag still wins
  (`--iterations 50`), as it would over etdeploy.toml; this machine's etdeploy.toml
  does not, since it was written for its own runs, not for this job;
- MACHINE settings (the device, a runner, the lock timeout, --keep) come from this
  machine's etdeploy.toml and the flags, never from the bundle;
- BUILD settings were spent making the bundle (the build, the inputs, the
  references): given as a flag with --bundle they are an error naming the flag, and
  the backend and quantization are taken from the bundle, for the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from etdeploy.bundle.manifest import read_bundle_manifest
from etdeploy.errors import UsageError
from etdeploy.pipeline.job import RunJob
from etdeploy.settings import BUILD, JOB, MACHINE, Declared, declared, layered

# Recorded build settings a bundle's job keeps: what its results say was built.
_RECORDED = ("backend", "quantize")


def bundle_job(
    path: Path,
    model: str | None,
    machine_values: Mapping[str, Any],
    flags: Mapping[str, Any],
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


def farm_bundle_job(path: Path, device: str, settings: Mapping[str, Any]) -> RunJob:
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
