"""The build stage: model -> export -> (quantize) -> lower -> .pte + manifest.

Content-addressed: the key covers the model's source, the options and the
versions, so an identical build is served from the cache without running the
factory or torch.export.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings as warnings_module
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import filelock

import etdeploy
from etdeploy.builder.manifest import SCHEMA, manifest_path, read_manifest, write_json_atomic
from etdeploy.errors import EtdeployError, InputError, UsageError
from etdeploy.model.loader import ModelRef, load_model, parse_model_ref
from etdeploy.paths import cache_dir

BUILD_REVISION = 6

# Backends whose lowering writes every weight to the external data file with
# --external-weights (builder.lower.tag_delegate_constants): the portable kernels'
# constants through ExecutorchBackendConfig.external_constants, XNNPACK's through its
# named data. Others (Core ML, Vulkan) keep their own weights inside their blobs.
EXTERNAL_WEIGHT_BACKENDS = ("xnnpack", "portable")


@dataclass(frozen=True)
class BuildOptions:
    backend: str = "xnnpack"
    quantize: str | None = None  # None | "int8" | "int8-dynamic"
    calibration: tuple[str, ...] = ()
    random_calibration: bool = False
    dynamic: tuple[str, ...] = ()  # "name:dim=min..max"
    use_cache: bool = True
    # Program-data separation: the weights in a .ptd beside the .pte (--external-weights).
    external_weights: bool = False

    def key_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "backend": self.backend,
            "quantize": self.quantize,
            "random_calibration": self.random_calibration,
            "dynamic": sorted(self.dynamic),
        }
        if self.external_weights:  # only then: every other build keeps its cache key
            fields["external_weights"] = True
        return fields


@dataclass
class BuildResult:
    pte: Path
    manifest: dict[str, Any]
    cached: bool
    seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def manifest_path(self) -> Path:
        return manifest_path(self.pte)

    @property
    def data(self) -> Path | None:
        """The program's external data (.ptd) beside it; None when the .pte holds its weights."""
        return data_file_of(self.pte, self.manifest)


def data_path(pte: Path) -> Path:
    """Where a .pte's external data sits: beside it, model.pte -> model.ptd."""
    return pte.with_suffix(".ptd")


def data_file_of(pte: Path, manifest: dict[str, Any] | None) -> Path | None:
    """The external data of `pte` when its manifest records one: beside it under the
    .pte's own stem (a copy renamed with -o keeps the pair's names together); None when
    the .pte holds its weights."""
    return data_path(pte) if isinstance((manifest or {}).get("data"), dict) else None


def etrecord_path(pte: Path) -> Path:
    """Where a .pte's ETRecord sits: beside it, model.pte -> model.etrecord."""
    return pte.with_suffix(".etrecord")


def quantized_program_path(pte: Path) -> Path:
    """Where a quantized .pte's eager twin sits: the converted (quantize/dequantize)
    ExportedProgram that was lowered, model.pte -> model.quantized.pt2. It is the
    reference a device is judged against to the quantization step."""
    return pte.with_suffix(".quantized.pt2")


def versions() -> dict[str, str]:
    return {
        "etdeploy": etdeploy.__version__,
        "torch": installed_version("torch"),
        "executorch": installed_version("executorch"),
    }


def installed_version(package: str) -> str:
    """The installed version of `package`, as importlib.metadata.version gives it, read
    from the name of its .dist-info directory beside the package (the wheel spec's
    NAME-VERSION.dist-info, which pip names from the same Version field): a directory
    listing instead of parsing torch's METADATA (tens of ms on every warm run, which needs
    the version only for the cache key). Falls back to importlib.metadata when the layout
    is not that one (an editable or egg install)."""
    import importlib.util

    spec = importlib.util.find_spec(package)  # locates it without importing it
    if spec is not None and spec.submodule_search_locations:
        site = Path(next(iter(spec.submodule_search_locations))).parent
        found = sorted(site.glob(f"{package}-*.dist-info"))
        if len(found) == 1:
            return found[0].name.removeprefix(f"{package}-").removesuffix(".dist-info")
    return metadata.version(package)


