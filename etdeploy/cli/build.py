"""`etdeploy build` and `etdeploy inspect`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table

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
from etdeploy.errors import UsageError

if TYPE_CHECKING:
    from etdeploy.builder import Exported

MODEL_PANEL = "Model"
BUILD_PANEL = "Build"
QUANT_PANEL = "Quantization"
OUTPUT_PANEL = "Output"


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
def build_command(
    model: str = typer.Argument(..., metavar="MODEL", help="file.py:factory, package.module:factory, model.pt2, or an example (digits)."),
    backend: list[str] = typer.Option(["xnnpack"], "--backend", "-b", metavar="NAME", help="xnnpack, portable, coreml, vulkan; repeat for several.", rich_help_panel=BUILD_PANEL),
    dynamic: list[str] = typer.Option([], "--dynamic", metavar="INPUT:DIM=MIN..MAX", help="A dynamic dim, e.g. image:0=1..16; repeat for several.", rich_help_panel=BUILD_PANEL),
    no_cache: bool = typer.Option(False, "--no-cache", help="Rebuild even when a cached artefact matches.", rich_help_panel=BUILD_PANEL),
    quantize: str = typer.Option(None, "--quantize", metavar="MODE", help="int8 (calibrated on real samples) or int8-dynamic.", rich_help_panel=QUANT_PANEL),
    calibration: list[str] = typer.Option([], "--calibration", metavar="PATH", help="Real calibration samples: files, dirs or globs.", rich_help_panel=QUANT_PANEL),
    random_calibration: bool = typer.Option(False, "--random-calibration", help="Calibrate int8 on noise (recorded in the manifest).", rich_help_panel=QUANT_PANEL),
    output: Path = typer.Option(None, "--output", "-o", metavar="PATH", help="The .pte to write, or a folder for it (default ./MODEL-BACKEND[-QUANT].pte).", rich_help_panel=OUTPUT_PANEL),
    force: bool = typer.Option(False, "--force", help="Replace a different program already at the output path.", rich_help_panel=OUTPUT_PANEL),
    external_weights: bool = typer.Option(False, "--external-weights", help="Write the weights to a .ptd beside the .pte (xnnpack, portable): a change to the code alone then re-sends only the small .pte.", rich_help_panel=BUILD_PANEL),
    etrecord: bool = typer.Option(False, "--etrecord", help="Also write the ETRecord beside the .pte: what `run --pte FILE --profile` needs to name operators and modules.", rich_help_panel=OUTPUT_PANEL),
) -> None:  # fmt: skip
    """Build a .pte (and its .pte.json manifest) and report what the backend claimed.

    Builds are cached by content; the output is a copy named by what it is
    (model, backend, quantization). A different program already at the output
    path is never overwritten without --force.
    """
    from etdeploy.builder import BuildOptions, build, default_output_name, export_artifact
    from etdeploy.cli._feedback import Feedback
    from etdeploy.model.loader import parse_model_ref

    name = parse_model_ref(model).name
    if output is not None and len(backend) > 1 and output.suffix == ".pte":
        raise UsageError(
            "-o names one file but several backends were asked for", "give -o a folder"
        )
    for be in backend:
        options = BuildOptions(
            backend=be,
            quantize=quantize,
            calibration=tuple(calibration),
            random_calibration=random_calibration,
            dynamic=tuple(dynamic),
            use_cache=not no_cache,
            external_weights=external_weights,
        )
        label = f"{name} for {be}" + (f" ({quantize})" if quantize else "")
        with Feedback() as feedback:
            feedback.status(f"building {label}")
            result = build(model, options, status=lambda s, lb=label: feedback.status(f"{lb}: {s}"))
        if is_verbose() and result.log:
            err_console.print(result.log, markup=False, highlight=False, soft_wrap=True)
        filename = default_output_name(name, options)
        if output is None:
            target = Path(filename)
        elif output.suffix == ".pte":
            target = output
        else:
            target = output / filename
        exported = export_artifact(result, target, etrecord=etrecord, force=force)
        render_build(result.manifest, target, result.cached, result.seconds)
        # What the build itself found (a damaged cache entry made again), beyond the
        # manifest's own warnings, which render_build showed.
        for warning in result.warnings:
            if warning not in result.manifest.get("warnings", []):
                err_console.print(
                    f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True
                )
        _render_written(exported)
        if etrecord and not result.manifest.get("etrecord"):
            err_console.print(
                "[yellow]warning:[/] ExecuTorch recorded no ETRecord for this lowering; "
                "--profile will show runtime names only",
                highlight=False, soft_wrap=True,
            )  # fmt: skip


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


def _quantization_text(quant: dict[str, Any] | None) -> str:
    """ "int8, calibrated on 16 real samples" rather than "int8 (real)"."""
    if not quant:
        return "none (float32)"
    calibration = quant.get("calibration") or {}
    kind = calibration.get("kind", "")
    count = calibration.get("samples")
    samples = f"{count} " if count is not None else ""
    described = {
        "real": f"calibrated on {samples}real samples",
        "random": f"calibrated on {samples}random inputs (noise)",
        "examples": f"calibrated on the model's {samples}example inputs only",
    }.get(kind, kind)
    return f"{quant['mode']}, {described}" if described else str(quant["mode"])


def render_build(manifest: dict, target: Path, cached: bool | None, seconds: float) -> None:
    from etdeploy.sizecheck.limits import format_bytes  # here: `etdeploy --help` stays light

    delegation = manifest["delegation"]
    how = "" if cached is None else f"  ({'cached' if cached else 'built'} in {seconds:.1f} s)"
    table = Table(title=escape(f"{target}{how}"), show_header=False)
    table.add_row(
        "backend",
        f"{manifest['backend']} (delegates: {', '.join(manifest['delegates']) or 'none'})",
    )
    table.add_row("quantization", escape(_quantization_text(manifest.get("quantization"))))
    table.add_row(
        "delegated",
        f"{delegation['delegated_nodes']} of {delegation['delegated_nodes'] + delegation['non_delegated_nodes']} ops "
        f"({delegation['share'] * 100:.0f}%) in {delegation['delegated_subgraphs']} subgraph(s)",
    )
    kept = {op: c["non_delegated"] for op, c in delegation["by_op"].items() if c["non_delegated"]}
    if kept and manifest["delegates"]:
        table.add_row("left on CPU", ", ".join(f"{op}×{n}" for op, n in sorted(kept.items())))
    for method in manifest["methods"]:
        ins = ", ".join(_describe(m) for m in method["inputs"])
        outs = ", ".join(_describe(m) for m in method["outputs"])
        table.add_row(f"{method['name']}()", escape(f"{ins} -> {outs}"))
        table.add_row("  planned arena", format_bytes(method["planned_bytes"]))
    table.add_row("size", format_bytes(manifest["size_bytes"]))
    table.add_row("sha256", manifest["sha256"])
    data = manifest.get("data")
    if data:
        table.add_row(
            "weights (.ptd)",
            f"{target.with_suffix('.ptd').name}: {format_bytes(data['size_bytes'])}, "
            f"sha256 {data['sha256']}",
        )
    console.print(table)
    for warning in manifest.get("warnings", []):
        err_console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)


def _describe(meta: dict) -> str:
    if meta.get("kind") != "tensor":
        return meta.get("kind", "?")
    shape = [
        f"{meta['dynamic'][str(i)][0]}..{meta['dynamic'][str(i)][1]}"
        if str(i) in meta.get("dynamic", {})
        else str(s)
        for i, s in enumerate(meta["shape"])
    ]
    # "[1, 32]", as Python, numpy and the rest of etdeploy write a shape.
    return f"{meta.get('name', '')}:{meta['dtype']}[{', '.join(shape)}]"


@command(
    "inspect",
    examples=(
        "etdeploy inspect digits-xnnpack.pte",
        "etdeploy inspect model.pte --json -        # the manifest and layout as JSON",
    ),
)
def inspect_command(
    pte: Path = typer.Argument(..., metavar="PTE", help="A .pte file."),
    json_out: str = typer.Option(None, "--json", metavar="PATH|-", help=JSON_HELP.format(what="inspection", schema="manifest and layout")),
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
        emit_json({"manifest": manifest, "pte": layout}, json_out)
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
    from etdeploy.sizecheck.limits import format_bytes

    if isinstance(value, dict):
        if key == "named_data":
            return f"{value['entries']} entries, {format_bytes(value['bytes'])}"
        sizes = key.endswith("_bytes") or key == "delegate_blobs"
        return ", ".join(f"{k}: {format_bytes(v) if sizes else v}" for k, v in value.items())
    if isinstance(value, int) and (key.endswith("_bytes") or key == "file_size"):
        return format_bytes(value)
    return str(value)
