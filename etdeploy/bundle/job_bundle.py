"""A job bundle: what it holds, its bundle.json (the typed manifest), and a bundle
opened as a run's records.

    JOB/bundle.json                  this manifest (BUNDLE_SCHEMA)
    JOB/program/MODEL.pte            the program, its build manifest (.pte.json), its .ptd
    JOB/runners/ABI-KIND/            a runner bundle per ABI, as runner_build made it
    JOB/inputs.npz                   the staged samples: i<K>, input K of every sample
                                     stacked (s<S>_i<K> a sample's, when shapes differ)
    JOB/references/float.npz         the float eager outputs: o<K> (or s<S>_o<K>)
    JOB/references/quantized.npz     for a quantized build, the quantized eager outputs
    JOB/references/host.npz          with --host-check, executorch's Python runtime's
    JOB/labels.npz                   the samples' labels (y), their class names, where they
                                     were read and the task they score, when they have them
    JOB/language_model/              a language model's case, references and tokens' texts
                                     (etdeploy.pipeline.llm.bundle), in place of inputs.npz

Every file but bundle.json is listed in `files` with its size and sha256, so a bundle
copied between machines (a farm host, AWS Device Farm) is checked whole before it runs.

Opened (open_bundle: every listed file present and unchanged, a file's digest
recognised by its stat on a warm run, etdeploy.digests), a bundle is one more source
of a run's program beside a build and a --pte: its Program, Staged samples and
references, the host runtime's outputs and runners (prepare). Nothing here imports
torch or executorch: the program is read with the torch-free .pte reader
(etdeploy.program.describe_program, given the build manifest the bundle carries), the
tables with numpy, imported where they are read, so that the manifest's own readers
(pipeline.job, farm.spec) load no numpy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etdeploy.builder.manifest import program_record_from_json
from etdeploy.digests import file_sha256
from etdeploy.errors import EtdeployError, UsageError
from etdeploy.program import DataFile, Program, describe_program
from etdeploy.runner_build import RunnerBundle, runner_from_path

if TYPE_CHECKING:
    import numpy as np

    from etdeploy.staged import Staged

BUNDLE_FILE = "bundle.json"
BUNDLE_SCHEMA = "etdeploy.job_bundle/2"
# /1 kept every array a sample's own (s<S>_i<K>); /2 stacks a static model's (etdeploy.npz.table_arrays).
READABLE_SCHEMAS = ("etdeploy.job_bundle/1", BUNDLE_SCHEMA)
PROGRAM_DIR = "program"
RUNNERS_DIR = "runners"
INPUTS_FILE = "inputs.npz"
REFERENCES_DIR = "references"
LABELS_FILE = "labels.npz"

_HINT = "make it again with `etdeploy bundle MODEL -o DIR`"
# A listed file missing or changed: the bundle was damaged on its way here.
_DAMAGED_HINT = "copy the bundle again whole, or make it again with `etdeploy bundle MODEL -o DIR`"


@dataclass(frozen=True)
class FileEntry:
    """One file of the bundle, by its path relative to the bundle's folder."""

    size: int
    sha256: str


@dataclass(frozen=True)
class RunnerEntry:
    """A runner bundle the job carries: what runner_build recorded of it, and where."""

    abi: str
    kind: str
    directory: str  # relative to the bundle's folder


@dataclass(frozen=True)
class References:
    """The expected outputs' tables, each a file relative to the bundle's folder."""

    kind: str  # "eager" (the float eager model) or "file" (a --reference given)
    float: str
    quantized: str | None = None
    host: str | None = None
    # Where the quantized program came from, as the verdict says it (the build's own,
    # or derived from MODEL for a .pte built elsewhere).
    quantized_source: str | None = None


