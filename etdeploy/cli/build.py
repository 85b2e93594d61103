"""`etdeploy build` and `etdeploy inspect`."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from etdeploy.build_options import BuildOptions
from etdeploy.cli._app import (
    JSON_HELP,
    check_json_target,
    command,
    console,
    emit_json,
    err_console,
    is_verbose,
    json_to_stdout,
    note,
)
from etdeploy.cli._settings import with_setting_options
from etdeploy.errors import UsageError
from etdeploy.pipeline.job import RunJob

if TYPE_CHECKING:
    from etdeploy.builder import Exported
    from etdeploy.builder.manifest import BuildManifest, Quantization, ValueRecord

OUTPUT_PANEL = "Output"
# `build --json`: each backend's build, its files and its manifest (etdeploy.manifest/1).
BUILD_SCHEMA = "etdeploy.build/1"
# `inspect --json`: {"schema", "manifest" (the .pte.json beside it, or null), "pte" (its layout)}.
INSPECT_SCHEMA = "etdeploy.inspect/1"
# The settings that are build options: flags, help and [build] keys from their
# declarations (etdeploy.build_options); -b may be given several times.
BUILD_SETTINGS = ("backend", "quantize", "calibration", "random_calibration", "dynamic",
                  "external_weights", "use_cache")  # fmt: skip


@command(
    "build",
    examples=(
        "etdeploy build digits                              # ./digits-xnnpack.pte",
        "etdeploy build model.py:build -b xnnpack -b vulkan # one file per backend",
        "etdeploy build model.py:build --quantize int8 --calibration samples/",
        "etdeploy build model.py:build --dynamic x:0=1..16 -o out/",
        "etdeploy build model.py:build --etrecord -o m.pte  # keep what --profile reads",
    ),
)
@functools.partial(
    with_setting_options, cls=(RunJob, BuildOptions), only=BUILD_SETTINGS, repeatable=("backend",)
)
def build_command(
    model: str = typer.Argument(..., metavar="MODEL", help="file.py:factory, package.module:factory, model.pt2, or an example (digits)."),
    output: Path = typer.Option(None, "--output", "-o", metavar="PATH", help="The .pte to write, or a folder for it (default ./MODEL-BACKEND[-QUANT].pte).", rich_help_panel=OUTPUT_PANEL),
    force: bool = typer.Option(False, "--force", help="Replace a different program already at the output path.", rich_help_panel=OUTPUT_PANEL),
    etrecord: bool = typer.Option(False, "--etrecord", help="Also write the ETRecord beside the .pte: what `run --pte FILE --profile` needs to name operators and modules.", rich_help_panel=OUTPUT_PANEL),
    config_path: Path = typer.Option(None, "--config", metavar="PATH", help="etdeploy.toml to read for its [build] table (default: the nearest one).", rich_help_panel=OUTPUT_PANEL),
    json_path: str = typer.Option(None, "--json", metavar="PATH|-", help=JSON_HELP.format(what="build", schema=BUILD_SCHEMA) + " The tables then go to stderr.", rich_help_panel=OUTPUT_PANEL),
    settings: dict[str, object] | None = None,
) -> None:  # fmt: skip
    """Build a .pte (and its .pte.json manifest) and report what the backend claimed.

    Builds are cached by content; the output is a copy named by what it is
    (model, backend, quantization). A different program already at the output
    path is never overwritten without --force. etdeploy.toml's [build] table gives
    the defaults of these options.
    """
    from etdeploy.builder import check_output_free, default_output_name, planned_build
    from etdeploy.config import config_settings, load_config
    from etdeploy.model.loader import parse_model_ref
    from etdeploy.settings import from_flags, layered

    check_json_target(json_path)
    flags = dict(settings or {})
    asked = flags.pop("backend", None)
    random_calibration = bool(flags.pop("random_calibration", None))
    chosen = layered(config_settings(load_config(config_path)), from_flags(flags, RunJob))
    job = RunJob(model=model, **chosen)
    backends = [str(b) for b in asked] if isinstance(asked, list) and asked else [job.backend]
    if output is not None and len(backends) > 1 and output.suffix == ".pte":
        raise UsageError(
            "-o names one file but several backends were asked for", "give -o a folder"
        )
    ref = parse_model_ref(model)
    name = ref.name
    planned = []
    for be in backends:
        options = _options(job, be, random_calibration)
        planned.append((options, _target(output, default_output_name(name, options))))
    # Every output is checked before the first lowering: a refusal costs no build.
    for options, target in planned:
        if target.exists() and not force:
            plan = planned_build(model, options)
            check_output_free(
                target, plan.key, cached=plan.cached, force=force,
                model_files=ref.fingerprint_files(),
            )  # fmt: skip
    out = err_console if json_to_stdout(json_path) else console
    built = [
        _build_one(job, options, target, force=force, etrecord=etrecord, out=out)
        for options, target in planned
    ]
    if json_path is not None:
        emit_json({"schema": BUILD_SCHEMA, "builds": built}, json_path)


def _options(job: RunJob, backend: str, random_calibration: bool) -> BuildOptions:
    return BuildOptions(
        backend=backend, quantize=job.quantize, calibration=job.calibration,
        random_calibration=random_calibration, dynamic=job.dynamic, use_cache=job.use_cache,
        external_weights=job.external_weights,
    )  # fmt: skip


def _build_one(
    job: RunJob, options: BuildOptions, target: Path, *, force: bool, etrecord: bool,
    out: Console,
) -> dict[str, Any]:  # fmt: skip
    """One backend's build, copied to its output and shown; its part of the --json document."""
    from etdeploy.builder import build, export_artifact
    from etdeploy.cli._feedback import Feedback
    from etdeploy.model.loader import parse_model_ref

    assert job.model is not None
    name = parse_model_ref(job.model).name
    label = f"{name} for {options.backend}" + (f" ({job.quantize})" if job.quantize else "")
    with Feedback() as feedback:
        feedback.status(f"building {label}")
        result = build(job.model, options, status=lambda s: feedback.status(f"{label}: {s}"))
    if is_verbose() and result.log:
        err_console.print(result.log, markup=False, highlight=False, soft_wrap=True)
    exported = export_artifact(result, target, etrecord=etrecord, force=force)
    render_build(result.manifest, target, result.cached, result.seconds, out)
    # What the build itself found (a damaged cache entry made again), beyond the
    # manifest's own warnings, which render_build showed.
    for warning in result.warnings:
        if warning not in result.manifest.warnings:
            err_console.print(
                f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True
            )
    _render_written(exported)
    if etrecord and not result.manifest.etrecord:
        err_console.print(
            "[yellow]warning:[/] ExecuTorch recorded no ETRecord for this lowering; "
            "--profile will show runtime names only",
            highlight=False, soft_wrap=True,
        )  # fmt: skip
    return {
        "pte": str(exported.pte),
        "files": [str(f) for f in exported.files],
        "cached": result.cached,
        "seconds": round(result.seconds, 3),
        "manifest": result.manifest.to_json(),
    }


