"""The program a run runs: a .pte and what is known of its first method.

Its inputs' and outputs' dtypes and shapes always come from the .pte itself (the
torch-free reader, its signatures cached by the program's sha256); names, dynamic
dims, backend, quantization and delegation from the build manifest beside it,
when there is one. A program whose weights live in an external data file (.ptd)
travels as a pair, checked before anything runs.

Every source of a run's program describes it here: a build or a --pte
(etdeploy.pipeline.build), a job bundle (etdeploy.bundle.job_bundle), the tapped twin
(etdeploy.pipeline.localize_runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etdeploy.atomic import keep_json, read_json_object
from etdeploy.builder import quantized_program_path
from etdeploy.builder.manifest import BuildManifest
from etdeploy.errors import EtdeployError, InputError
from etdeploy.paths import cache_dir
from etdeploy.results.result import DataFileInfo, Delegation

if TYPE_CHECKING:
    from etdeploy.builder.manifest import BuildManifest, ProgramRecord, ValueRecord

# ExecuTorch's ScalarType names (schema/scalar_type.fbs) -> numpy's.
_SCALAR_TO_NUMPY = {
    "byte": "uint8", "char": "int8", "short": "int16", "int": "int32", "long": "int64",
    "half": "float16", "float": "float32", "double": "float64", "bool": "bool",
}  # fmt: skip


@dataclass(frozen=True)
class ProgramValue:
    """One input or output of the method the runner executes."""

    kind: str  # tensor, int, bool, ... (the .pte's EValue kind)
    name: str
    dtype: str | None = None  # numpy's name, for a tensor
    shape: tuple[int, ...] = ()
    # Dynamic dims of an input: {dim: [min, max]} from the manifest.
    dynamic: dict[str, Any] = field(default_factory=dict)
    # A tensor's shape_dynamism in the .pte: static, dynamic_bound (shape is the
    # upper bound) or dynamic_unbound.
    dynamism: str = "static"
    # An output of a quantized program that is a grid of this step (its scale).
    quant_step: float | None = None

    @property
    def is_tensor(self) -> bool:
        return self.kind == "tensor"

    def as_meta(self) -> dict[str, Any]:
        """The mapping etdeploy.inputs reads (it also serves calibration)."""
        return {
            "kind": self.kind,
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "dynamic": self.dynamic,
        }


@dataclass(frozen=True)
class DataFile:
    """A program's external data (.ptd) as a run uses it."""

    path: Path
    sha256: str
    size_bytes: int


