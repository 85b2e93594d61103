"""A job bundle as the pipeline's records: the Program, the Staged samples and
references, the host runtime's outputs, and the runner a device gets.

Nothing here imports torch or executorch: the program is read with the torch-free
.pte reader (etdeploy.program.describe_program, given the build manifest the bundle
carries), the tables with numpy. Every file is checked against the size and sha256
bundle.json lists before it is used (a file's digest is recognised by its stat on a
warm run, etdeploy.digests), so a bundle damaged on its way to a farm host is refused
before anything reaches a device.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from etdeploy.builder.manifest import program_record_from_json
from etdeploy.bundle.bundle_manifest import INPUTS_FILE, BundleManifest, read_bundle_manifest
from etdeploy.dataset import Labels
from etdeploy.digests import file_sha256
from etdeploy.errors import EtdeployError, UsageError
from etdeploy.npz import read_npz, table_rows
from etdeploy.program import DataFile, Program, describe_program
from etdeploy.runner_build import RunnerBundle, runner_from_path
from etdeploy.staged import Staged

_HINT = "copy the bundle again whole, or make it again with `etdeploy bundle MODEL -o DIR`"


@dataclass(frozen=True)
class JobBundle:
    """An opened bundle: its folder and its manifest, every listed file checked."""

    path: Path
    manifest: BundleManifest

    def file(self, relative: str) -> Path:
        return self.path / relative


@dataclass(frozen=True)
class Prepared:
    """What the build and stage stages would have returned, read from a bundle."""

    program: Program
    staged: Staged
    # executorch's Python runtime's outputs, computed when the bundle was made with
    # --host-check; None otherwise.
    host_outputs: tuple[tuple[np.ndarray, ...], ...] | None
    runners: tuple[RunnerBundle, ...]


def open_bundle(path: Path) -> JobBundle:
    """The bundle in folder `path`, every file it lists present and unchanged."""
    path = Path(path).expanduser().resolve()
    manifest = read_bundle_manifest(path)
    for relative, entry in manifest.files.items():
        file = path / relative
        try:
            size = file.stat().st_size
        except OSError:
            raise UsageError(f"{path.name}: {relative} is missing", _HINT) from None
        if size != entry.size or file_sha256(file) != entry.sha256:
            raise UsageError(
                f"{path.name}: {relative} is not the file the bundle was made with "
                "(its size or sha256 differs)",
                _HINT,
            )
    return JobBundle(path, manifest)


def prepare(bundle: JobBundle) -> Prepared:
    """The bundle's Program, Staged, host outputs and runners."""
    program = bundle_program(bundle)
    return Prepared(
        program,
        bundle_staged(bundle, len(program.tensor_outputs)),
        _host_outputs(bundle, len(program.tensor_outputs)),
        bundle_runners(bundle),
    )


def bundle_program(bundle: JobBundle) -> Program:
    m = bundle.manifest
    pte = bundle.file(m.pte)
    try:
        built = program_record_from_json(
            json.loads(bundle.file(m.program_manifest).read_text("utf-8"))
        )
    except (OSError, ValueError) as exc:  # ManifestError among them
        where = f"{bundle.path.name}: cannot read {m.program_manifest}"
        raise UsageError(f"{where}: {exc}", _HINT) from None
    data = None
    if m.data is not None:
        entry = m.files[m.data]
        data = DataFile(bundle.file(m.data), entry.sha256, entry.size)
    return describe_program(pte, m.files[m.pte].sha256, built, m.program_warnings, data)


def bundle_staged(bundle: JobBundle, outputs: int) -> Staged:
    m = bundle.manifest
    refs = m.references
    samples = _table(bundle, INPUTS_FILE, "i", len(m.samples), None)
    return Staged(
        sample_names=m.samples,
        samples=samples,
        references=_table(bundle, refs.float, "o", len(m.samples), outputs),
        reference_kind=refs.kind,
        on_noise=m.on_noise,
        warnings=m.staged_warnings,
        quantized=_table(bundle, refs.quantized, "o", len(m.samples), outputs)
        if refs.quantized
        else None,
        quantized_source=refs.quantized_source,
        **_labels(bundle),
    )


def _labels(bundle: JobBundle) -> dict[str, Any]:
    """The samples' labels and their task, when the bundle carries them."""
    relative = bundle.manifest.labels
    if relative is None:
        return {}

    try:
        with np.load(bundle.file(relative), allow_pickle=False) as archive:
            labels = Labels(
                archive["y"], str(archive["source"]), tuple(str(n) for n in archive["names"])
            )
            task = str(archive["task"]) or None
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"{bundle.path.name}: cannot read {relative}: {exc}", _HINT) from None
    return {"labels": labels, "task": task}


def _host_outputs(bundle: JobBundle, outputs: int) -> tuple[tuple[np.ndarray, ...], ...] | None:
    host = bundle.manifest.references.host
    return _table(bundle, host, "o", len(bundle.manifest.samples), outputs) if host else None


def _table(
    bundle: JobBundle, relative: str, letter: str, samples: int, width: int | None
) -> tuple[tuple[np.ndarray, ...], ...]:
    """A table's rows (etdeploy.npz.table_rows); `width` arrays a row (None: as many
    as the file holds). Read in one pass."""
    try:
        return table_rows(read_npz(bundle.file(relative)), letter, samples, width)
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"{bundle.path.name}: cannot read {relative}: {exc}", _HINT) from None


def bundle_runners(bundle: JobBundle) -> tuple[RunnerBundle, ...]:
    runners = []
    for entry in bundle.manifest.runners:
        try:
            runners.append(runner_from_path(bundle.file(entry.directory)))
        except EtdeployError as exc:
            raise UsageError(
                f"{bundle.path.name}: runner {entry.directory}: {exc}", _HINT
            ) from None
    return tuple(runners)
