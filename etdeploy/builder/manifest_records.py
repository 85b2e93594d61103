"""The parts of a build manifest (etdeploy.builder.manifest.BuildManifest), each a
frozen record with its JSON form.

`from_json` checks what it reads and raises ManifestError for a value of the wrong
shape; `to_json` writes the keys in the order the builder has always written them,
so a manifest read and written again is the same text. A key that older manifests
lack reads as None (or empty) and is written only when it holds something.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar, cast

# A value as JSON holds it, read from a file (json.loads) or about to be written.
JsonObject = dict[str, object]

_T = TypeVar("_T")


class ManifestError(ValueError):
    """A manifest that is not what the builder writes: damaged, or from something else."""


# How a message names each JSON type.
_JSON_NAMES = {"str": "string", "int": "integer", "dict": "object", "bool": "boolean"}


def field_of(data: Mapping[str, object], key: str, kind: type[_T], where: str) -> _T:
    value = data.get(key)
    # bool is an int to isinstance; a manifest never means a bool where it wants a number.
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        what = _JSON_NAMES.get(kind.__name__, kind.__name__)
        found = (
            "missing" if key not in data else f"not {'an' if what[0] in 'aeiou' else 'a'} {what}"
        )
        raise ManifestError(f"{where}: {key!r} is {found}")
    return value


def optional_of(data: Mapping[str, object], key: str, kind: type[_T], where: str) -> _T | None:
    return None if data.get(key) is None else field_of(data, key, kind, where)


def object_of(data: Mapping[str, object], key: str, where: str) -> JsonObject:
    return cast(JsonObject, field_of(data, key, dict, where))


def strings(data: Mapping[str, object], key: str, where: str) -> tuple[str, ...]:
    """A list of strings; absent reads as empty."""
    items = data.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ManifestError(f"{where}: {key!r} is not a list of strings")
    return tuple(cast(list[str], items))


def ints(data: Mapping[str, object], key: str, where: str) -> tuple[int, ...] | None:
    items = data.get(key)
    if items is None:
        return None
    if not isinstance(items, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in items
    ):
        raise ManifestError(f"{where}: {key!r} is not a list of integers")
    return tuple(cast(list[int], items))


def string_map(data: Mapping[str, object], key: str, where: str) -> dict[str, str]:
    """An object of strings; absent reads as empty."""
    found = data.get(key) or {}
    if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
        raise ManifestError(f"{where}: {key!r} is not an object of strings")
    return dict(cast(dict[str, str], found))


def objects(data: Mapping[str, object], key: str, where: str) -> list[JsonObject]:
    items = data.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ManifestError(f"{where}: {key!r} is not a list of objects")
    return cast(list[JsonObject], items)


# An input's dynamic dims: dim (as a JSON key, "0") -> (min, max).
DynamicDims = dict[str, tuple[int, int]]


def dynamic_dims(found: object, where: str) -> DynamicDims:
    if not isinstance(found, dict):
        raise ManifestError(f"{where}: dynamic dims are not an object")
    dims: DynamicDims = {}
    for dim, bounds in found.items():
        if (
            not isinstance(bounds, list)
            or len(bounds) != 2
            or not all(isinstance(b, int) for b in bounds)
        ):
            raise ManifestError(f"{where}: dynamic dim {dim!r} is not [min, max]")
        dims[str(dim)] = (bounds[0], bounds[1])
    return dims


def dynamic_json(dims: DynamicDims) -> JsonObject:
    return {dim: list(bounds) for dim, bounds in dims.items()}


@dataclass(frozen=True)
class ModelSource:
    """The model a program was built from."""

    ref: str  # as given: a path, a .pt2, a module:factory
    kind: str
    name: str
    fingerprint: str
    # File by file (a source file's sha256, a data file's size and mtime), so a --pte
    # refused as stale can say which file changed; None before files were recorded.
    files: dict[str, str] | None = None

    @classmethod
    def from_json(cls, data: JsonObject) -> ModelSource:
        where = "model"
        files = string_map(data, "files", where) if data.get("files") is not None else None
        return cls(
            field_of(data, "ref", str, where),
            field_of(data, "kind", str, where),
            field_of(data, "name", str, where),
            field_of(data, "fingerprint", str, where),
            files,
        )

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "ref": self.ref,
            "kind": self.kind,
            "name": self.name,
            "fingerprint": self.fingerprint,
        }
        if self.files is not None:
            out["files"] = dict(self.files)
        return out


@dataclass(frozen=True)
class Calibration:
    """Where an int8 build's activation ranges came from (etdeploy.builder.calibration)."""

    kind: str  # real | examples | random | none (dynamic activations)
    samples: int | None = None
    note: str | None = None
    # The sample paths it read and their digest: checked on every cache hit.
    sources: tuple[str, ...] | None = None
    digest: str | None = None

    @classmethod
    def from_json(cls, data: JsonObject) -> Calibration:
        where = "quantization.calibration"
        sources = strings(data, "sources", where) if "sources" in data else None
        return cls(
            field_of(data, "kind", str, where),
            optional_of(data, "samples", int, where),
            optional_of(data, "note", str, where),
            sources,
            optional_of(data, "digest", str, where),
        )

    def to_json(self) -> JsonObject:
        out: JsonObject = {"kind": self.kind}
        if self.samples is not None:
            out["samples"] = self.samples
        if self.note is not None:
            out["note"] = self.note
        if self.sources is not None:
            out["sources"] = list(self.sources)
        if self.digest is not None:
            out["digest"] = self.digest
        return out