def parse_dynamic(items: tuple[str, ...]) -> dict[str, dict[int, tuple[int, int]]]:
    """`image:0=1..16` -> {"image": {0: (1, 16)}}."""
    result: dict[str, dict[int, tuple[int, int]]] = {}
    for item in items:
        try:
            name, rest = item.split(":", 1)
            dim_text, range_text = rest.split("=", 1)
            low_text, high_text = range_text.split("..", 1)
            dim, low, high = int(dim_text), int(low_text), int(high_text)
        except ValueError:
            raise UsageError(
                f"cannot read --dynamic {item!r}", "write INPUT:DIM=MIN..MAX, e.g. image:0=1..16"
            ) from None
        if low < 1 or high < low:
            raise UsageError(f"--dynamic {item!r}: need 1 <= MIN <= MAX", "e.g. image:0=1..16")
        result.setdefault(name, {})[dim] = (low, high)
    return result


def _calibration_digest(paths: tuple[str, ...]) -> str:
    from etdeploy.inputs import expand_sample_paths

    digest = hashlib.sha256()
    for path in expand_sample_paths(paths) if paths else []:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cache_key(ref: ModelRef, options: BuildOptions, fingerprint: str) -> str:
    payload = {
        "model": fingerprint,
        "options": options.key_fields(),
        "calibration": _calibration_digest(options.calibration)
        if options.quantize == "int8"
        else "",
        "versions": versions(),
        # Bumped whenever what a build records changes, so old cache entries are not served.
        "format": f"{SCHEMA}+{BUILD_REVISION}",
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def build(model: str, options: BuildOptions) -> BuildResult:
    """Build (or fetch from the cache) one artefact; returns the cached .pte path."""
    from etdeploy.builder.backends import get_backend

    started = time.perf_counter()
    backend = get_backend(options.backend)  # bad names fail before any work
    if options.quantize not in (None, "int8", "int8-dynamic"):
        raise UsageError(f"unknown quantization {options.quantize!r}", "use int8 or int8-dynamic")
    if options.quantize and backend.name != "xnnpack":
        raise UsageError(
            f"--quantize {options.quantize} uses the XNNPACK quantizer; backend {backend.name} does not take it",
            "use --backend xnnpack with --quantize",
        )
    if options.external_weights and backend.name not in EXTERNAL_WEIGHT_BACKENDS:
        raise UsageError(
            f"--external-weights: backend {backend.name} keeps its weights inside its own blobs",
            f"use --backend {' or '.join(EXTERNAL_WEIGHT_BACKENDS)} with --external-weights",
        )
    dynamic = parse_dynamic(options.dynamic)
    ref = parse_model_ref(model)
    fingerprint = ref.fingerprint()
    key = cache_key(ref, options, fingerprint)
    entry = cache_dir("builds") / key[:32]
    pte = entry / f"{ref.name}.pte"
    with filelock.FileLock(str(entry) + ".lock"):
        cached = read_manifest(pte) if options.use_cache and pte.is_file() else None
        if cached is not None and not _calibration_unchanged(cached):
            cached = None  # calibrated on sample files that have changed since: rebuild
        data = data_file_of(pte, cached)
        if data is not None and not data.is_file():
            cached = None  # its external data is gone: rebuild both
        if cached is not None:
            return BuildResult(
                pte, cached, True, time.perf_counter() - started, list(cached.get("warnings", []))
            )
        with warnings_module.catch_warnings():
            # torch and executorch emit deprecation chatter on every export; users
            # see our warnings (low delegation, noise calibration), not theirs.
            warnings_module.simplefilter("ignore")
            manifest, buffer, etrecord, quantized, warnings, external = _build_uncached(
                ref, fingerprint, options, backend, dynamic
            )
        manifest["cache_key"] = key
        tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=entry.parent))
        try:
            (tmp / pte.name).write_bytes(buffer)
            if external is not None:
                (tmp / manifest["data"]["name"]).write_bytes(external)
            if etrecord is not None:
                (tmp / manifest["etrecord"]).write_bytes(etrecord)
            if quantized is not None:
                quantized_program_path(tmp / pte.name).write_bytes(quantized)
            write_json_atomic(manifest_path(tmp / pte.name), manifest)
            if entry.exists():
                shutil.rmtree(entry)
            os.replace(tmp, entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return BuildResult(pte, manifest, False, time.perf_counter() - started, warnings)


def _build_uncached(
    ref: ModelRef,
    fingerprint: str,
    options: BuildOptions,
    backend: Any,
    dynamic: dict[str, dict[int, tuple[int, int]]],
) -> tuple[dict[str, Any], bytes, bytes | None, bytes | None, list[str], bytes | None]:
    """The manifest, the program, its ETRecord, for a quantized build the converted
    ExportedProgram (torch.export.save bytes), the warnings, and with external weights
    the program's data file (.ptd)."""
    from etdeploy.builder.export import export_model
    from etdeploy.builder.lower import lower

    spec = load_model(ref)
    from etdeploy.verify import check_kinds

    check_kinds(spec.output_kinds, spec.output_names or [], f"{ref.text}: ModelSpec.output_kinds")
    if dynamic:
        spec.dynamic = dynamic
    # The factory's own dynamic dims (ModelSpec.dynamic) are recorded like --dynamic's.
    dynamic = spec.dynamic
    exported = export_model(spec, ref.source_files)
    calibration_record: dict[str, Any] | None = None
    quantized: bytes | None = None
    output_steps: list[dict[str, Any] | None] = []
    warnings: list[str] = []
    if options.quantize:
        from etdeploy.builder.quantize import output_quantization, quantize, saved

        batches, calibration_record = _calibration_batches(spec, options)
        exported = quantize(exported, options.quantize, batches)
        quantized = saved(exported)
        output_steps = output_quantization(exported)
        note = calibration_warning(calibration_record)
        if note:
            warnings.append(note)
    lowered = lower(exported, backend, ref.name if options.external_weights else None)
    warning = lowered.delegation.low_share_warning(backend)
    if warning:
        warnings.append(warning)
    names = list(spec.input_names or [])
    for method in lowered.methods:
        for i, meta in enumerate(method["inputs"]):
            meta["name"] = names[i] if i < len(names) else f"input_{i}"
            dims = dynamic.get(meta["name"], {})
            meta["dynamic"] = {str(d): list(r) for d, r in dims.items()}
        out_names = spec.output_names or []
        for i, meta in enumerate(method["outputs"]):
            meta["name"] = out_names[i] if i < len(out_names) else f"output_{i}"
            if i < len(output_steps) and output_steps[i] is not None:
                meta["quantization"] = output_steps[i]
    manifest = {
        "schema": SCHEMA,
        "model": {"ref": ref.text, "kind": ref.kind, "name": spec.name, "fingerprint": fingerprint},
        "versions": versions(),
        "backend": backend.name,
        "delegates": lowered.delegates,
        "quantization": {
            "mode": options.quantize,
            "calibration": calibration_record,
            "reference": quantized_program_path(Path(f"{ref.name}.pte")).name,
        }
        if options.quantize
        else None,
        # Declared by the factory (ModelSpec.output_kinds): how each output is judged.
        "output_kinds": dict(spec.output_kinds),
        "dynamic": {n: {str(d): list(r) for d, r in dims.items()} for n, dims in dynamic.items()},
        "methods": lowered.methods,
        "delegation": lowered.delegation.to_json(),
        "samples": [str(p) for p in spec.samples],
        "size_bytes": len(lowered.buffer),
        "sha256": hashlib.sha256(lowered.buffer).hexdigest(),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "warnings": warnings,
    }
    if lowered.data is not None:
        # The weights, written beside the .pte: what a run pushes and passes as --data_path.
        manifest["data"] = {
            "name": data_path(Path(f"{ref.name}.pte")).name,
            "size_bytes": len(lowered.data),
            "sha256": hashlib.sha256(lowered.data).hexdigest(),
        }
    elif options.external_weights:
        warnings.append("--external-weights: the model has no weights to write to a .ptd")
    if lowered.etrecord is not None:
        manifest["etrecord"] = f"{ref.name}.etrecord"
    return manifest, lowered.buffer, lowered.etrecord, quantized, warnings, lowered.data


def calibration_warning(record: dict[str, Any] | None) -> str | None:
    """What a verdict must say about where int8's ranges came from."""
    kind = (record or {}).get("kind")
    if kind == "random":
        return (
            "int8 calibrated on noise (--random-calibration): activation ranges come from "
            "random inputs, not real data, so accuracy on real inputs is not what it could be"
        )
    if kind == "examples":
        return (
            "int8 calibrated on the model's example inputs only: they fix shapes for export "
            "and are not a calibration set; give --calibration with real samples"
        )
    return None


def _calibration_unchanged(manifest: dict[str, Any]) -> bool:
    calibration = (manifest.get("quantization") or {}).get("calibration") or {}
    if "digest" not in calibration:
        return True
    try:
        return _calibration_digest(tuple(calibration["sources"])) == calibration["digest"]
    except EtdeployError:  # a source that is gone now
        return False


def _calibration_batches(
    spec: Any, options: BuildOptions
) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    import torch

    from etdeploy.inputs import load_samples, to_tensors

    if options.quantize == "int8-dynamic":
        return [spec.example_inputs], {"kind": "none (dynamic activations)"}
    if options.random_calibration:
        generator = torch.Generator().manual_seed(0)
        batches = [
            tuple(
                torch.randn(t.shape, generator=generator).to(t.dtype) for t in spec.example_inputs
            )
            for _ in range(16)
        ]
        return batches, {
            "kind": "random",
            "samples": 16,
            "note": "calibrated on noise (--random-calibration)",
        }
    paths = options.calibration or tuple(str(p) for p in (spec.calibration or spec.samples))
    if not paths:
        raise InputError(
            "--quantize int8 needs real calibration inputs",
            "give --calibration DIR (sample files like the ones you verify with), "
            "or --random-calibration to calibrate on noise (recorded in the manifest)",
        )
    # The example inputs give each input's dtype and shape, so raw .bin and image
    # samples calibrate as they verify.
    names = spec.input_names or [f"input_{i}" for i in range(len(spec.example_inputs))]
    metas = [
        {"name": n, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
        for n, t in zip(names, spec.example_inputs, strict=False)
    ]
    samples = load_samples(paths, metas)
    batches = [to_tensors(s) for s in samples]
    for sample, batch in zip(samples, batches, strict=True):
        if len(batch) != len(spec.example_inputs) or any(
            b.shape != e.shape or b.dtype != e.dtype
            for b, e in zip(batch, spec.example_inputs, strict=False)
        ):
            given = ", ".join(f"{b.dtype}{list(b.shape)}" for b in batch)
            want = ", ".join(f"{e.dtype}{list(e.shape)}" for e in spec.example_inputs)
            raise InputError(
                f"calibration sample {sample.name} has the wrong shape: given {given}, the model takes {want}",
                "calibrate on samples shaped like the example inputs",
            )
    on_examples = all(
        all(torch.equal(b, e) for b, e in zip(batch, spec.example_inputs, strict=True))
        for batch in batches
    )
    return batches, {
        # Samples equal to the example inputs are shapes, not a calibration set.
        "kind": "examples" if on_examples else "real",
        "samples": len(samples),
        "sources": list(paths),
        # Checked on every cache hit: the factory's own samples are only known
        # after running it, so they cannot be in the cache key.
        "digest": _calibration_digest(tuple(paths)),
    }


def export_artifact(result: BuildResult, output: Path) -> Path:
    """Copy a cached .pte, its manifest and its ETRecord to `output` (each under a
    temporary name, then renamed)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    copies = [(result.pte, output), (result.manifest_path, manifest_path(output))]
    if result.manifest.get("etrecord"):
        # Named after the .pte it describes, so profiling finds it beside a copy.
        copies.append((result.pte.parent / result.manifest["etrecord"], etrecord_path(output)))
    if quantized_program_path(result.pte).is_file():
        # A run of the copy is judged against it like a run of the cached build.
        copies.append((quantized_program_path(result.pte), quantized_program_path(output)))
    if result.data is not None:
        # The weights (--external-weights): model.ptd beside model.pte, as the copy's
        # manifest names it.
        copies.append((result.data, data_path(output)))
    for src, dst in copies:
        tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    return output
