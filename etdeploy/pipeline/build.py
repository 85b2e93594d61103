"""build: the program to run, and what is known of it.

MODEL is built (cached by content, etdeploy.builder), or --pte is taken as it
is. The inputs' and outputs' dtypes and shapes always come from the .pte itself
(the torch-free reader); names, dynamic dims, backend, quantization and
delegation from the build manifest beside it, when there is one.

A --pte given with MODEL must be MODEL's program, or the comparison that follows
judges one model against another: a manifest that names another model, or a
version of MODEL whose files have changed since (the refusal names them; a file
added beside MODEL since is not a change), is refused, and so, for a .pte built
elsewhere, is a method whose inputs MODEL's example inputs do not fit.

A program whose weights live in an external data file (.ptd, --external-weights)
travels as a pair: the build's .ptd, or --data for a --pte built elsewhere (else
the .ptd its manifest names beside it). The pair is checked before anything runs.

Nothing here reads a whole file on a warm run: digests come from the build
manifest, or for a --pte from the local digest record (digests.file_sha256:
an unchanged file is recognised by its stat), and the program is read by its
flatbuffer only, never its constant segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.atomic import read_json_object, write_json
from etdeploy.builder import build, data_file_of
from etdeploy.builder.manifest import ManifestError, ModelNames, read_manifest
from etdeploy.builder.options import BuildOptions
from etdeploy.digests import file_sha256
from etdeploy.errors import EtdeployError, InputError
from etdeploy.model.loader import changed_files, load_model, parse_model_ref
from etdeploy.paths import cache_dir
from etdeploy.pipeline.job import StatusCallback
from etdeploy.program import DataFile, Program, ProgramValue, describe_program

if TYPE_CHECKING:
    from etdeploy.builder.manifest import BuildManifest, ModelNames
    from etdeploy.builder.manifest_records import JsonObject
    from etdeploy.builder.options import InputsCheck
    from etdeploy.model.loader import ModelRef


@dataclass(frozen=True)
class SampleSource:
    """Where a run's samples come from: --inputs (read with --preprocess, labelled by
    --labels), or N noise samples with --random."""

    inputs: tuple[str, ...] = ()
    preprocess: str | None = None
    random_inputs: int = 0
    labels: Path | None = None


@dataclass(frozen=True)
class BuildRequest:
    """What build_program takes: MODEL built with `options`, or a --pte (and its
    --data) taken as it is; the samples, to check them against an uncached build's
    model before its export."""

    model: str | None
    options: BuildOptions = field(default_factory=BuildOptions)
    pte: Path | None = None
    data: Path | None = None
    samples: SampleSource = field(default_factory=SampleSource)


def build_program(request: BuildRequest, status: StatusCallback | None = None) -> Program:
    """Build MODEL (cached), or take --pte (and --data)."""
    if request.pte is not None:
        return _given_program(request, request.pte)

    assert request.model is not None
    built = build(
        request.model,
        request.options,
        status=status,
        check_inputs=_inputs_check(request.samples),
    )
    data: DataFile | None = None
    if built.data is not None and built.manifest.data is not None:
        recorded_data = built.manifest.data
        data = DataFile(built.data, recorded_data.sha256, recorded_data.size_bytes)
    manifest = built.manifest
    return describe_program(built.pte, manifest.sha256, manifest, list(built.warnings), data)


def _given_program(request: BuildRequest, pte: Path) -> Program:
    """--pte (and --data, or the .ptd its manifest names), checked against MODEL when
    one is named: MODEL parsed once, here."""
    if pte.is_dir() or not pte.exists():
        raise InputError(f"no such .pte: {pte}", "check the path given with --pte")
    warnings: list[str] = []
    data: DataFile | None = None
    built_manifest = read_manifest(pte)
    digest = _local_sha256(pte, "--pte")
    if built_manifest is not None and built_manifest.sha256 != digest:
        warnings.append(f"{pte.name}.json describes another file (sha256 differs); ignoring it")
        built_manifest = None
    data_given = request.data or data_file_of(pte, built_manifest)
    if data_given is not None:
        if data_given.is_dir() or not data_given.exists():
            raise InputError(
                f"no such .ptd: {data_given}",
                "check the path given with --data" if request.data else
                f"{pte.name}.json names external data; copy the .ptd beside the .pte",
            )  # fmt: skip
        data = DataFile(data_given, _local_sha256(data_given, "--data"), data_given.stat().st_size)
        recorded = built_manifest.data if built_manifest is not None else None
        if recorded is not None and recorded.sha256 != data.sha256:
            warnings.append(
                f"{data_given.name} is not the .ptd {pte.name} was built with (sha256 "
                "differs); its weights are checked by name only"
            )
    ref = parse_model_ref(request.model) if request.model is not None else None
    if built_manifest is not None:
        if ref is not None:
            _check_built_from(pte, built_manifest, ref)
        # What its build warned about (noise calibration, low delegation) still holds.
        warnings.extend(built_manifest.warnings)
        return describe_program(pte, digest, built_manifest, warnings, data)
    if ref is None:
        return describe_program(pte, digest, None, warnings, data)
    # A .pte built elsewhere: the model still knows its inputs' and outputs' names.
    names = _names_from_model(ref, request.options.use_cache)
    program = describe_program(pte, digest, names, warnings, data)
    _check_signature(program, ref.text, names.examples)
    return program


def _inputs_check(samples: SampleSource) -> InputsCheck | None:
    """For an uncached build: the run's --inputs checked against the model's example
    inputs and dynamic ranges once the factory has run, before the export and the
    lowering (stage checks them again against the program itself)."""
    if not samples.inputs or samples.random_inputs:
        return None

    def check(metas: list[JsonObject]) -> None:
        # The loader stage reads them with (etdeploy.dataset): a folder a class and a
        # labelled .npz are sets of samples here too, not folders or files of arrays.
        from etdeploy.dataset import load_labelled
        from etdeploy.inputs import check_against, parse_preprocess

        preprocess = parse_preprocess(samples.preprocess)
        for sample in load_labelled(list(samples.inputs), metas, preprocess).samples:
            check_against(sample, metas)

    return check


def _local_sha256(path: Path, flag: str) -> str:
    """The sha256 of a local file, read only when its stat changed since it was hashed."""
    try:
        return file_sha256(path)
    except EtdeployError as exc:
        raise InputError(exc.message, f"check the path given with {flag}") from None


def _names_from_model(ref: ModelRef, use_cache: bool = True) -> ModelNames:
    """What the model's factory says of its program (names, samples, output kinds, and
    its example inputs' kinds, dtypes and shapes), kept per model fingerprint like its
    eager reference: a warm run of a --pte does not run the factory again (which imports
    torch and makes every weight)."""
    kept = cache_dir("references") / f"names-{ref.fingerprint()[:32]}.json"
    found = read_json_object(kept) if use_cache else None  # None: not there yet, or damaged
    if found is not None and "examples" in found:
        try:
            return ModelNames.from_json(found)
        except ManifestError:
            pass  # damaged: the factory says it again
    spec = load_model(ref)
    names = ModelNames(
        input_names=tuple(spec.input_names or ()),
        output_names=tuple(spec.output_names or ()),
        samples=tuple(str(p) for p in spec.samples),
        labels=str(spec.labels) if spec.labels is not None else None,
        task=spec.task,
        label_names=tuple(spec.label_names),
        output_kinds=dict(spec.output_kinds),
        examples=tuple(_example_signature(e) for e in spec.example_inputs),
    )
    write_json(names.to_json(), kept)
    return names


def _check_built_from(pte: Path, manifest: BuildManifest, ref: ModelRef) -> None:
    """A --pte whose build manifest names another model, or another version of
    MODEL, is refused: its outputs would be judged against the wrong eager model."""
    model = ref.text
    built = manifest.model
    recorded = built.fingerprint
    if ref.fingerprint() == recorded:
        return
    source = built.ref or built.name or "another model"
    # The same model by kind and name (a cached build records the path it was
    # first built from), whose source has changed since.
    if (built.kind, built.name) == (ref.kind, ref.name):
        hint = f"rebuild it (etdeploy build {model} -o {pte}) or run {model} without --pte"
        files = built.files
        if files is None:  # a manifest from before files were recorded
            raise InputError(
                f"{pte.name} was built from an earlier version of {model}: "
                "the model's fingerprint in its manifest differs from the model's now",
                hint,
            )
        changes = changed_files(files, ref.fingerprint_files())
        if changes.changed or changes.removed:
            raise InputError(
                f"{pte.name} was built from an earlier version of {model}: "
                f"{changes.describe} since it was built",
                hint,
            )
        return  # only files added beside the model since: its build did not read them
    raise InputError(
        f"{pte.name} and {model} disagree: its manifest says it was built from {source}, "
        f"whose fingerprint is not {model}'s",
        f"run it against the model it was built from (etdeploy run {source} --pte {pte}), "
        f"or build one from {model}",
    )


def _check_signature(program: Program, model: str, examples: Sequence[JsonObject]) -> None:
    """MODEL's example inputs must fit the method's inputs (count, kind, dtype, rank,
    and each size: exactly for a static tensor, within the bound for a dynamic one)."""
    wanted = [_describe_value(v) for v in program.inputs]
    given = [_describe_example(e) for e in examples]
    fits = len(wanted) == len(given) and all(
        _fits(value, example) for value, example in zip(program.inputs, examples, strict=True)
    )
    if not fits:
        raise InputError(
            f"{program.pte.name} and {model} disagree: the program's {program.method} takes "
            f"({', '.join(wanted)}), {model}'s example inputs are ({', '.join(given)})",
            f"pass the .pte built from {model} (etdeploy build {model}), or name the model "
            "this .pte was built from",
        )


def _example_signature(example: object) -> JsonObject:
    """An example input as the names cache keeps it: its kind, and a tensor's dtype and shape."""
    shape = getattr(example, "shape", None)
    if shape is None:
        return {"kind": type(example).__name__}
    return {
        "kind": "tensor",
        "dtype": str(getattr(example, "dtype", "")).removeprefix("torch."),
        "shape": [int(d) for d in shape],
    }


def _fits(value: ProgramValue, example: JsonObject) -> bool:
    shape = example.get("shape")
    if not value.is_tensor or not isinstance(shape, list):
        return not value.is_tensor and shape is None
    dims = tuple(shape)
    if example.get("dtype") != value.dtype or len(dims) != len(value.shape):
        return False
    if value.dynamism == "static":
        return dims == value.shape
    if value.dynamism == "dynamic_bound":
        return all(d <= bound for d, bound in zip(dims, value.shape, strict=True))
    return True


def _describe_value(value: ProgramValue) -> str:
    if not value.is_tensor:
        return value.kind
    bound = "<=" if value.dynamism != "static" else ""
    return f"{value.dtype}[{bound}{', '.join(map(str, value.shape))}]"


def _describe_example(example: JsonObject) -> str:
    shape = example.get("shape")
    if not isinstance(shape, list):
        return str(example.get("kind"))
    return f"{example.get('dtype')}[{', '.join(map(str, shape))}]"
