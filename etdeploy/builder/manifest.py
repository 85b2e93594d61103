"""model.pte.json: what was built, from what, and what the backend did with it.

BuildManifest is the one way to read it: every reader takes the record, never the
JSON's keys. The JSON is the builder's since the schema began (etdeploy.manifest/1):
a manifest read and written again is the same document, and one that is damaged
or from something else reads as None (the build cache then builds the entry anew).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from etdeploy.atomic import write_json
from etdeploy.builder.manifest_records import (
    Calibration,
    DataFileRecord,
    DelegationRecord,
    DynamicDims,
    JsonObject,
    ManifestError,
    MethodRecord,
    ModelSource,
    Quantization,
    ValueRecord,
    dynamic_dims,
    dynamic_json,
    field_of,
    object_of,
    objects,
    optional_of,
    string_map,
    strings,
)

__all__ = [
    "SCHEMA",
    "BuildManifest",
    "Calibration",
    "DataFileRecord",
    "DelegationRecord",
    "ManifestError",
    "MethodRecord",
    "ModelNames",
    "ModelSource",
    "ProgramRecord",
    "Quantization",
    "ValueRecord",
    "manifest_path",
    "program_record_from_json",
    "read_manifest",
    "write_json_atomic",
]

SCHEMA = "etdeploy.manifest/1"


@dataclass(frozen=True)
class BuildManifest:
    """A build's record, written beside its program (model.pte.json)."""

    model: ModelSource
    # etdeploy, torch and executorch, as installed when it was built.
    versions: dict[str, str]
    backend: str
    delegates: tuple[str, ...]
    quantization: Quantization | None
    # Declared by the factory (ModelSpec.output_kinds): how each output is judged.
    output_kinds: dict[str, str]
    # Per input name, its dynamic dims.
    dynamic: dict[str, DynamicDims]
    methods: tuple[MethodRecord, ...]
    delegation: DelegationRecord
    # The real samples the model ships.
    samples: tuple[str, ...]
    # The samples' answers and what they score (etdeploy.accuracy), when declared.
    labels: str | None
    task: str | None
    label_names: tuple[str, ...]
    size_bytes: int
    sha256: str
    built_at: str
    warnings: tuple[str, ...] = ()
    # The weights in a .ptd beside the .pte (--external-weights).
    data: DataFileRecord | None = None
    etrecord: str | None = None  # the ETRecord's file name beside the .pte
    # Set when the build is stored in the cache: its key, and what its other files hold.
    cache_key: str | None = None
    etrecord_sha256: str | None = None

    @property
    def executorch_version(self) -> str | None:
        """The executorch that built it."""
        return self.versions.get("executorch")

    @property
    def planned_bytes(self) -> int | None:
        """The first method's planned arena."""
        return self.methods[0].planned_bytes if self.methods else None

    @classmethod
    def from_json(cls, data: object) -> BuildManifest:
        """The record of a manifest's JSON; ManifestError when it is not a build manifest."""
        if not isinstance(data, dict):
            raise ManifestError("a build manifest is a JSON object")
        doc: JsonObject = data
        if doc.get("schema") != SCHEMA:
            raise ManifestError(f"schema is {doc.get('schema')!r}, not {SCHEMA}")
        where = "manifest"
        quantization = doc.get("quantization")
        data_file = doc.get("data")
        dynamic = object_of(doc, "dynamic", where) if doc.get("dynamic") is not None else {}
        return cls(
            model=ModelSource.from_json(object_of(doc, "model", where)),
            versions=string_map(doc, "versions", where),
            backend=field_of(doc, "backend", str, where),
            delegates=strings(doc, "delegates", where),
            quantization=Quantization.from_json(object_of(doc, "quantization", where))
            if quantization is not None
            else None,
            output_kinds=string_map(doc, "output_kinds", where),
            dynamic={name: dynamic_dims(dims, where) for name, dims in dynamic.items()},
            methods=tuple(MethodRecord.from_json(m) for m in objects(doc, "methods", where)),
            delegation=DelegationRecord.from_json(object_of(doc, "delegation", where)),
            samples=strings(doc, "samples", where),
            labels=optional_of(doc, "labels", str, where),
            task=optional_of(doc, "task", str, where),
            label_names=strings(doc, "label_names", where),
            size_bytes=field_of(doc, "size_bytes", int, where),
            sha256=field_of(doc, "sha256", str, where),
            built_at=field_of(doc, "built_at", str, where),
            warnings=strings(doc, "warnings", where),
            data=DataFileRecord.from_json(object_of(doc, "data", where))
            if data_file is not None
            else None,
            etrecord=optional_of(doc, "etrecord", str, where),
            cache_key=optional_of(doc, "cache_key", str, where),
            etrecord_sha256=optional_of(doc, "etrecord_sha256", str, where),
        )

    def to_json(self) -> JsonObject:
        """The JSON the builder writes, key for key in its order."""
        out: JsonObject = {
            "schema": SCHEMA,
            "model": self.model.to_json(),
            "versions": dict(self.versions),
            "backend": self.backend,
            "delegates": list(self.delegates),
            "quantization": self.quantization.to_json() if self.quantization else None,
            "output_kinds": dict(self.output_kinds),
            "dynamic": {name: dynamic_json(dims) for name, dims in self.dynamic.items()},
            "methods": [m.to_json() for m in self.methods],
            "delegation": self.delegation.to_json(),
            "samples": list(self.samples),
            "labels": self.labels,
            "task": self.task,
            "label_names": list(self.label_names),
            "size_bytes": self.size_bytes,
            "sha256": self.sha256,
            "built_at": self.built_at,
            "warnings": list(self.warnings),
        }
        if self.data is not None:
            out["data"] = self.data.to_json()
        if self.etrecord is not None:
            out["etrecord"] = self.etrecord
        if self.cache_key is not None:
            out["cache_key"] = self.cache_key
        if self.etrecord_sha256 is not None:
            out["etrecord_sha256"] = self.etrecord_sha256
        return out


