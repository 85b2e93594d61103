"""A build: model -> export -> (quantize) -> lower -> .pte + manifest.

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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import etdeploy
from etdeploy.builder.artifact import (
    write_error,
)
from etdeploy.builder.backends import Backend, get_backend
from etdeploy.builder.calibration import (
    calibration_batches,
    calibration_digest,
    calibration_unchanged,
    calibration_warning,
    example_metas,
    no_calibration_error,
)
from etdeploy.builder.export import export_model
from etdeploy.builder.lower import lower
from etdeploy.builder.manifest import (
    SCHEMA,
    BuildManifest,
    Calibration,
    DataFileRecord,
    MethodRecord,
    ModelSource,
    Quantization,
    read_manifest,
    write_manifest,
)
from etdeploy.builder.manifest_records import JsonObject, OutputQuantization, ValueRecord
from etdeploy.builder.options import (
    EXTERNAL_WEIGHT_BACKENDS,
    BuildOptions,
    BuildResult,
    InputsCheck,
    StatusCallback,
    data_path,
    quantized_program_path,
    unsupported,
)
from etdeploy.builder.quantize import output_quantization, quantize, saved
from etdeploy.devices.lock import held_lock
from etdeploy.errors import UsageError
from etdeploy.extras import installed_version, require_build_extra
from etdeploy.library_output import captured_library_output
from etdeploy.model.loader import ModelRef, load_model, parse_model_ref
from etdeploy.model.spec import ModelSpec
from etdeploy.paths import cache_dir
from etdeploy.quarantine import file_damage, noticed_damage, quarantine

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

    from etdeploy.builder.lower import Lowered
    from etdeploy.builder.quantize import QuantizationStep

BUILD_REVISION = 7


def versions() -> dict[str, str]:
    return {
        "etdeploy": etdeploy.__version__,
        "torch": installed_version("torch"),
        "executorch": installed_version("executorch"),
    }


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


def cache_key(ref: ModelRef, options: BuildOptions, fingerprint: str) -> str:
    payload = {
        "model": fingerprint,
        "options": options.key_fields(),
        "calibration": calibration_digest(options.calibration)
        if options.quantize == "int8"
        else "",
        "versions": versions(),
        # Bumped whenever what a build records changes, so old cache entries are not served.
        "format": f"{SCHEMA}+{BUILD_REVISION}",
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def build(
    model: str,
    options: BuildOptions,
    status: StatusCallback | None = None,
    check_inputs: InputsCheck | None = None,
) -> BuildResult:
    """Build (or fetch from the cache) one artefact; returns the cached .pte path.

    `status` hears each stage as it starts (loading, export, quantize, lower,
    serialise, caching), for a caller that shows progress. `check_inputs`, on an
    uncached build, is given the model's inputs as soon as the model is loaded,
    before the export: the samples a run will use fail there, not after the
    lowering. A cache hit does not call it (the caller checks against the
    program, at no cost). Torch's and
    ExecuTorch's own logging and warnings are captured (BuildResult.log, or the
    error's log), never printed.
    """
    require_build_extra(f"building {model}")

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
        raise no_calibration_error()
    fingerprint = ref.fingerprint()
    key = cache_key(ref, options, fingerprint)
    pte = _cached_pte(ref, key)
    entry = pte.parent
    # flock(2), as filelock takes it on POSIX: the same lock as builds that used filelock
    # (whose import cost every warm run ~6 ms).
    with held_lock(Path(str(entry) + ".lock"), -1):
        # A damaged entry is moved aside and built again; the result says so.
        with noticed_damage() as damage:
            cached = _verified_entry(entry, pte, ref) if options.use_cache else None
        if cached is not None and not calibration_unchanged(cached):
            cached = None  # calibrated on sample files that have changed since: rebuild
        if cached is not None:
            return BuildResult(
                pte, cached, True, time.perf_counter() - started, list(cached.warnings)
            )
        # torch and executorch log and warn on every export; users see our
        # warnings (low delegation, noise calibration), and theirs with --verbose.
        # torch first: its loggers get their own handlers on import, and the
        # capture replaces the handlers that exist when it starts (executorch's
        # log through the root logger, which the capture holds).
        say("importing torch")
        import torch  # noqa: F401

        with captured_library_output() as captured:
            built = _build_uncached(ref, fingerprint, options, backend, dynamic, say, check_inputs)
        # What the entry's other files hold, so a cache hit can check them too.
        manifest = replace(
            built.manifest,
            cache_key=key,
            etrecord_sha256=hashlib.sha256(built.etrecord).hexdigest()
            if built.etrecord is not None
            else None,
        )
        if built.quantized is not None and manifest.quantization is not None:
            quantized_sha256 = hashlib.sha256(built.quantized).hexdigest()
            quantization = replace(manifest.quantization, reference_sha256=quantized_sha256)
            manifest = replace(manifest, quantization=quantization)
        say("saving the program to the build cache")
        _store(entry, pte, replace(built, manifest=manifest))
    seconds = time.perf_counter() - started
    return BuildResult(pte, manifest, False, seconds, [*damage, *built.warnings], captured.text)


def _verified_entry(entry: Path, pte: Path, ref: ModelRef) -> BuildManifest | None:
    """The manifest of the cache entry for `pte` when every file of it holds the bytes
    the manifest records (etdeploy.quarantine); None when there is no entry, and
    after moving a damaged one aside."""
    if not os.path.lexists(entry):
        return None
    if entry.is_symlink() or not entry.is_dir():
        quarantine(entry, f"build of {ref.text}", f"{entry.name} is not a folder of the cache")
        return None
    manifest = read_manifest(pte) if os.path.lexists(pte) else None
    if manifest is None:
        return None  # unfinished or unreadable: a build writes the entry anew
    checks: list[tuple[Path, str | None]] = [(pte, manifest.sha256)]
    if manifest.data is not None:
        checks.append((data_path(pte), manifest.data.sha256))
    if manifest.etrecord:
        checks.append((entry / manifest.etrecord, manifest.etrecord_sha256))
    quantization = manifest.quantization
    if quantization is not None and quantization.reference:
        reference = quantized_program_path(pte)
        checks.append((reference, quantization.reference_sha256))
    for path, digest in checks:
        damage = file_damage(path, digest)
        if damage is not None:
            quarantine(entry, f"build of {ref.text}", damage)
            return None
    return manifest


@dataclass(frozen=True)
class PlannedBuild:
    """What `build` will look up before it runs anything: its cache key, and
    whether the cache holds a program under it."""

    key: str
    cached: bool


def planned_build(model: str, options: BuildOptions) -> PlannedBuild:
    """The cache key of `build(model, options)` and whether it is cached, without
    running the factory or importing torch: what a caller checks first (an -o that
    must not be clobbered) before an uncached build's minutes."""
    ref = parse_model_ref(model)
    key = cache_key(ref, options, ref.fingerprint())
    return PlannedBuild(key, options.use_cache and _cached_pte(ref, key).is_file())


