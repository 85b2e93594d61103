"""What each sample should give: the eager model's outputs (cached), a file of
expected outputs, or the program in executorch's Python runtime on this host.

The eager model is the float one, so a quantized build is judged against what
it approximates. torch is imported only when a reference must be computed: a
warm run reads the cache.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from etdeploy.atomic import atomic_write
from etdeploy.builder import cache_key, parse_dynamic, quantized_program_path
from etdeploy.builder.calibration import (
    calibration_batches,
    calibration_unchanged,
    recorded_calibration_unchanged,
)
from etdeploy.builder.export import export_model
from etdeploy.builder.manifest import read_manifest
from etdeploy.builder.quantize import load_quantized, output_quantization, quantize, saved
from etdeploy.devices.lock import held_lock
from etdeploy.digests import file_sha256
from etdeploy.errors import InfraError, InputError
from etdeploy.extras import require_build_extra
from etdeploy.inputs import dtype_name
from etdeploy.model.loader import load_model, parse_model_ref
from etdeploy.npz import read_npz, table_arrays, table_rows
from etdeploy.paths import cache_dir
from etdeploy.quarantine import file_damage, quarantine

if TYPE_CHECKING:
    import torch

    from etdeploy.builder import BuildOptions
    from etdeploy.model.loader import ModelRef
    from etdeploy.program import Program

# Per sample, per tensor output.
Table = list[list[np.ndarray]]


def reference_key(model_fingerprint: str, samples: Sequence[tuple[np.ndarray, ...]]) -> str:
    digest = hashlib.sha256(model_fingerprint.encode())
    for sample in samples:
        for array in sample:
            digest.update(f"{dtype_name(array.dtype)}{array.shape}".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def eager_reference(
    model: str, samples: Sequence[tuple[np.ndarray, ...]], *, use_cache: bool = True
) -> tuple[Table, list[bool]]:
    """The samples through the eager model, cached per (model, inputs).

    The eager model is the float one, so a quantized build is judged against what
    it approximates. Also says, per sample, whether it is one of the model's
    example inputs (which the caller warns about).
    """
    return _eager(parse_model_ref(model), samples, use_cache)


def _eager(
    ref: ModelRef, samples: Sequence[tuple[np.ndarray, ...]], use_cache: bool
) -> tuple[Table, list[bool]]:
    # A reference can be read from the cache without torch; computing one needs it.
    return _cached(
        f"float-{reference_key(ref.fingerprint(), samples)[:32]}",
        lambda: _run_eager(ref, samples),
        use_cache=use_cache,
    )


def quantized_reference(
    program: Path, samples: Sequence[tuple[np.ndarray, ...]], *, use_cache: bool = True
) -> Table:
    """The samples through the converted (quantize/dequantize) program a quantized
    build lowered (builder.quantized_program_path), cached per (its bytes, inputs).
    This is what the device must reproduce to the quantization step."""
    # Recognised by its stat on a warm run: the converted program of a large model is
    # as big as its weights, and hashing it each run would cost what the file does.
    key = reference_key(file_sha256(program), samples)[:32]
    outputs, _ = _cached(
        f"quantized-{key}", lambda: (_run_quantized(program, samples), []), use_cache=use_cache
    )
    return outputs


@dataclass(frozen=True)
class QuantizedProgram:
    """The quantized eager program a device's int8 program is judged against."""

    path: Path
    source: str  # where it came from, as the verdict says it
    # Per output, the step of the grid it lies on (None: not a quantized output;
    # () when the build's manifest says it).
    steps: tuple[float | None, ...]
    # Not the build's own: MODEL's, from the build cache or quantized again.
    derived: bool = True


@dataclass(frozen=True)
class Expected:
    """What the samples should give: the reference's table (a --reference file, or
    MODEL's eager outputs), and for an int8 program the quantized eager program's."""

    outputs: Table
    kind: str  # "file" or "eager"
    # Per sample, whether it is one of the model's example inputs (eager only).
    example_hits: list[bool]
    quantized: QuantizedProgram | None = None
    quantized_outputs: Table | None = None


def expected_outputs(
    model: str | None,
    reference: Path | None,
    options: BuildOptions,
    program: Program,
    samples: Sequence[tuple[np.ndarray, ...]],
) -> Expected:
    """The references of stage: --reference's table, or MODEL's eager outputs (MODEL
    parsed once, here); and the quantized eager program to hold an int8 program to
    (the build's own beside the .pte, or for a .pte built elsewhere the one MODEL and
    the run's `options` give) with its outputs; none for a float program or without
    MODEL."""
    mode = program.quantization or options.quantize
    derive = program.quantized_program is None and mode is not None
    needed = model is not None and (reference is None or derive)
    ref = parse_model_ref(model) if needed and model is not None else None
    if reference is not None:
        outputs = load_reference_file(reference, len(samples), len(program.tensor_outputs))
        kind, hits = "file", [False] * len(samples)
    else:
        assert ref is not None
        (outputs, hits), kind = _eager(ref, samples, options.use_cache), "eager"
    source: QuantizedProgram | None = None
    if program.quantized_program is not None:
        source = QuantizedProgram(
            program.quantized_program, "the build's, beside the .pte", (), derived=False
        )
    elif mode is not None and ref is not None:
        source = derived_quantized_program(ref, replace(options, quantize=mode))
    if source is None:
        return Expected(outputs, kind, hits)
    quantized = quantized_reference(source.path, samples, use_cache=options.use_cache)
    return Expected(outputs, kind, hits, source, quantized)