@dataclass(frozen=True)
class BundleManifest:
    """bundle.json: everything `etdeploy run --bundle` needs to know of a job."""

    model: str  # the model reference the job was made from (its label in reports)
    pte: str
    program_manifest: str
    data: str | None
    runners: tuple[RunnerEntry, ...]
    samples: tuple[str, ...]  # the samples' names, in order
    on_noise: bool
    references: References
    # The job's settings (etdeploy.settings.RunSettings fields, scope JOB and BUILD;
    # MACHINE settings never travel): etdeploy.pipeline.job.bundle_job applies them.
    settings: Mapping[str, Any]
    # What the build and the staging warned about, said again where it runs.
    program_warnings: tuple[str, ...] = ()
    staged_warnings: tuple[str, ...] = ()
    # The file of the samples' labels (LABELS_FILE), when they have them.
    labels: str | None = None
    # A language model's case (etdeploy.pipeline.llm.bundle.LM_SCHEMA), when the job is
    # one: its prompts, references and tokens, generated on the device, not run once.
    language_model: str | None = None
    files: Mapping[str, FileEntry] = field(default_factory=dict)
    etdeploy: str = ""
    created: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": BUNDLE_SCHEMA,
            "etdeploy": self.etdeploy,
            "created": self.created,
            "model": self.model,
            "program": {"pte": self.pte, "manifest": self.program_manifest, "data": self.data},
            "runners": [
                {"abi": r.abi, "kind": r.kind, "directory": r.directory} for r in self.runners
            ],
            "samples": {"names": list(self.samples), "on_noise": self.on_noise},
            "inputs": INPUTS_FILE,
            "references": {
                "kind": self.references.kind,
                "float": self.references.float,
                "quantized": self.references.quantized,
                "host": self.references.host,
                "quantized_source": self.references.quantized_source,
            },
            "labels": self.labels,
            "language_model": self.language_model,
            "settings": dict(self.settings),
            "warnings": {
                "program": list(self.program_warnings),
                "staged": list(self.staged_warnings),
            },
            "files": {
                name: {"size": entry.size, "sha256": entry.sha256}
                for name, entry in sorted(self.files.items())
            },
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: Path) -> BundleManifest:
        if doc.get("schema") not in READABLE_SCHEMAS:
            raise UsageError(
                f"{where} is not a job bundle this etdeploy reads "
                f"(schema {doc.get('schema')!r}, expected {BUNDLE_SCHEMA})",
                _HINT,
            )
        try:
            program, samples, refs = doc["program"], doc["samples"], doc["references"]
            warnings = doc.get("warnings") or {}
            return cls(
                model=str(doc["model"]),
                pte=str(program["pte"]),
                program_manifest=str(program["manifest"]),
                data=program.get("data"),
                runners=tuple(
                    RunnerEntry(str(r["abi"]), str(r["kind"]), str(r["directory"]))
                    for r in doc["runners"]
                ),
                samples=tuple(str(name) for name in samples["names"]),
                on_noise=bool(samples["on_noise"]),
                references=References(
                    str(refs["kind"]),
                    str(refs["float"]),
                    refs.get("quantized"),
                    refs.get("host"),
                    refs.get("quantized_source"),
                ),
                settings=dict(doc["settings"]),
                program_warnings=tuple(warnings.get("program", ())),
                staged_warnings=tuple(warnings.get("staged", ())),
                labels=doc.get("labels"),
                language_model=doc.get("language_model"),
                files={
                    str(name): FileEntry(int(entry["size"]), str(entry["sha256"]))
                    for name, entry in doc["files"].items()
                },
                etdeploy=str(doc.get("etdeploy", "")),
                created=str(doc.get("created", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where} is damaged: {type(exc).__name__}: {exc}", _HINT) from None


def is_bundle(path: Path) -> bool:
    """Whether `path` is a folder holding a bundle.json (of any schema)."""
    return (Path(path) / BUNDLE_FILE).is_file()


def read_bundle_manifest(path: Path) -> BundleManifest:
    """The manifest of the job bundle in folder `path`; a UsageError says what is wrong."""
    path = Path(path)
    manifest = path / BUNDLE_FILE
    if not path.is_dir():
        raise UsageError(
            f"no job bundle at {path}", "give the folder `etdeploy bundle MODEL -o DIR` wrote"
        )
    try:
        doc = json.loads(manifest.read_text("utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path} holds no {BUNDLE_FILE}: not a job bundle", _HINT) from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {manifest}: {exc}", _HINT) from None
    if not isinstance(doc, dict):
        raise UsageError(f"{manifest} is not a job bundle's manifest", _HINT)
    return BundleManifest.from_json(doc, manifest)


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
            raise UsageError(f"{path.name}: {relative} is missing", _DAMAGED_HINT) from None
        if size != entry.size or file_sha256(file) != entry.sha256:
            raise UsageError(
                f"{path.name}: {relative} is not the file the bundle was made with "
                "(its size or sha256 differs)",
                _DAMAGED_HINT,
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
        raise UsageError(f"{where}: {exc}", _DAMAGED_HINT) from None
    data = None
    if m.data is not None:
        entry = m.files[m.data]
        data = DataFile(bundle.file(m.data), entry.sha256, entry.size)
    return describe_program(pte, m.files[m.pte].sha256, built, m.program_warnings, data)


def bundle_staged(bundle: JobBundle, outputs: int) -> Staged:
    from etdeploy.staged import Staged  # numpy: see the module's docstring

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
    from etdeploy.dataset import Labels  # numpy: see the module's docstring
    from etdeploy.npz import read_npz

    relative = bundle.manifest.labels
    if relative is None:
        return {}
    try:
        archive = read_npz(bundle.file(relative))
        labels = Labels(
            archive["y"], str(archive["source"]), tuple(str(n) for n in archive["names"])
        )
        task = str(archive["task"]) or None
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(
            f"{bundle.path.name}: cannot read {relative}: {exc}", _DAMAGED_HINT
        ) from None
    return {"labels": labels, "task": task}


def _host_outputs(bundle: JobBundle, outputs: int) -> tuple[tuple[np.ndarray, ...], ...] | None:
    host = bundle.manifest.references.host
    return _table(bundle, host, "o", len(bundle.manifest.samples), outputs) if host else None


def _table(
    bundle: JobBundle, relative: str, letter: str, samples: int, width: int | None
) -> tuple[tuple[np.ndarray, ...], ...]:
    """A table's rows (etdeploy.npz.table_rows); `width` arrays a row (None: as many
    as the file holds). Read in one pass."""
    from etdeploy.npz import read_npz, table_rows  # numpy: see the module's docstring

    try:
        return table_rows(read_npz(bundle.file(relative)), letter, samples, width)
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(
            f"{bundle.path.name}: cannot read {relative}: {exc}", _DAMAGED_HINT
        ) from None


def bundle_runners(bundle: JobBundle) -> tuple[RunnerBundle, ...]:
    runners = []
    for entry in bundle.manifest.runners:
        try:
            runners.append(runner_from_path(bundle.file(entry.directory)))
        except EtdeployError as exc:
            raise UsageError(
                f"{bundle.path.name}: runner {entry.directory}: {exc}", _DAMAGED_HINT
            ) from None
    return tuple(runners)
