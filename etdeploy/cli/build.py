"""`etdeploy build` and `etdeploy inspect`."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from etdeploy.cli._app import command, console, err_console
from etdeploy.errors import UsageError


@command("build")
def build_command(
    model: str = typer.Argument(
        ..., help="file.py:factory, package.module:factory, model.pt2, or an example (digits)."
    ),
    backend: list[str] = typer.Option(
        ["xnnpack"],
        "--backend",
        "-b",
        help="xnnpack, portable, coreml, vulkan; repeat for several.",
    ),
    quantize: str = typer.Option(
        None, "--quantize", "-q", help="int8 (calibrated) or int8-dynamic."
    ),
    calibration: list[str] = typer.Option(
        [], "--calibration", help="Real calibration samples: files, dirs or globs."
    ),
    random_calibration: bool = typer.Option(
        False, "--random-calibration", help="Calibrate int8 on noise (recorded in the manifest)."
    ),
    dynamic: list[str] = typer.Option(
        [], "--dynamic", help="A dynamic dim: INPUT:DIM=MIN..MAX (e.g. image:0=1..16)."
    ),
    output: Path = typer.Option(
        None,
        "--output",
        "-o",
        help="Output .pte (default ./<model>.pte; <model>-<backend>.pte for several).",
    ),
    no_cache: bool = typer.Option(
        False, "--no-cache", help="Rebuild even when a cached artefact matches."
    ),
    external_weights: bool = typer.Option(
        False,
        "--external-weights",
        help="Write the weights to a .ptd beside the .pte (xnnpack, portable): a change to "
        "the code alone then re-sends only the small .pte.",
    ),
) -> None:
    """Build a .pte (and its .pte.json manifest) and report what the backend claimed."""
    from etdeploy.builder import BuildOptions, build, export_artifact
    from etdeploy.model.loader import parse_model_ref

    name = parse_model_ref(model).name
    if output is not None and len(backend) > 1 and output.suffix == ".pte":
        raise UsageError(
            "-o names one file but several backends were asked for", "give -o a directory"
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
        with err_console.status(f"building {name} for {be}..."):
            result = build(model, options)
        if output is None:
            target = Path(f"{name}-{be}.pte" if len(backend) > 1 else f"{name}.pte")
        elif output.suffix == ".pte":
            target = output
        else:
            target = output / f"{name}-{be}.pte"
        export_artifact(result, target)
        render_build(result.manifest, target, result.cached, result.seconds)


def render_build(manifest: dict, target: Path, cached: bool | None, seconds: float) -> None:
    from etdeploy.sizecheck.limits import format_bytes  # here: `etdeploy --help` stays light

    delegation = manifest["delegation"]
    how = "" if cached is None else f"  ({'cached' if cached else 'built'} in {seconds:.1f} s)"
    table = Table(title=f"{target}{how}", show_header=False)
    table.add_row(
        "backend",
        f"{manifest['backend']} (delegates: {', '.join(manifest['delegates']) or 'none'})",
    )
    quant = manifest.get("quantization")
    table.add_row(
        "quantization", f"{quant['mode']} ({quant['calibration']['kind']})" if quant else "none"
    )
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
        table.add_row(f"{method['name']}()", f"{ins} -> {outs}")
        table.add_row("  planned arena", format_bytes(method["planned_bytes"]))
    table.add_row("size", format_bytes(manifest["size_bytes"]))
    table.add_row("sha256", manifest["sha256"][:16] + "…")
    data = manifest.get("data")
    if data:
        table.add_row(
            "weights (.ptd)",
            f"{target.with_suffix('.ptd').name}: {format_bytes(data['size_bytes'])}, "
            f"sha256 {data['sha256'][:16]}…",
        )
    console.print(table)
    for warning in manifest.get("warnings", []):
        err_console.print(f"[yellow]warning:[/] {warning}")


def _describe(meta: dict) -> str:
    if meta.get("kind") != "tensor":
        return meta.get("kind", "?")
    shape = [
        f"{meta['dynamic'][str(i)][0]}..{meta['dynamic'][str(i)][1]}"
        if str(i) in meta.get("dynamic", {})
        else str(s)
        for i, s in enumerate(meta["shape"])
    ]
    return f"{meta.get('name', '')}:{meta['dtype']}[{','.join(shape)}]"


@command("inspect")
def inspect_command(
    pte: Path = typer.Argument(..., help="A .pte file."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show the manifest beside a .pte, and what the .pte itself says."""
    from etdeploy.builder.inspect import describe_pte
    from etdeploy.builder.manifest import read_manifest

    if not pte.is_file():
        raise UsageError(f"not a file: {pte}", "give the path to a .pte")
    layout = describe_pte(pte)  # before the manifest: a file that is not a .pte is exit 2
    manifest = read_manifest(pte)
    if as_json:
        console.print_json(json.dumps({"manifest": manifest, "pte": layout}, default=str))
        return
    if manifest:
        render_build(manifest, pte, None, 0.0)
    else:
        err_console.print(
            f"[dim]no manifest beside {pte} (not built by etdeploy, or moved alone)[/]"
        )
    table = Table(title="what the .pte says", show_header=False)
    for key, value in layout.items():
        table.add_row(key.removesuffix("_bytes"), _layout_value(key, value))
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