def _target(output: Path | None, filename: str) -> Path:
    """Where a build is written: -o as a file, a folder for `filename`, or ./filename."""
    if output is None:
        return Path(filename)
    return output if output.suffix == ".pte" else output / filename


def _render_written(exported: Exported) -> None:
    if exported.replaced:
        err_console.print(
            f"[yellow]warning:[/] replaced the different program that was at {escape(str(exported.pte))} (--force)",
            highlight=False, soft_wrap=True,
        )  # fmt: skip
    elif exported.unchanged:
        note(f"{exported.pte} already held this program; rewritten unchanged")
    beside = [p.name for p in exported.files if p != exported.pte]
    note(f"wrote {exported.pte}" + (f" and beside it {', '.join(beside)}" if beside else ""))


def _quantization_text(quant: Quantization | None) -> str:
    """ "int8, calibrated on 16 real samples" rather than "int8 (real)"."""
    if not quant:
        return "none (float32)"
    kind = quant.calibration.kind if quant.calibration else ""
    count = quant.calibration.samples if quant.calibration else None
    samples = f"{count} " if count is not None else ""
    described = {
        "real": f"calibrated on {samples}real samples",
        "random": f"calibrated on {samples}random inputs (noise)",
        "examples": f"calibrated on the model's {samples}example inputs only",
    }.get(kind, kind)
    return f"{quant.mode}, {described}" if described else quant.mode