@dataclass(frozen=True)
class Quantization:
    """How a program was quantized."""

    mode: str  # int8 | int8-dynamic
    calibration: Calibration | None
    # The quantized eager program kept beside the .pte (a build's, not a tapped build's).
    reference: str | None = None
    reference_sha256: str | None = None

    @classmethod
    def from_json(cls, data: JsonObject) -> Quantization:
        where = "quantization"
        calibration = data.get("calibration")
        return cls(
            field_of(data, "mode", str, where),
            Calibration.from_json(object_of(data, "calibration", where))
            if calibration is not None
            else None,
            optional_of(data, "reference", str, where),
            optional_of(data, "reference_sha256", str, where),
        )

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "mode": self.mode,
            "calibration": self.calibration.to_json() if self.calibration else None,
        }
        if self.reference is not None:
            out["reference"] = self.reference
        if self.reference_sha256 is not None:
            out["reference_sha256"] = self.reference_sha256
        return out


@dataclass(frozen=True)
class OutputQuantization:
    """An output's quantization grid (etdeploy.builder.quantize.QuantizationStep)."""

    scale: float  # the step: a correct int8 kernel lands on the same grid point or the next
    zero_point: int
    qmin: int
    qmax: int
    dtype: str  # int8, uint8

    @classmethod
    def from_json(cls, data: JsonObject) -> OutputQuantization:
        where = "an output's quantization"
        scale = data.get("scale")
        if not isinstance(scale, (int, float)) or isinstance(scale, bool):
            raise ManifestError(f"{where}: 'scale' is not a number")
        return cls(
            float(scale),
            field_of(data, "zero_point", int, where),
            field_of(data, "qmin", int, where),
            field_of(data, "qmax", int, where),
            field_of(data, "dtype", str, where),
        )

    def to_json(self) -> JsonObject:
        return {
            "scale": self.scale,
            "zero_point": self.zero_point,
            "qmin": self.qmin,
            "qmax": self.qmax,
            "dtype": self.dtype,
        }


@dataclass(frozen=True)
class ValueRecord:
    """One input or output of a method: its kind and, for a tensor, its dtype and
    shape as lowered; the model's name for it; an input's dynamic dims; a quantized
    output's grid."""

    kind: str  # tensor, int, bool, ...
    name: str
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    dim_order: tuple[int, ...] | None = None
    dynamic: DynamicDims | None = None
    quantization: OutputQuantization | None = None

    @classmethod
    def from_json(cls, data: JsonObject) -> ValueRecord:
        where = "a method's value"
        dynamic = data.get("dynamic")
        quantization = data.get("quantization")
        return cls(
            field_of(data, "kind", str, where),
            field_of(data, "name", str, where),
            optional_of(data, "dtype", str, where),
            ints(data, "shape", where),
            ints(data, "dim_order", where),
            dynamic_dims(dynamic, where) if dynamic is not None else None,
            OutputQuantization.from_json(object_of(data, "quantization", where))
            if quantization is not None
            else None,
        )

    def to_json(self) -> JsonObject:
        out: JsonObject = {"kind": self.kind}
        if self.dtype is not None:
            out["dtype"] = self.dtype
        if self.shape is not None:
            out["shape"] = list(self.shape)
        if self.dim_order is not None:
            out["dim_order"] = list(self.dim_order)
        out["name"] = self.name
        if self.dynamic is not None:
            out["dynamic"] = dynamic_json(self.dynamic)
        if self.quantization is not None:
            out["quantization"] = self.quantization.to_json()
        return out