def derived_quantized_program(ref: ModelRef, options: BuildOptions) -> QuantizedProgram:
    """For a quantized .pte built elsewhere (nothing beside it): the quantized eager
    program MODEL's build with `options` lowers. From the build cache when that
    build is there; else MODEL quantized again as the build does it (the same
    export, XNNPACK quantizer and calibration set: builder.calibration), kept in
    the reference cache by the same key as the build, so a warm run reads it."""
    model = ref.text
    key = cache_key(ref, options, ref.fingerprint())[:32]
    built = cache_dir("builds") / key / f"{ref.name}.pte"
    manifest = read_manifest(built) if built.is_file() else None
    if manifest is not None and calibration_unchanged(manifest):
        path = quantized_program_path(built)
        if path.is_file():
            outputs = manifest.methods[0].outputs
            steps = tuple(o.quantization.scale if o.quantization else None for o in outputs)
            return QuantizedProgram(
                path, f"from {model}'s {options.quantize} build in the build cache", steps
            )
    path = cache_dir("references") / f"quantized-program-{key}.pt2"
    record_path = path.with_suffix(".json")
    record: dict[str, Any] | None = None
    if options.use_cache and path.is_file():
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            record = None
    if record is None or not recorded_calibration_unchanged(record):
        record = _quantize_again(ref, options, path)
        tmp = record_path.with_name(f".{record_path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, record_path)
    calibration = record.get("calibration") or {}
    on = (
        f"{calibration['samples']} sample(s)"
        if "samples" in calibration
        else str(calibration.get("kind", "its calibration"))
    )
    return QuantizedProgram(
        path,
        f"{model} quantized again to {options.quantize} as its build would be (calibrated on {on})",
        tuple(record["steps"]),
    )


def _quantize_again(ref: ModelRef, options: BuildOptions, path: Path) -> dict[str, Any]:
    """MODEL exported, calibrated and quantized as builder.build does it; the
    converted program written to `path`; its calibration record and output steps."""
    assert options.quantize is not None
    spec = load_model(ref)
    if options.dynamic:
        spec.dynamic = parse_dynamic(options.dynamic)
    batches, calibration = calibration_batches(spec, options)
    converted = quantize(export_model(spec, ref.source_files), options.quantize, batches)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(saved(converted))
    os.replace(tmp, path)
    steps = [o["scale"] if o else None for o in output_quantization(converted)]
    return {"mode": options.quantize, "calibration": calibration, "steps": steps}


def _cached(
    name: str, compute: Callable[[], tuple[Table, list[bool]]], *, use_cache: bool
) -> tuple[Table, list[bool]]:
    """A reference table from the cache, or computed and written there (atomically),
    with its sha256 beside it (NAME.sha256): a table whose bytes are not the ones
    recorded is quarantined (etdeploy.quarantine) and computed again."""
    path = cache_dir("references") / f"{name}.npz"
    record = path.with_suffix(".sha256")
    # flock(2), as filelock takes it on POSIX: the same lock as runs that used filelock.
    with held_lock(Path(f"{path}.lock"), -1):
        if use_cache:
            found = _read_verified(path, record)
            if found is not None:
                return found
        outputs, hits = compute()
        _write_table(path, record, outputs, hits)
    return outputs, hits


def _read_verified(path: Path, record: Path) -> tuple[Table, list[bool]] | None:
    if not os.path.lexists(path):
        return None
    try:
        digest: str | None = record.read_text().strip()
    except OSError:
        digest = None  # written before records were kept, or cut before its record
    if not digest:
        path.unlink(missing_ok=True)
        return None
    damage = file_damage(path, digest)
    if damage is None:
        try:
            return _read_reference_cache(path)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            damage = f"{path.name} cannot be read ({exc})"
    quarantine(path, "reference outputs", damage)
    record.unlink(missing_ok=True)
    return None


def _write_table(path: Path, record: Path, outputs: Table, hits: list[bool]) -> None:
    """The table, then its digest: a run cut between them leaves a table without a
    record, which the next run computes again."""
    buffer = io.BytesIO()
    # Keys are count, example_hits, o<k> and s<i>_o<k>, never savez's own
    # allow_pickle, which is why numpy's stubs reject a ** of str keys here.
    np.savez(buffer, **_table_arrays(outputs, hits))  # type: ignore[arg-type]
    data = buffer.getvalue()
    atomic_write(path, data)
    atomic_write(record, (hashlib.sha256(data).hexdigest() + "\n").encode())


def _table_arrays(outputs: Table, hits: list[bool]) -> dict[str, np.ndarray]:
    """A cached table's arrays: its rows as etdeploy.npz keeps a table (o<k> stacked when
    every sample's outputs are alike, else s<i>_o<k>), their count and example hits."""
    return {
        "count": np.array(len(outputs)),
        "example_hits": np.array(hits, dtype=bool),
        **table_arrays(outputs, "o"),
    }


def _read_reference_cache(path: Path) -> tuple[Table, list[bool]]:
    archive = read_npz(path)
    count = int(archive["count"])
    rows = table_rows(archive, "o", count, None)
    return [list(row) for row in rows], [bool(x) for x in archive["example_hits"]]


def _run_quantized(program: Path, samples: Sequence[tuple[np.ndarray, ...]]) -> Table:
    require_build_extra("the quantized program's reference")
    import torch

    module = load_quantized(program)
    with torch.no_grad():
        return [
            [
                t.detach().contiguous().numpy()
                for t in _flatten_tensors(
                    module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in sample))
                )
            ]
            for sample in samples
        ]