def _cached_pte(ref: ModelRef, key: str) -> Path:
    return cache_dir("builds") / key[:32] / f"{ref.name}.pte"


def _store(entry: Path, pte: Path, built: _Built) -> None:
    """The build's files into its cache entry, whole or not at all."""
    manifest = built.manifest
    tmp: Path | None = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=entry.parent))
        (tmp / pte.name).write_bytes(built.program)
        if built.external is not None and manifest.data is not None:
            (tmp / manifest.data.name).write_bytes(built.external)
        if built.etrecord is not None and manifest.etrecord is not None:
            (tmp / manifest.etrecord).write_bytes(built.etrecord)
        if built.quantized is not None:
            quantized_program_path(tmp / pte.name).write_bytes(built.quantized)
        write_manifest(tmp / pte.name, manifest)
        if entry.is_symlink():
            entry.unlink()
        elif entry.exists():
            shutil.rmtree(entry)
        os.replace(tmp, entry)
    except OSError as exc:
        raise write_error(
            exc, entry.parent, "the build cache",
            space="free space there, or point ETDEPLOY_CACHE_DIR at a folder with room; "
            "`etdeploy clean` prunes old builds",
            access="point ETDEPLOY_CACHE_DIR at a folder you can write to",
        ) from None  # fmt: skip
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True)
class _Built:
    """An uncached build's files and what it says of them."""

    manifest: BuildManifest
    program: bytes
    etrecord: bytes | None
    # For a quantized build, the converted ExportedProgram (torch.export.save bytes).
    quantized: bytes | None
    warnings: list[str]
    # With external weights, the program's data file (.ptd).
    external: bytes | None


def _build_uncached(
    ref: ModelRef,
    fingerprint: str,
    options: BuildOptions,
    backend: Backend,
    dynamic: dict[str, dict[int, tuple[int, int]]],
    say: StatusCallback,
    check_inputs: InputsCheck | None = None,
) -> _Built:
    """Load, export, (quantize) and lower the model; the manifest records it all."""
    say(f"loading {ref.text}")
    spec = load_model(ref)
    from etdeploy.numerics import check_kinds

    check_kinds(spec.output_kinds, spec.output_names or [], f"{ref.text}: ModelSpec.output_kinds")
    if dynamic:
        spec.dynamic = dynamic
    if check_inputs is not None:
        check_inputs(example_metas(spec))
    # The calibration set is checked before the export: a missing one is said
    # as soon as the model is loaded, not after torch.export has run.
    calibration = calibration_batches(spec, options) if options.quantize else None
    say("exporting with torch.export")
    exported = export_model(spec, ref.source_files)
    warnings: list[str] = []
    quantization = _Quantization(exported, None, [], None)
    if options.quantize and calibration is not None:
        quantization = _quantize(exported, options.quantize, calibration, say)
        note = calibration_warning(quantization.calibration)
        if note:
            warnings.append(note)
    lowered = lower(
        quantization.exported, backend, say, ref.name if options.external_weights else None
    )
    warning = lowered.delegation.low_share_warning(backend)
    if warning:
        warnings.append(warning)
    # The factory's own dynamic dims (ModelSpec.dynamic) are recorded like --dynamic's.
    methods = _named_methods(lowered.methods, spec, quantization.output_steps)
    manifest = _manifest(ref, fingerprint, options, spec, backend, lowered, quantization, methods)
    if lowered.data is None and options.external_weights:
        warnings.append("--external-weights: the model has no weights to write to a .ptd")
    manifest = replace(manifest, warnings=tuple(warnings))
    return _Built(
        manifest, lowered.buffer, lowered.etrecord, quantization.saved, warnings, lowered.data
    )


