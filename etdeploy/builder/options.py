"""What a build is asked for (BuildOptions, declared in etdeploy.build_options), what it
gives (BuildResult), which combinations no model can be built with, and where a build's
files sit beside its .pte (external data, ETRecord, the quantized eager program)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Declared with the run settings it shares its options with; the builder takes it from here.
from etdeploy.build_options import BuildOptions as BuildOptions
from etdeploy.builder.manifest import BuildManifest, manifest_path

# Hears each stage of an uncached build as it starts.
StatusCallback = Callable[[str], None]
# Checks samples against the model's inputs (name, dtype, shape, dynamic ranges, as
# etdeploy.inputs reads them) once the model is loaded, before the slow export:
# a wrong sample fails in seconds, not after a lowering.
InputsCheck = Callable[[list[dict[str, Any]]], None]

# Backends whose lowering writes every weight to the external data file with
# --external-weights (builder.lower.tag_delegate_constants): the portable kernels'
# constants through ExecutorchBackendConfig.external_constants, XNNPACK's through its
# named data. Others (Core ML, Vulkan) keep their own weights inside their blobs.
EXTERNAL_WEIGHT_BACKENDS = ("xnnpack", "portable")


@dataclass
class BuildResult:
    pte: Path
    manifest: BuildManifest
    cached: bool
    seconds: float
    warnings: list[str] = field(default_factory=list)
    # What torch and executorch logged and warned while building (empty for a cache hit).
    log: str = ""

    @property
    def manifest_path(self) -> Path:
        return manifest_path(self.pte)

    @property
    def data(self) -> Path | None:
        """The program's external data (.ptd) beside it; None when the .pte holds its weights."""
        return data_file_of(self.pte, self.manifest)


def unsupported(backend: str, quantize: str | None, external_weights: bool = False) -> str | None:
    """Why `backend` cannot be built with these options, whatever the model; None
    when it can. The farm skips such a cell of its matrix with this reason."""
    if quantize is not None and backend != "xnnpack":
        # int8 and int8-dynamic are PT2E with the XNNPACK quantizer (builder.quantize).
        return f"{quantize} uses the XNNPACK quantizer, which backend {backend} does not take"
    if external_weights and backend not in EXTERNAL_WEIGHT_BACKENDS:
        return f"backend {backend} keeps its weights inside its own blobs"
    return None


def data_path(pte: Path) -> Path:
    """Where a .pte's external data sits: beside it, model.pte -> model.ptd."""
    return pte.with_suffix(".ptd")


def data_file_of(pte: Path, manifest: BuildManifest | None) -> Path | None:
    """The external data of `pte` when its manifest records one: beside it under the
    .pte's own stem (a copy renamed with -o keeps the pair's names together); None when
    the .pte holds its weights."""
    return data_path(pte) if manifest is not None and manifest.data is not None else None


def etrecord_path(pte: Path) -> Path:
    """Where a .pte's ETRecord sits: beside it, model.pte -> model.etrecord."""
    return pte.with_suffix(".etrecord")


def quantized_program_path(pte: Path) -> Path:
    """Where a quantized .pte's eager twin sits: the converted (quantize/dequantize)
    ExportedProgram that was lowered, model.pte -> model.quantized.pt2. It is the
    reference a device is judged against to the quantization step."""
    return pte.with_suffix(".quantized.pt2")