def _run_eager(
    ref: ModelRef, samples: Sequence[tuple[np.ndarray, ...]]
) -> tuple[Table, list[bool]]:
    import torch

    spec = load_model(ref)
    module = spec.module
    if isinstance(module, torch.export.ExportedProgram):
        module = module.module()
    examples = tuple(
        np.asarray(t.detach().contiguous().numpy())
        for t in spec.example_inputs
        if isinstance(t, torch.Tensor)
    )
    outputs: Table = []
    hits: list[bool] = []
    with torch.no_grad():
        for sample in samples:
            result = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in sample))
            outputs.append([t.detach().contiguous().numpy() for t in _flatten_tensors(result)])
            hits.append(
                len(examples) == len(sample)
                and all(
                    e.shape == a.shape and np.array_equal(e, a)
                    for e, a in zip(examples, sample, strict=True)
                )
            )
    return outputs, hits


def _flatten_tensors(value: object) -> list[torch.Tensor]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _flatten_tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _flatten_tensors(item)]
    return []  # scalars: the .pte returns them as non-tensor values, not files


def load_reference_file(path: Path, samples: int, outputs: int) -> Table:
    """--reference outputs.npz: arrays s<S>_o<K> (or o<K> when there is one sample)."""
    if not path.is_file():
        raise InputError(f"reference not found: {path}", "give an .npz of expected outputs")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"cannot read {path}: {exc}", "give an .npz written by numpy.savez"
        ) from exc
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise InputError(
            f"{path.name} holds one array; --reference takes an .npz of expected outputs",
            "numpy.savez('expected.npz', s0_o0=..., s0_o1=...) with one array per sample and output",
        )
    with archive:
        keys = set(archive.keys())
        table = []
        for s in range(samples):
            row = []
            for k in range(outputs):
                key = f"s{s}_o{k}" if f"s{s}_o{k}" in keys else f"o{k}"
                if key not in keys or (key == f"o{k}" and samples > 1):
                    raise InputError(
                        f"{path.name} has no expected value for sample {s}, output {k}",
                        "name its arrays s<sample>_o<output>, e.g. s0_o0",
                    )
                row.append(archive[key])
            table.append(row)
    return table


def host_runtime_outputs(
    pte: Path,
    method_name: str,
    samples: Sequence[tuple[np.ndarray, ...]],
    data: Path | None = None,
) -> Table:
    """The .pte (with its external data, `data`) through executorch's Python runtime on
    this machine: the second reference that separates "the lowering changed the
    numbers" from "the device differs from this host"."""
    require_build_extra("--host-check (executorch's Python runtime)")
    import torch
    from executorch.runtime import Runtime

    try:
        # Runtime.load_program(..., data_path=) in executorch 1.5.1 (runtime/__init__.py,
        # read 2026-12-03): the .ptd the program's external weights are read from.
        program = Runtime.get().load_program(pte, data_path=data)
        method = program.load_method(method_name)
    except Exception as exc:  # the runtime raises RuntimeError with its own text
        raise InfraError(
            f"executorch's Python runtime cannot load {pte.name}: {exc}",
            "run without --host-check, or build for a backend this host links (xnnpack, portable)",
            device="host",
        ) from exc
    rows = []
    for sample in samples:
        result = method.execute([torch.from_numpy(np.ascontiguousarray(a)) for a in sample])
        rows.append(
            [t.detach().contiguous().numpy() for t in result if isinstance(t, torch.Tensor)]
        )
    return rows