@dataclass(frozen=True)
class Program:
    """The .pte to run and what is known of its first method."""

    pte: Path
    sha256: str
    size_bytes: int
    # Its build's manifest; for a .pte built elsewhere, what its MODEL says of it, or None.
    manifest: ProgramRecord | None
    method: str
    inputs: tuple[ProgramValue, ...]
    outputs: tuple[ProgramValue, ...]
    warnings: tuple[str, ...] = ()
    # Its external data (.ptd) when its weights live outside the .pte.
    data: DataFile | None = None

    @property
    def data_path(self) -> Path | None:
        return self.data.path if self.data is not None else None

    @property
    def data_record(self) -> DataFileInfo | None:
        """The external data as the result's artifact records it."""
        if self.data is None:
            return None
        return DataFileInfo(str(self.data.path), self.data.sha256, self.data.size_bytes)

    # What only a build manifest knows; None for a .pte built elsewhere.
    @property
    def build_manifest(self) -> BuildManifest | None:
        return build_manifest_of(self.manifest)

    @property
    def backend(self) -> str | None:
        return built.backend if (built := self.build_manifest) else None

    @property
    def quantization(self) -> str | None:
        built = self.build_manifest
        return built.quantization.mode if built and built.quantization else None

    @property
    def delegation(self) -> Delegation | None:
        built = self.build_manifest
        return Delegation.from_json(built.delegation.to_json()) if built else None

    @property
    def planned_bytes(self) -> int | None:
        return self.manifest.planned_bytes if self.manifest is not None else None

    @property
    def built_with(self) -> dict[str, str | None] | None:
        return dict(built.versions) if (built := self.build_manifest) else None

    @property
    def tensor_outputs(self) -> list[int]:
        """Positions of the tensor outputs: the runner writes a file for each."""
        return [i for i, value in enumerate(self.outputs) if value.is_tensor]

    @property
    def output_steps(self) -> list[float | None]:
        """Per tensor output, its quantization step (None: not a quantized output)."""
        return [self.outputs[i].quant_step for i in self.tensor_outputs]

    @property
    def declared_kinds(self) -> dict[str, str]:
        """Output kinds the model's factory declared (ModelSpec.output_kinds)."""
        return dict(self.manifest.output_kinds) if self.manifest is not None else {}

    @property
    def own_samples(self) -> list[str]:
        """The real samples the model ships: recorded in the manifest at build time,
        or, for a .pte built elsewhere, named by the model's factory."""
        return list(self.manifest.samples) if self.manifest is not None else []

    @property
    def declared_task(self) -> tuple[str | None, str | None, tuple[str, ...]]:
        """What the model's factory says of its samples' answers: its labels file, its
        task, and its classes' names (ModelSpec.labels, task, label_names)."""
        manifest = self.manifest
        if manifest is None:
            return None, None, ()
        return manifest.labels, manifest.task, manifest.label_names

    @property
    def quantized_program(self) -> Path | None:
        """The converted program a quantized build lowered, kept beside the .pte."""
        path = quantized_program_path(self.pte)
        return path if self.quantization and path.is_file() else None

    @property
    def input_metas(self) -> list[dict[str, Any]]:
        return [value.as_meta() for value in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [self.outputs[i].name for i in self.tensor_outputs]


def describe_program(
    pte: Path,
    digest: str,
    manifest: ProgramRecord | None,
    warnings: Sequence[str],
    data: DataFile | None = None,
) -> Program:
    methods = method_signatures(pte, digest)
    if not methods:
        raise InputError(f"{pte} has no methods", "rebuild it with `etdeploy build`")
    warnings = list(warnings)
    data = _checked_pair(pte, manifest, data, warnings)
    method = methods[0]
    listed = manifest.methods[0] if manifest is not None and manifest.methods else None

    def values(
        items: Sequence[dict[str, Any]], named: Sequence[ValueRecord], prefix: str
    ) -> tuple[ProgramValue, ...]:
        out = []
        for i, value in enumerate(items):
            meta = named[i] if i < len(named) else None
            name = (meta.name if meta is not None else "") or f"{prefix}_{i}"
            tensor = value.get("tensor")
            if tensor is None:
                out.append(ProgramValue(value["kind"], name))
                continue
            out.append(
                ProgramValue(
                    value["kind"],
                    name,
                    dtype=_SCALAR_TO_NUMPY.get(tensor["dtype"], tensor["dtype"]),
                    shape=tuple(tensor["sizes"]),
                    dynamic=_dynamic_meta(meta),
                    dynamism=tensor["shape_dynamism"],
                    quant_step=meta.quantization.scale
                    if meta is not None and meta.quantization is not None
                    else None,
                )
            )
        return tuple(out)

    return Program(
        pte=pte,
        sha256=digest,
        size_bytes=pte.stat().st_size,
        manifest=manifest,
        method=method["name"],
        inputs=values(method["inputs"], listed.inputs if listed else (), "input"),
        outputs=values(method["outputs"], listed.outputs if listed else (), "output"),
        warnings=tuple(warnings),
        data=data,
    )


# The signatures cache's schema: bump it when what method_signatures writes changes.
SIGNATURES_SCHEMA = "etdeploy.signatures/1"


def method_signatures(pte: Path, digest: str) -> list[dict[str, Any]]:
    """Each method's name, inputs and outputs (kind; a tensor's dtype, sizes and shape
    dynamism) as plain data, kept in the cache by the program's sha256: a warm run
    reads a small JSON file instead of importing the .pte reader and its generated
    flatbuffer code (~0.01 s of every run). A cache entry that cannot be read is read
    from the program again."""
    cached = cache_dir("signatures") / f"{digest}.json"
    document = read_json_object(cached) or {}
    if document.get("schema") == SIGNATURES_SCHEMA and isinstance(document.get("methods"), list):
        return list(document["methods"])
    from etdeploy.pte.reader import read_signatures

    try:
        # The methods' signatures only: the program flatbuffer, no segment or delegate blob.
        methods = [
            {
                "name": m.name,
                "inputs": [_value_record(v) for v in m.inputs],
                "outputs": [_value_record(v) for v in m.outputs],
            }
            for m in read_signatures(pte)
        ]
    except EtdeployError as exc:
        raise InputError(
            f"{pte} is not a usable .pte: {exc.message}",
            "give a program written by `etdeploy build` or executorch's to_executorch()",
        ) from exc
    keep_json(cached, {"schema": SIGNATURES_SCHEMA, "methods": methods})
    return methods


def _value_record(value: Any) -> dict[str, Any]:
    tensor = value.tensor
    if tensor is None:
        return {"kind": value.kind, "tensor": None}
    return {
        "kind": value.kind,
        "tensor": {
            "dtype": tensor.dtype,
            "sizes": list(tensor.sizes),
            "shape_dynamism": tensor.shape_dynamism,
        },
    }


def _checked_pair(
    pte: Path, manifest: ProgramRecord | None, data: DataFile | None, warnings: list[str]
) -> DataFile | None:
    """The external data to run `pte` with, after checking the two belong together.

    A build's own manifest settles it without a look inside either file: a pair whose
    .ptd it recorded, or a program it built with its weights inside. Otherwise (a --pte
    built elsewhere, a --data given) the program's delegate and constant tables are read
    for the names it needs, and the .ptd's keys for the names it holds."""
    built_manifest = build_manifest_of(manifest)
    built = built_manifest is not None
    recorded = built_manifest.data if built_manifest is not None else None
    if data is not None and recorded is not None and recorded.sha256 == data.sha256:
        return data
    if data is None and built and recorded is None:
        return None
    # Only now: the builder's module and the full reader cost a warm run ~15 ms to import.
    from etdeploy.builder.ptd import check_pair, program_data_keys
    from etdeploy.pte.reader import read_pte

    try:
        layout = read_pte(pte)
    except EtdeployError as exc:
        raise InputError(
            f"{pte} is not a usable .pte: {exc.message}",
            exc.hint
            or "give a program written by `etdeploy build` or executorch's to_executorch()",
        ) from exc
    if data is not None and not program_data_keys(layout):
        warnings.append(f"{pte.name} keeps its weights inside; {data.path.name} is not used")
        return None
    check_pair(pte, layout, data.path if data is not None else None)
    return data


def build_manifest_of(record: ProgramRecord | None) -> BuildManifest | None:
    """`record` when it is a build's manifest; None for a model's names, or nothing."""
    if record is None:
        return None
    # Loaded already: `record` is one of its records.

    return record if isinstance(record, BuildManifest) else None


def _dynamic_meta(meta: ValueRecord | None) -> dict[str, Any]:
    """An input's dynamic dims as etdeploy.inputs reads them: {dim: [min, max]}."""
    if meta is None or not meta.dynamic:
        return {}
    return {dim: list(bounds) for dim, bounds in meta.dynamic.items()}
