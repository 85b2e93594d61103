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
from collections.abc import Callable
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

# Hears each stage of an uncached build as it starts.
StatusCallback = Callable[[str], None]

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


def build(model: str, options: BuildOptions, status: StatusCallback | None = None) -> BuildResult:
    """Build (or fetch from the cache) one artefact; returns the cached .pte path.

    `status` hears each stage as it starts (loading, export, quantize, lower,
    serialise, caching), for a caller that shows progress. Torch's and
    ExecuTorch's own logging and warnings are captured (BuildResult.log, or the
    error's log), never printed.
    """
    from etdeploy.builder.backends import get_backend
    from etdeploy.builder.logs import captured_library_output

    say = status or (lambda _text: None)

    started = time.perf_counter()
    backend = get_backend(options.backend)  # bad names fail before any work
    if options.quantize not in (None, "int8", "int8-dynamic"):
        raise UsageError(f"unknown quantization {options.quantize!r}", "use int8 or int8-dynamic")
    if options.quantize and (why := unsupported(backend.name, options.quantize)):
        raise UsageError(f"--quantize {why}", "use --backend xnnpack with --quantize")
    if options.external_weights and (why := unsupported(backend.name, None, True)):
        raise UsageError(
            f"--external-weights: {why}",
            f"use --backend {' or '.join(EXTERNAL_WEIGHT_BACKENDS)} with --external-weights",
        )
    dynamic = parse_dynamic(options.dynamic)
    ref = parse_model_ref(model)
    uncalibrated = not options.calibration and not options.random_calibration
    if ref.kind == "pt2" and options.quantize == "int8" and uncalibrated:
        # A saved program ships no samples: said before torch is even imported.
        raise _no_calibration_error()
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
        # torch and executorch log and warn on every export; users see our
        # warnings (low delegation, noise calibration), and theirs with --verbose.
        # torch first: its loggers get their own handlers on import, and the
        # capture replaces the handlers that exist when it starts (executorch's
        # log through the root logger, which the capture holds).
        say("importing torch")
        import torch  # noqa: F401

        with captured_library_output() as captured:
            manifest, buffer, etrecord, quantized, warnings, external = _build_uncached(
                ref, fingerprint, options, backend, dynamic, say
            )
        manifest["cache_key"] = key
        say("saving the program to the build cache")
        _store(entry, pte, manifest, buffer, etrecord, quantized, external)
    return BuildResult(pte, manifest, False, time.perf_counter() - started, warnings, captured.text)


def _store(
    entry: Path,
    pte: Path,
    manifest: dict[str, Any],
    buffer: bytes,
    etrecord: bytes | None,
    quantized: bytes | None,
    external: bytes | None = None,
) -> None:
    """The build's files into its cache entry, whole or not at all."""
    tmp: Path | None = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=entry.parent))
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
    except OSError as exc:
        raise _write_error(
            exc, entry.parent, "the build cache",
            space="free space there, or point ETDEPLOY_CACHE_DIR at a folder with room; "
            "`etdeploy clean` prunes old builds",
            access="point ETDEPLOY_CACHE_DIR at a folder you can write to",
        ) from None  # fmt: skip
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _build_uncached(
    ref: ModelRef,
    fingerprint: str,
    options: BuildOptions,
    backend: Any,
    dynamic: dict[str, dict[int, tuple[int, int]]],
    say: StatusCallback,
) -> tuple[dict[str, Any], bytes, bytes | None, bytes | None, list[str], bytes | None]:
    """The manifest, the program, its ETRecord, for a quantized build the converted
    ExportedProgram (torch.export.save bytes), the warnings, and with external weights
    the program's data file (.ptd)."""
    from etdeploy.builder.export import export_model
    from etdeploy.builder.lower import lower

    say(f"loading {ref.text}")
    spec = load_model(ref)
    from etdeploy.verify import check_kinds

    check_kinds(spec.output_kinds, spec.output_names or [], f"{ref.text}: ModelSpec.output_kinds")
    if dynamic:
        spec.dynamic = dynamic
    # The factory's own dynamic dims (ModelSpec.dynamic) are recorded like --dynamic's.
    dynamic = spec.dynamic
    # The calibration set is checked before the export: a missing one is said
    # as soon as the model is loaded, not after torch.export has run.
    calibration = _calibration_batches(spec, options) if options.quantize else None
    say("exporting with torch.export")
    exported = export_model(spec, ref.source_files)
    calibration_record: dict[str, Any] | None = None
    quantized: bytes | None = None
    output_steps: list[dict[str, Any] | None] = []
    warnings: list[str] = []
    if options.quantize and calibration is not None:
        from etdeploy.builder.quantize import output_quantization, quantize, saved

        batches, calibration_record = calibration
        say(
            f"quantizing to {options.quantize}"
            + (f", calibrating on {len(batches)} sample(s)" if options.quantize == "int8" else "")
        )
        exported = quantize(exported, options.quantize, batches)
        quantized = saved(exported)
        output_steps = output_quantization(exported)
        note = calibration_warning(calibration_record)
        if note:
            warnings.append(note)
    lowered = lower(exported, backend, say, ref.name if options.external_weights else None)
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


