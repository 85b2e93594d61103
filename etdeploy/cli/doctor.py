"""`etdeploy doctor`: versions, adb, devices, runners, SSH host keys, a .pte's
compatibility and, with --device, its preflight there, one row each. Parses and renders; etdeploy.doctor checks. Starts
without torch or executorch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from etdeploy.cli._app import (
    JSON_HELP,
    check_json_target,
    command,
    console,
    emit_json,
    json_to_stdout,
)

if TYPE_CHECKING:
    from etdeploy.config import Config

SCHEMA = "etdeploy.doctor/1"
_STYLE = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[bold red]fail[/]"}


@command(
    "doctor",
    examples=(
        "etdeploy doctor",
        "etdeploy doctor --pte digits-xnnpack.pte --device pixel8",
        "etdeploy doctor --no-devices --json doctor.json",
    ),
)
def doctor_command(
    pte: Path = typer.Option(None, "--pte", metavar="PATH", help="Also check that this .pte loads in the runtimes here (identifier, schema, executorch versions)."),
    device: str = typer.Option(None, "--device", "-d", metavar="NAME", help="With --pte: compare what the program needs with what this device's runner has (operators, backends, version), as run does before pushing."),
    adb_host: str = typer.Option(None, "--adb-host", metavar="HOST", help="The adb server's host (default ANDROID_ADB_SERVER_HOST or 127.0.0.1)."),
    adb_port: int = typer.Option(None, "--adb-port", min=1, max=65535, metavar="PORT", help="The adb server's port (default ANDROID_ADB_SERVER_PORT or 5037)."),
    config_path: Path = typer.Option(None, "--config", metavar="PATH", help="etdeploy.toml (or a farm spec) to read (default: the nearest etdeploy.toml)."),
    no_devices: bool = typer.Option(False, "--no-devices", help="Skip asking the devices (environment, adb and --pte only)."),
    json_out: str = typer.Option(None, "--json", metavar="PATH|-", help=JSON_HELP.format(what="checks", schema=SCHEMA)),
) -> None:  # fmt: skip
    """Check that this machine and its devices are ready.

    Versions, adb, every device and its runner, SSH host keys, and with --pte
    that program's compatibility. Exit 0 when nothing failed, 3 when a device, a
    transport or the installation did, 2 for a bad --pte or one the --device's
    runner cannot run.

    Listing devices starts a local adb server if none runs, as `adb devices` does.
    """
    from etdeploy.cli._feedback import Feedback
    from etdeploy.doctor import exit_code, run_doctor

    check_json_target(json_out)
    if device is not None and pte is None:
        raise typer.BadParameter("--device needs --pte (the program to check there)")
    config = _load(config_path)
    with Feedback() as feedback:
        feedback.status("checking versions, adb and devices")
        checks = run_doctor(
            config, pte=pte, adb_host=adb_host, adb_port=adb_port, devices=not no_devices,
            device=device,
        )  # fmt: skip
    code = exit_code(checks)
    if json_out is not None:
        doc = {"schema": SCHEMA, "exit_code": code, "checks": [c.to_json() for c in checks]}
        emit_json(doc, json_out)
    if not json_to_stdout(json_out):
        table = Table(title="etdeploy doctor")
        for column in ("area", "check", "status", "detail"):
            table.add_column(column, overflow="fold", no_wrap=column != "detail")
        for check in checks:
            table.add_row(
                check.area,
                escape(check.name),
                _STYLE.get(check.status, check.status),
                escape(check.detail),
            )
        console.print(table)
        for check in checks:
            if check.status != "ok" and check.hint:
                console.print(f"[bold]{escape(check.name)}[/]: [dim]hint:[/] {escape(check.hint)}",
                              highlight=False, soft_wrap=True)  # fmt: skip
        failed = sum(c.status == "fail" for c in checks)
        warned = sum(c.status == "warn" for c in checks)
        console.print(
            f"{len(checks)} checks: {failed} failed, {warned} warning(s)", highlight=False
        )
    if code:
        raise typer.Exit(code)


def _load(path: Path | None) -> Config:
    """etdeploy.toml, or a farm spec (its [devices] are the farm's)."""
    from etdeploy.config import load_config

    if path is not None and path.is_file():
        import sys

        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover
            import tomli as tomllib
        try:
            is_farm = "farm" in tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError):
            is_farm = False  # load_config says what is wrong with it
        if is_farm:
            from etdeploy.farm import load_farm_spec

            return load_farm_spec(path).config
    return load_config(path)