def render_build(
    manifest: BuildManifest,
    target: Path,
    cached: bool | None,
    seconds: float,
    out: Console = console,
) -> None:
    from etdeploy.units import format_bytes

    delegation = manifest.delegation
    how = "" if cached is None else f"  ({'cached' if cached else 'built'} in {seconds:.1f} s)"
    table = Table(title=escape(f"{target}{how}"), show_header=False)
    table.add_row(
        "backend",
        f"{manifest.backend} (delegates: {', '.join(manifest.delegates) or 'none'})",
    )
    table.add_row("quantization", escape(_quantization_text(manifest.quantization)))
    table.add_row(
        "delegated",
        f"{delegation.delegated_nodes} of {delegation.delegated_nodes + delegation.non_delegated_nodes} ops "
        f"({delegation.share * 100:.0f}%) in {delegation.delegated_subgraphs} subgraph(s)",
    )
    kept = {op: c.non_delegated for op, c in delegation.by_op.items() if c.non_delegated}
    if kept and manifest.delegates:
        table.add_row("left on CPU", ", ".join(f"{op}×{n}" for op, n in sorted(kept.items())))
    for method in manifest.methods:
        ins = ", ".join(_describe(m) for m in method.inputs)
        outs = ", ".join(_describe(m) for m in method.outputs)
        table.add_row(f"{method.name}()", escape(f"{ins} -> {outs}"))
        table.add_row("  planned arena", format_bytes(method.planned_bytes or 0))
    table.add_row("size", format_bytes(manifest.size_bytes))
    table.add_row("sha256", manifest.sha256)
    data = manifest.data
    if data:
        table.add_row(
            "weights (.ptd)",
            f"{target.with_suffix('.ptd').name}: {format_bytes(data.size_bytes)}, "
            f"sha256 {data.sha256}",
        )
    out.print(table)
    for warning in manifest.warnings:
        err_console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)


def _describe(meta: ValueRecord) -> str:
    from etdeploy.inputs import shape_text

    if meta.kind != "tensor":
        return meta.kind or "?"
    # "[1, 2..32]", as Python and numpy write a shape, a dynamic dim as its range.
    return f"{meta.name}:{meta.dtype}{shape_text(meta.shape or (), meta.dynamic)}"


@command(
    "inspect",
    examples=(
        "etdeploy inspect digits-xnnpack.pte",
        "etdeploy inspect model.pte --json -        # the manifest and layout as JSON",
    ),
)
def inspect_command(
    pte: Path = typer.Argument(..., metavar="PTE", help="A .pte file."),
    json_out: str = typer.Option(None, "--json", metavar="PATH|-", help=JSON_HELP.format(what="inspection", schema=INSPECT_SCHEMA)),
) -> None:  # fmt: skip
    """Show the manifest beside a .pte, and what the .pte itself says."""
    from etdeploy.builder.inspect import describe_pte
    from etdeploy.builder.manifest import read_manifest

    check_json_target(json_out)
    if not pte.is_file():
        raise UsageError(f"not a file: {pte}", "give the path to a .pte")
    layout = describe_pte(pte)  # before the manifest: a file that is not a .pte is exit 2
    manifest = read_manifest(pte)
    if json_out is not None:
        emit_json(
            {
                "schema": INSPECT_SCHEMA,
                "manifest": manifest.to_json() if manifest else None,
                "pte": layout,
            },
            json_out,
        )
        if json_to_stdout(json_out):
            return
    if manifest:
        render_build(manifest, pte, None, 0.0)
    else:
        note(f"no manifest beside {pte} (not built by etdeploy, or moved alone)")
    table = Table(title="what the .pte says", show_header=False)
    for key, value in layout.items():
        table.add_row(key.removesuffix("_bytes"), escape(_layout_value(key, value)))
    console.print(table)


def _layout_value(key: str, value: object) -> str:
    """Byte counts in the stores' decimal units; per-name tables as "name: value" lists."""
    from etdeploy.units import format_bytes

    if isinstance(value, dict):
        if key == "named_data":
            return f"{value['entries']} entries, {format_bytes(value['bytes'])}"
        sizes = key.endswith("_bytes") or key == "delegate_blobs"
        return ", ".join(f"{k}: {format_bytes(v) if sizes else v}" for k, v in value.items())
    if isinstance(value, int) and (key.endswith("_bytes") or key == "file_size"):
        return format_bytes(value)
    return str(value)
