"""What a job bundle holds, and its bundle.json: the typed manifest, read and written.

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
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etdeploy.errors import UsageError

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
