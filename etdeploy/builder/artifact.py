"""`etdeploy build -o`: the cached build copied out under a name that says what
it is, never over a different program without --force, all files whole or none."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from etdeploy.atomic import atomic_copy_all
from etdeploy.builder.manifest import BuildManifest, manifest_path, read_manifest
from etdeploy.builder.options import (
    BuildOptions,
    BuildResult,
    data_path,
    etrecord_path,
    quantized_program_path,
)
from etdeploy.digests import sha256_file
from etdeploy.errors import UsageError
from etdeploy.model.loader import changed_files


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
    _make_parent(output)
    if output.is_dir():
        raise UsageError(
            f"cannot write {output}: it is a folder", "give -o a file name ending in .pte"
        )
    new_sha = result.manifest.sha256
    existing = _sha256_of(output) if output.exists() else None
    if existing is not None and existing != new_sha and not force:
        raise _clobber_error(output, result.manifest.model.files)
    copies = [(result.manifest_path, manifest_path(output))]
    if quantized_program_path(result.pte).is_file():
        # A run of the copy is judged against it like a run of the cached build.
        copies.append((quantized_program_path(result.pte), quantized_program_path(output)))
    if etrecord and result.manifest.etrecord:
        # Named after the .pte it describes, so profiling finds it beside the copy.
        copies.append((result.pte.parent / result.manifest.etrecord, etrecord_path(output)))
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
        raise write_error(
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


def check_output_free(
    output: Path,
    cache_key: str,
    *,
    cached: bool,
    force: bool,
    model_files: Mapping[str, str] | None = None,
) -> None:
    """Before a build: refuse an -o that holds a program of another build, so the
    refusal comes before the lowering, not after it. A program whose manifest records
    this build's cache key is this very build; with the build cached, export_artifact
    compares the bytes at no cost. Otherwise the file is refused as export_artifact
    would refuse it (an identical program from another build, one not recorded in a
    manifest, needs --force too). `model_files` (ModelRef.fingerprint_files) lets the
    refusal name the model's files that changed since the program there was built."""
    if force or not output.is_file() or cached:
        return
    try:
        recorded = read_manifest(output)
    except (OSError, ValueError):
        recorded = None
    if recorded is not None and recorded.cache_key == cache_key:
        return
    raise _clobber_error(output, model_files)


def _clobber_error(output: Path, model_files: Mapping[str, str] | None = None) -> UsageError:
    return UsageError(
        f"{output} exists and holds another program "
        f"({_describe_existing(output, model_files)}); not overwriting it",
        "pass --force to replace it, or choose another -o (without -o the name "
        "carries the backend and quantization)",
    )


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


def write_error(exc: OSError, where: Path, what: str, *, space: str, access: str) -> UsageError:
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
    try:
        return sha256_file(path)
    except OSError as exc:
        raise UsageError(
            f"{path} exists and cannot be read ({exc.strerror}); not overwriting it",
            "choose another -o",
        ) from None


def _describe_existing(path: Path, model_files: Mapping[str, str] | None) -> str:
    """What the program at `path` is, and which of the model's files differ from the
    ones it was built from (`model_files`: the files the build about to be written
    covers, by name and sha256)."""
    try:
        manifest = read_manifest(path)
    except (OSError, ValueError):
        manifest = None
    if manifest is None:
        return "not built by etdeploy, or its manifest is gone"
    quant = manifest.quantization.mode if manifest.quantization else None
    what = f"{manifest.backend}{' ' + quant if quant else ''}, built {manifest.built_at}"
    changes = _model_changes(manifest, model_files)
    return f"{what}; {changes}" if changes else what


def _model_changes(manifest: BuildManifest, model_files: Mapping[str, str] | None) -> str:
    """ "since then: weights.npy changed, labels2.npy added" when the program was built
    from files of the same names (the same model), else ""."""
    recorded = manifest.model.files
    if not recorded or not model_files or not set(recorded) & set(model_files):
        return ""
    changes = changed_files(recorded, model_files)
    said = [changes.describe] if changes.describe else []
    said += [f"{name} added" for name in changes.added]
    if not said:
        return "from the same model files, with other build options or versions"
    return "since then: " + ", ".join(said)