@dataclass(frozen=True)
class ModelNames:
    """What a model's factory says of its program when no build manifest describes it
    (a .pte built elsewhere, run with its MODEL): its values' names, its samples and
    their answers, its output kinds, and its example inputs' signatures (kind, and a
    tensor's dtype and shape), kept per model fingerprint (pipeline.build)."""

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    samples: tuple[str, ...]
    labels: str | None
    task: str | None
    label_names: tuple[str, ...]
    output_kinds: dict[str, str]
    examples: tuple[JsonObject, ...]

    @property
    def executorch_version(self) -> None:
        """Unknown: only a build records it."""
        return None

    @property
    def planned_bytes(self) -> None:
        """Unknown: only a build's memory plan says it."""
        return None

    @property
    def methods(self) -> tuple[MethodRecord, ...]:
        """The first method's values, by name only (their kind is the .pte's to say)."""
        return (
            MethodRecord(
                "forward",
                tuple(ValueRecord("", n) for n in self.input_names),
                tuple(ValueRecord("", n) for n in self.output_names),
            ),
        )

    @classmethod
    def from_json(cls, data: object) -> ModelNames:
        if not isinstance(data, dict) or data.get("partial") is not True:
            raise ManifestError("not a record of a model's names")
        doc: JsonObject = data
        where = "model names"
        methods = objects(doc, "methods", where)
        method = methods[0] if methods else {}

        def names(key: str) -> tuple[str, ...]:
            return tuple(field_of(v, "name", str, where) for v in objects(method, key, where))

        return cls(
            names("inputs"),
            names("outputs"),
            strings(doc, "samples", where),
            optional_of(doc, "labels", str, where),
            optional_of(doc, "task", str, where),
            strings(doc, "label_names", where),
            string_map(doc, "output_kinds", where),
            tuple(objects(doc, "examples", where)),
        )

    def to_json(self) -> JsonObject:
        return {
            "methods": [{
                "inputs": [{"name": n} for n in self.input_names],
                "outputs": [{"name": n} for n in self.output_names],
            }],
            "samples": list(self.samples),
            "labels": self.labels,
            "task": self.task,
            "label_names": list(self.label_names),
            "output_kinds": dict(self.output_kinds),
            "examples": [dict(e) for e in self.examples],
            "partial": True,  # names, samples and kinds only: not a build manifest
        }  # fmt: skip


# What describes a program beside its .pte: its build's manifest, or its model's names.
ProgramRecord = BuildManifest | ModelNames


def program_record_from_json(data: object) -> ProgramRecord | None:
    """A build manifest or a model's names, as a job bundle carries either; None for
    neither (an empty record: a .pte run alone)."""
    if isinstance(data, dict) and data.get("partial") is True:
        return ModelNames.from_json(data)
    return BuildManifest.from_json(data) if data else None


def manifest_path(pte: Path) -> Path:
    return pte.with_name(pte.name + ".json")


def write_json_atomic(path: Path, data: JsonObject) -> None:
    write_json(data, path)


def write_manifest(pte: Path, manifest: BuildManifest) -> None:
    """`manifest` beside `pte`, written whole or not at all."""
    write_json(manifest.to_json(), manifest_path(pte))


def read_manifest(pte: Path) -> BuildManifest | None:
    """The manifest beside `pte`; None when there is none, or it cannot be read as one."""
    path = manifest_path(pte)
    if not path.is_file():
        return None
    try:
        return BuildManifest.from_json(json.loads(path.read_text()))
    except (ValueError, UnicodeDecodeError):  # ManifestError and JSONDecodeError among them
        return None