@dataclass(frozen=True)
class _Quantization:
    """The program after quantization (the exported one when not quantized)."""

    exported: ExportedProgram
    # Its torch.export.save bytes: the quantized eager reference.
    saved: bytes | None
    # Each output's quantization steps (None for a float output).
    output_steps: list[QuantizationStep | None]
    # How it was calibrated (etdeploy.builder.calibration).
    calibration: JsonObject | None


def _quantize(
    exported: ExportedProgram,
    mode: str,
    calibration: tuple[list[tuple[torch.Tensor, ...]], JsonObject],
    say: StatusCallback,
) -> _Quantization:
    batches, record = calibration
    say(
        f"quantizing to {mode}"
        + (f", calibrating on {len(batches)} sample(s)" if mode == "int8" else "")
    )
    quantized = quantize(exported, mode, batches)
    return _Quantization(quantized, saved(quantized), output_quantization(quantized), record)


def _named_methods(
    methods: Sequence[MethodRecord],
    spec: ModelSpec,
    output_steps: Sequence[QuantizationStep | None],
) -> tuple[MethodRecord, ...]:
    """Each method's inputs and outputs with the model's names (input_0, output_0, ...
    as lowered where it gives none), inputs with their dynamic dims and outputs with
    their quantization steps."""
    names = list(spec.input_names or [])
    out_names = spec.output_names or []

    def named_input(i: int, value: ValueRecord) -> ValueRecord:
        name = names[i] if i < len(names) else value.name
        dims = spec.dynamic.get(name, {})
        return replace(value, name=name, dynamic={str(d): (r[0], r[1]) for d, r in dims.items()})

    def named_output(i: int, value: ValueRecord) -> ValueRecord:
        step = output_steps[i] if i < len(output_steps) else None
        return replace(
            value,
            name=out_names[i] if i < len(out_names) else value.name,
            quantization=OutputQuantization(**step) if step is not None else None,
        )

    return tuple(
        replace(
            method,
            inputs=tuple(named_input(i, v) for i, v in enumerate(method.inputs)),
            outputs=tuple(named_output(i, v) for i, v in enumerate(method.outputs)),
        )
        for method in methods
    )


def _manifest(
    ref: ModelRef,
    fingerprint: str,
    options: BuildOptions,
    spec: ModelSpec,
    backend: Backend,
    lowered: Lowered,
    quantization: _Quantization,
    methods: tuple[MethodRecord, ...],
) -> BuildManifest:
    """The build's record (.pte.json), written beside the program."""
    calibration = quantization.calibration
    return BuildManifest(
        # File by file, so a --pte refused as stale can say which file changed.
        model=ModelSource(ref.text, ref.kind, spec.name, fingerprint, ref.fingerprint_files()),
        versions=versions(),
        backend=backend.name,
        delegates=tuple(lowered.delegates),
        quantization=Quantization(
            options.quantize,
            Calibration.from_json(calibration) if calibration is not None else None,
            quantized_program_path(Path(f"{ref.name}.pte")).name,
        )
        if options.quantize
        else None,
        output_kinds=dict(spec.output_kinds),
        dynamic={
            n: {str(d): (r[0], r[1]) for d, r in dims.items()} for n, dims in spec.dynamic.items()
        },
        methods=methods,
        delegation=lowered.delegation.record(),
        samples=tuple(str(p) for p in spec.samples),
        labels=str(spec.labels) if spec.labels is not None else None,
        task=spec.task,
        label_names=tuple(spec.label_names),
        size_bytes=len(lowered.buffer),
        sha256=hashlib.sha256(lowered.buffer).hexdigest(),
        built_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        # The weights, written beside the .pte: what a run pushes and passes as --data_path.
        data=DataFileRecord(
            data_path(Path(f"{ref.name}.pte")).name,
            len(lowered.data),
            hashlib.sha256(lowered.data).hexdigest(),
        )
        if lowered.data is not None
        else None,
        etrecord=f"{ref.name}.etrecord" if lowered.etrecord is not None else None,
    )