@dataclass(frozen=True)
class MethodRecord:
    """One method of the program and its memory plan."""

    name: str
    inputs: tuple[ValueRecord, ...]
    outputs: tuple[ValueRecord, ...]
    # Buffer 0 is reserved by the memory planner; the rest is the arena a device provides.
    planned_buffers: tuple[int, ...] | None = None
    planned_bytes: int | None = None

    @classmethod
    def from_json(cls, data: JsonObject) -> MethodRecord:
        where = "a method"
        return cls(
            field_of(data, "name", str, where),
            tuple(ValueRecord.from_json(v) for v in objects(data, "inputs", where)),
            tuple(ValueRecord.from_json(v) for v in objects(data, "outputs", where)),
            ints(data, "planned_buffers", where),
            optional_of(data, "planned_bytes", int, where),
        )

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "name": self.name,
            "inputs": [v.to_json() for v in self.inputs],
            "outputs": [v.to_json() for v in self.outputs],
        }
        if self.planned_buffers is not None:
            out["planned_buffers"] = list(self.planned_buffers)
        if self.planned_bytes is not None:
            out["planned_bytes"] = self.planned_bytes
        return out


@dataclass(frozen=True)
class OpCounts:
    """How many nodes of one operator the backend claimed, and how many it left."""

    delegated: int
    non_delegated: int


@dataclass(frozen=True)
class DelegationRecord:
    """How much of the graph the backend claimed (etdeploy.builder.lower.Delegation)."""

    delegated_nodes: int
    non_delegated_nodes: int
    delegated_subgraphs: int
    share: float
    by_op: dict[str, OpCounts]

    @classmethod
    def from_json(cls, data: JsonObject) -> DelegationRecord:
        where = "delegation"
        share = data.get("share")
        if not isinstance(share, (int, float)) or isinstance(share, bool):
            raise ManifestError(f"{where}: 'share' is not a number")
        by_op = object_of(data, "by_op", where)
        counts = {}
        for op, found in by_op.items():
            if not isinstance(found, dict):
                raise ManifestError(f"{where}: by_op {op!r} is not an object")
            entry = cast(JsonObject, found)
            counts[op] = OpCounts(
                field_of(entry, "delegated", int, where),
                field_of(entry, "non_delegated", int, where),
            )
        return cls(
            field_of(data, "delegated_nodes", int, where),
            field_of(data, "non_delegated_nodes", int, where),
            field_of(data, "delegated_subgraphs", int, where),
            float(share),
            counts,
        )

    def to_json(self) -> JsonObject:
        return {
            "delegated_nodes": self.delegated_nodes,
            "non_delegated_nodes": self.non_delegated_nodes,
            "delegated_subgraphs": self.delegated_subgraphs,
            "share": self.share,
            "by_op": {
                op: {"delegated": c.delegated, "non_delegated": c.non_delegated}
                for op, c in self.by_op.items()
            },
        }


@dataclass(frozen=True)
class DataFileRecord:
    """A program's external data (.ptd, --external-weights), written beside the .pte:
    what a run pushes and passes as --data_path."""

    name: str
    size_bytes: int
    sha256: str

    @classmethod
    def from_json(cls, data: JsonObject) -> DataFileRecord:
        where = "data"
        return cls(
            field_of(data, "name", str, where),
            field_of(data, "size_bytes", int, where),
            field_of(data, "sha256", str, where),
        )

    def to_json(self) -> JsonObject:
        return {"name": self.name, "size_bytes": self.size_bytes, "sha256": self.sha256}
