"""`etdeploy release build` and `etdeploy release check`. Parses and renders only."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from etdeploy.build_options import CacheChoice
from etdeploy.cli._app import (
    JSON_HELP,
    app,
    check_json_target,
    command,
    console,
    emit_json,
    err_console,
    json_to_stdout,
    note,
    plain_text,
)
from etdeploy.cli._settings import setting_help
from etdeploy.errors import EXIT_OK
from etdeploy.settings import RunSettings

if TYPE_CHECKING:
    from etdeploy.devices.base import Device
    from etdeploy.release.package import Release
    from etdeploy.release.proof import DeliveryProof
    from etdeploy.release.rules import DeviceProperties
    from etdeploy.release.spec import ReleaseSpec

release_app = typer.Typer(
    no_args_is_help=True,
    help=plain_text(
        "Release sets: one artefact per device class, packaged for Play (AI pack with "
        "device targeting) and Apple (asset packs), and the proof that each class's variant "
        "works on its devices."
    ),
)
app.add_typer(release_app, name="release")

SPEC_HELP = "The release spec: a TOML file with a [release] table (examples/release/release.toml)."
SKIP_HELP = "List variants this machine cannot build (QNN without its SDK) as not built, instead of stopping."


def _load(spec_path: Path) -> ReleaseSpec:
    from etdeploy.release import load_spec

    return load_spec(spec_path)


@command(
    "build",
    group=release_app,
    examples=(
        "etdeploy release build examples/release/release.toml -o out/release",
        "etdeploy release build release.toml -o out/ --skip-unavailable --json -",
    ),
)
def release_build_command(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help=SPEC_HELP),
    out: Path = typer.Option(..., "--output", "-o", metavar="DIR", help="The release folder to write (replaced whole; never a folder that is not a release)."),
    skip_unavailable: bool = typer.Option(False, "--skip-unavailable", help=SKIP_HELP),
    no_cache: bool = typer.Option(False, "--no-cache", help=setting_help(CacheChoice, "use_cache")),
    json_path: str = typer.Option(None, "--json", metavar="PATH|-", help=JSON_HELP.format(what="selection", schema="etdeploy.release-selection/1")),
) -> None:  # fmt: skip
    """Build every variant, size it for its delivery, and write the store packages to DIR.

    The Play AI pack (device_targeting_config.xml, #group_ folders), the Apple asset
    packs and selection.json: whole, or nothing at all.

    Exit 0 when written, 2 for a bad spec, a variant that cannot be built here (without
    --skip-unavailable) or one over its delivery's limit.
    """
    from etdeploy.cli._feedback import Feedback
    from etdeploy.release.package import build_release

    check_json_target(json_path)
    spec = _load(spec_path)
    with Feedback() as feedback:
        release = build_release(spec, out, skip_unavailable=skip_unavailable,
                                use_cache=not no_cache, status=feedback.status)  # fmt: skip
    if json_path is not None:
        emit_json(release.selection.to_json(), json_path)
        if json_to_stdout(json_path):
            return
    render_release(release, out)


def render_release(release: Release, out: Path) -> None:
    from etdeploy.units import format_bytes

    table = release.selection
    rows = Table(title=escape(f"release {table.release} -> {out}"))
    for column in ("priority", "group", "variant", "file", "size", "download", "sha256"):
        rows.add_column(column)
    for i, group in enumerate((*table.groups, table.other), start=1):
        for f in group.files:
            rows.add_row(str(i), group.name, group.variant, escape(f.path), format_bytes(f.size_bytes),
                         format_bytes(f.download_bytes), f.sha256[:12])  # fmt: skip
    console.print(rows)
    for built in release.variants:
        name = built.variant.name
        if not built.built:
            err_console.print(f"[yellow]not built:[/] {name}: {escape(built.not_built or '')}",
                              highlight=False, soft_wrap=True)  # fmt: skip
            continue
        for report in (built.play_size, built.apple_size):
            for verdict in report.verdicts if report else ():
                line = f"{name}: {verdict.limit.label}: {verdict.describe()}"
                if verdict.status == "fits":
                    note(line)
                else:
                    err_console.print(
                        f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True
                    )
    for text in release.notes:
        err_console.print(f"[yellow]note:[/] {escape(text)}", highlight=False, soft_wrap=True)
    note(
        f"wrote {out}/selection.json, {out}/play/ and"
        + (" apple/" if table.apple else " no apple/")
    )


@command(
    "check",
    group=release_app,
    examples=(
        "etdeploy release check examples/release/release.toml -d pixel8 -d galaxy -d budget",
        "etdeploy release check release.toml -d pixel8 --json proof.json",
    ),
)
def release_check_command(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help=SPEC_HELP),
    device: list[str] = typer.Option(..., "--device", "-d", metavar="NAME", help="A device to prove the release on (repeat): a devices.NAME table of etdeploy.toml, a serial, a model name, or local."),
    skip_unavailable: bool = typer.Option(False, "--skip-unavailable", help=SKIP_HELP),
    iterations: int = typer.Option(None, "--iterations", "-n", min=1, metavar="N", help=setting_help(RunSettings, "iterations")),
    inputs: list[str] = typer.Option(None, "--inputs", "-i", metavar="PATH", help="Real samples to verify each variant on (FILE, DIR or GLOB; repeat), as `run --inputs` takes them. Default: etdeploy.toml's [run] inputs, else the samples the model ships."),
    config_path: Path = typer.Option(None, "--config", metavar="PATH", help="etdeploy.toml to read (default: the nearest one)."),
    adb_host: str = typer.Option(None, "--adb-host", metavar="HOST", help="The adb server's host."),
    adb_port: int = typer.Option(None, "--adb-port", metavar="PORT", help="The adb server's port."),
    json_path: str = typer.Option(None, "--json", metavar="PATH|-", help=JSON_HELP.format(what="delivery proof", schema="etdeploy.release-check/1")),
) -> None:  # fmt: skip
    """Verify on each device the variant the store would deliver to it.

    Each device's properties choose its variant as the store would; the variant is
    verified there as `run` does (real inputs, eager reference, budget). The inputs:
    --inputs, else etdeploy.toml's [run] inputs, else the samples the model ships.

    Exit 0 when every device's variant passes, 1 when one fails its check, 3 when a
    device or its runner fails, 2 for bad input. Variants no device verified are listed
    as unproven.
    """
    from etdeploy.cli._feedback import Feedback
    from etdeploy.config import load_config
    from etdeploy.devices.registry import configured_runner, open_device
    from etdeploy.pipeline import RunContext, RunJob
    from etdeploy.release.package import prepare_release
    from etdeploy.release.proof import prove

    check_json_target(json_path)
    spec = _load(spec_path)
    config = load_config(config_path)
    base = RunJob.resolve(spec.model, config, {"iterations": iterations, "inputs": inputs})

    def job_for(name: str, pte: Path) -> RunJob:
        # The device's own [devices.NAME] runner, unless --runner or [run] names one.
        runner = base.runner or configured_runner(name, config)
        return dataclasses.replace(base, device=name, pte=pte, runner=runner)

    def opener(name: str) -> Device:
        return open_device(name, config, adb_host=adb_host, adb_port=adb_port,
                           lock_timeout_s=base.lock_timeout_s)  # fmt: skip

    with Feedback() as feedback:
        release = prepare_release(spec, skip_unavailable=skip_unavailable, status=feedback.status)
        context = RunContext(status=feedback.status, progress=feedback.transfer, size_config=config)
        proof = prove(release, list(dict.fromkeys(device)), opener, job_for, context)
    if json_path is not None:
        emit_json(proof.to_json(), json_path)
    if not json_to_stdout(json_path):
        render_proof(proof)
    if proof.exit_code != EXIT_OK:
        raise typer.Exit(proof.exit_code)


def _ram(value: int | None) -> str:
    from etdeploy.units import format_bytes

    return "?" if value is None else format_bytes(value)


def properties_text(p: DeviceProperties) -> str:
    """What the store sees of a device, the parts it has: a phone's brand/device and
    model, SoC, RAM, SDK and features; a host's OS, architecture, model, SoC and RAM."""
    if p.os == "android":
        parts = [f"{p.brand}/{p.device} {p.model}".strip(" /") or "an Android device"]
    else:
        parts = [" ".join(x for x in (p.os or "a host", p.abi, p.model and f"({p.model})") if x)]
    soc = " ".join(x for x in (p.soc_manufacturer, p.soc_model) if x)
    parts += [f"SoC {soc}"] if soc else []
    parts.append(f"RAM {_ram(p.ram_bytes)}")
    if p.os == "android":
        parts.append(f"SDK {p.sdk if p.sdk is not None else '?'}")
        parts.append(f"{len(p.features)} features")
    return ", ".join(parts)


def render_proof(proof: DeliveryProof) -> None:
    table = Table(title=f"delivery proof: release {proof.release}")
    for column in ("device", "properties", "group", "variant", "loads", "verdict"):
        table.add_column(column)
    for row in proof.devices:
        props = "-" if row.properties is None else properties_text(row.properties)
        group = "-" if row.selected is None else row.selected.group
        if row.selected and len(row.selected.matched) > 1:
            group += f" (also in {', '.join(row.selected.matched[1:])})"
        loads = {None: "-", True: "yes", False: "no"}[row.loads]
        verdict = row.verdict.upper() if row.verdict in ("passed", "failed") else row.verdict
        table.add_row(escape(row.device), escape(props), escape(group),
                      row.selected.variant if row.selected else "-", loads, verdict)  # fmt: skip
    console.print(table)
    for row in proof.devices:
        if row.problem or (row.result and row.result.error):
            why = row.problem or (
                row.result.error.message if row.result and row.result.error else ""
            )
            err_console.print(
                f"[red]{escape(row.device)}:[/] {escape(why)}", highlight=False, soft_wrap=True
            )
            hint = row.result.error.hint if row.result and row.result.error else None
            if hint and not row.problem:
                err_console.print(
                    f"  [dim]hint:[/] {escape(hint)}", highlight=False, soft_wrap=True
                )
        for text in row.notes:
            err_console.print(
                f"[yellow]note:[/] {escape(row.device)}: {escape(text)}",
                highlight=False,
                soft_wrap=True,
            )
    if proof.unproven:
        err_console.print(f"[yellow]unproven:[/] {', '.join(proof.unproven)} (no device of theirs verified them)",
                          highlight=False, soft_wrap=True)  # fmt: skip
    if proof.untried_groups:
        note(f"groups no device fell into: {', '.join(proof.untried_groups)}")
    for key, why in proof.not_built.items():
        err_console.print(
            f"[yellow]not built:[/] {escape(key)}: {escape(why)}", highlight=False, soft_wrap=True
        )
    passed = sum(1 for d in proof.devices if d.verdict == "passed")
    console.print(f"{passed} of {len(proof.devices)} device(s) verified their variant"
                  + ("" if not proof.unproven else f"; unproven: {', '.join(proof.unproven)}"))  # fmt: skip
