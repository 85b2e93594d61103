"""The tapped twin's record (model.tapped.pte.json, etdeploy.tapped/1): what a tapped
build recorded of its program and of every value it hands out (TapInfo)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from etdeploy.builder.manifest import BuildManifest
from etdeploy.builder.manifest_records import (
    DelegationRecord,
    JsonObject,
    ManifestError,
    MethodRecord,
    ModelSource,
    Quantization,
    field_of,
    object_of,
    objects,
    optional_of,
    string_map,
    strings,
)

SCHEMA = "etdeploy.tapped/1"


@dataclass(frozen=True)
class TapInfo:
    """One tapped value, as the tapped build's manifest records it."""

    node: str  # the FX node of the exported program
    op: str  # aten op, short: layer_norm
    target: str  # aten.layer_norm.default
    output_index: int  # in the tapped program's outputs
    reducer: str  # full | stats
    fields: tuple[str, ...]  # the STATS summary's values, in order
    shape: tuple[int, ...]  # of the tapped tensor (not of its summary)
    dtype: str
    nbytes: int
    # Tapped nodes this value is computed from (through untapped ones): what
    # its error is compared with. Placeholders (inputs, weights) carry none.
    inputs: tuple[str, ...]
    partition: str  # a delegate's name (XNNPACK) or CPU
    delegate: int | None = None  # which delegated subgraph, in program order
    kernel: str | None = None  # the CPU kernel, when not delegated
    module: str | None = None
    module_class: str | None = None
    source: str | None = None  # file.py:12, the innermost user frame
    code: str | None = None  # that line's text
    # Quantization step of the grid the value lies on (a dequantize's scale).
    step: float | None = None
    # Tapped only as a value carried into --localize-module's module: what its
    # first operator was given, never itself blamed (its own inputs are untapped).
    context: bool = False
    # Another tap carries the same value (this node is a copy the delegate drops,
    # or one of a quantized value's dequantized copies): handed out once, there.
    same_as: str | None = None

    @classmethod
    def from_json(cls, data: JsonObject) -> TapInfo:
        values: dict[str, Any] = dict(data)
        for name in ("fields", "shape", "inputs"):
            values[name] = tuple(values.get(name) or ())
        return cls(**values)

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True)
class TappedManifest:
    """A tapped build's record, written beside its program."""

    model: ModelSource
    versions: dict[str, str]
    backend: str
    quantization: Quantization | None
    plan: JsonObject  # TapPlan.key_fields(): what was asked to be tapped
    # How many of the program's outputs are the model's own (the rest are taps).
    model_outputs: int
    taps: tuple[TapInfo, ...]
    # Left untapped, and why: dynamic-size values over the budget (see
    # assign_reducers), views a delegate would not hand out.
    why_untapped: dict[str, str]
    methods: tuple[MethodRecord, ...]
    delegation: DelegationRecord
    reference: str  # the tapped ExportedProgram beside the .pte (torch.export.save)
    size_bytes: int
    sha256: str
    built_at: str
    # Set when stored in the cache: its key, and the untapped build's.
    cache_key: str | None = None
    base_cache_key: str | None = None

    @property
    def untapped(self) -> tuple[str, ...]:
        return tuple(self.why_untapped)

    def as_build_manifest(self) -> BuildManifest:
        """The tapped program described as a build is (what a run of it is given):
        no samples, declared kinds or dynamic dims of its own."""
        return BuildManifest(
            model=self.model,
            versions=self.versions,
            backend=self.backend,
            delegates=(),
            quantization=self.quantization,
            output_kinds={},
            dynamic={},
            methods=self.methods,
            delegation=self.delegation,
            samples=(),
            labels=None,
            task=None,
            label_names=(),
            size_bytes=self.size_bytes,
            sha256=self.sha256,
            built_at=self.built_at,
        )

    @classmethod
    def from_json(cls, data: object) -> TappedManifest:
        if not isinstance(data, dict):
            raise ManifestError("a tapped manifest is a JSON object")
        doc: JsonObject = data
        if doc.get("schema") != SCHEMA:
            raise ManifestError(f"schema is {doc.get('schema')!r}, not {SCHEMA}")
        where = "tapped manifest"
        quantization = doc.get("quantization")
        try:
            taps = tuple(TapInfo.from_json(t) for t in objects(doc, "taps", where))
        except TypeError as exc:  # a tap with fields of another version
            raise ManifestError(f"{where}: a tap: {exc}") from None
        why_untapped = string_map(doc, "why_untapped", where)
        if strings(doc, "untapped", where) != tuple(why_untapped):
            raise ManifestError(f"{where}: 'untapped' and 'why_untapped' disagree")
        return cls(
            model=ModelSource.from_json(object_of(doc, "model", where)),
            versions=string_map(doc, "versions", where),
            backend=field_of(doc, "backend", str, where),
            quantization=Quantization.from_json(object_of(doc, "quantization", where))
            if quantization is not None
            else None,
            plan=object_of(doc, "plan", where),
            model_outputs=field_of(doc, "model_outputs", int, where),
            taps=taps,
            why_untapped=why_untapped,
            methods=tuple(MethodRecord.from_json(m) for m in objects(doc, "methods", where)),
            delegation=DelegationRecord.from_json(object_of(doc, "delegation", where)),
            reference=field_of(doc, "reference", str, where),
            size_bytes=field_of(doc, "size_bytes", int, where),
            sha256=field_of(doc, "sha256", str, where),
            built_at=field_of(doc, "built_at", str, where),
            cache_key=optional_of(doc, "cache_key", str, where),
            base_cache_key=optional_of(doc, "base_cache_key", str, where),
        )

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "schema": SCHEMA,
            "model": self.model.to_json(),
            "versions": dict(self.versions),
            "backend": self.backend,
            "quantization": self.quantization.to_json() if self.quantization else None,
            "plan": dict(self.plan),
            "model_outputs": self.model_outputs,
            "taps": [t.to_json() for t in self.taps],
            "untapped": list(self.untapped),
            "why_untapped": dict(self.why_untapped),
            "methods": [m.to_json() for m in self.methods],
            "delegation": self.delegation.to_json(),
            "reference": self.reference,
            "size_bytes": self.size_bytes,
            "sha256": self.sha256,
            "built_at": self.built_at,
        }
        if self.cache_key is not None:
            out["cache_key"] = self.cache_key
        if self.base_cache_key is not None:
            out["base_cache_key"] = self.base_cache_key
        return out