def _no_calibration_error() -> InputError:
    return InputError(
        "--quantize int8 needs real calibration inputs",
        "give --calibration DIR (sample files like the ones you verify with), "
        "or --random-calibration to calibrate on noise (recorded in the manifest)",
    )


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
        raise _no_calibration_error()
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


def default_output_name(model_name: str, options: BuildOptions) -> str:
    """What `etdeploy build` names its output without -o: the model, the backend
    and the quantization, so builds for two backends never share a file:
    digits-xnnpack.pte, digits-xnnpack-int8.pte, digits-portable.pte."""
    parts = [model_name, options.backend, *([options.quantize] if options.quantize else [])]
    return "-".join(parts) + ".pte"


@dataclass(frozen=True)
class Exported:
    """What export_artifact wrote: the .pte and the files beside it."""

    pte: Path
    files: tuple[Path, ...]
    # The target already held this very program (same sha256): nothing changed.
    unchanged: bool
    # The target held another program and --force replaced it.
    replaced: bool = False


def export_artifact(
    result: BuildResult, output: Path, *, etrecord: bool = False, force: bool = False
) -> Exported:
    """Copy a cached build to `output`: the .pte, its manifest, the quantized
    program a run of it is judged against, and with `etrecord` its ETRecord (what
    `run --profile` needs to name operators and modules).

    Never overwrites a different program silently: a file at `output` whose
    sha256 differs is refused unless `force`. All files are written whole or not
    at all (temporary names, fsync, rename); a full disk, a parent that is a file
    or a folder that cannot be created is a UsageError with a hint, and leaves
    nothing behind.
    """
    from etdeploy.atomic import atomic_copy_all

    _make_parent(output)
    if output.is_dir():
        raise UsageError(
            f"cannot write {output}: it is a folder", "give -o a file name ending in .pte"
        )
    new_sha = result.manifest["sha256"]
    existing = _sha256_of(output) if output.exists() else None
    if existing is not None and existing != new_sha and not force:
        raise UsageError(
            f"{output} exists and holds another program ({_describe_existing(output)}); "
            "not overwriting it",
            "pass --force to replace it, or choose another -o (without -o the name "
            "carries the backend and quantization)",
        )
    copies = [(result.manifest_path, manifest_path(output))]
    if quantized_program_path(result.pte).is_file():
        # A run of the copy is judged against it like a run of the cached build.
        copies.append((quantized_program_path(result.pte), quantized_program_path(output)))
    if etrecord and result.manifest.get("etrecord"):
        # Named after the .pte it describes, so profiling finds it beside the copy.
        copies.append((result.pte.parent / result.manifest["etrecord"], etrecord_path(output)))
    if result.data is not None:
        # The weights (--external-weights): model.ptd beside model.pte, as the copy's
        # manifest names it.
        copies.append((result.data, data_path(output)))
    # The .pte last: it is the file a reader looks for first.
    copies.append((result.pte, output))
    replaced = existing is not None and existing != new_sha
    try:
        atomic_copy_all(copies)
    except OSError as exc:
        raise _write_error(
            exc, output.parent, str(output),
            space="free space there, or choose another -o",
            access="choose an -o in a folder you can write to",
        ) from None  # fmt: skip
    written = {dst for _, dst in copies}
    if replaced:
        # Files beside the replaced program describe it, not this one.
        for stale in (etrecord_path(output), quantized_program_path(output), data_path(output)):
            if stale not in written:
                stale.unlink(missing_ok=True)
    return Exported(output, tuple(dst for _, dst in copies), existing == new_sha, replaced)


def _make_parent(output: Path) -> None:
    parent = output.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next(
            (p for p in (parent, *parent.parents) if p.exists() and not p.is_dir()), parent
        )
        raise UsageError(
            f"cannot write {output}: {blocker} is a file, not a folder",
            "choose another -o, or move that file out of the way",
        ) from None
    except OSError as exc:
        raise UsageError(
            f"cannot create the folder {parent} for {output}: {exc.strerror or exc}",
            "choose an -o in a folder you can write to",
        ) from None


def _write_error(exc: OSError, where: Path, what: str, *, space: str, access: str) -> UsageError:
    """An OSError while writing as one line: what could not be written, why, and
    the hint that fits (`space` for a full disk, `access` for a folder that
    cannot be written)."""
    import errno

    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return UsageError(
            f"no space left to write {what} (the filesystem of {where} is full)", space
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return UsageError(f"cannot write {what}: {exc.strerror} ({where})", access)
    return UsageError(f"cannot write {what}: {exc.strerror or exc}", space)


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        raise UsageError(
            f"{path} exists and cannot be read ({exc.strerror}); not overwriting it",
            "choose another -o",
        ) from None
    return digest.hexdigest()


def _describe_existing(path: Path) -> str:
    try:
        manifest = read_manifest(path)
    except (OSError, ValueError):
        manifest = None
    if manifest is None:
        return "not built by etdeploy, or its manifest is gone"
    quant = (manifest.get("quantization") or {}).get("mode")
    return f"{manifest.get('backend', '?')}{' ' + quant if quant else ''}, built {manifest.get('built_at', '?')}"
