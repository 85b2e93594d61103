"""`etdeploy devices`: what --device can name, and whether each one answers.

Parses and renders only; etdeploy.devices.registry does the asking. Starts
without torch or executorch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from etdeploy.cli._app import command, console, err_console

if TYPE_CHECKING:
    from etdeploy.devices.registry import DeviceRow

# The JSON document's schema name; bump the number when a field changes meaning.
SCHEMA = "etdeploy.devices/1"


@command("devices")
def devices_command(
    adb_host: str = typer.Option(None, "--adb-host", help="The adb server's host (default ANDROID_ADB_SERVER_HOST or 127.0.0.1)."),
    adb_port: int = typer.Option(None, "--adb-port", min=1, max=65535, help="The adb server's port (default ANDROID_ADB_SERVER_PORT or 5037)."),
    config_path: Path = typer.Option(None, "--config", help="etdeploy.toml to read (default: the nearest one)."),
    as_json: bool = typer.Option(False, "--json", help=f"Print the list as JSON ({SCHEMA})."),
) -> None:  # fmt: skip
    """List this machine, the devices in etdeploy.toml and the phones adb sees.

    A local adb server is started if none runs, as `adb devices` does.
    """
    from etdeploy.config import load_config
    from etdeploy.devices.registry import describe_devices

    config = load_config(config_path)
    with err_console.status("looking for devices..."):
        rows = describe_devices(config, adb_host=adb_host, adb_port=adb_port)
    if as_json:
        doc = {"schema": SCHEMA, "devices": [row.to_json() for row in rows]}
        typer.echo(json.dumps(doc, indent=2))
        return
    render_rows(rows)


def render_rows(rows: list[DeviceRow]) -> None:
    """One table, then one line (and a hint) per device that did not answer."""
    table = Table(title="devices")
    for column in ("name", "transport", "target", "model", "os", "abi", "soc", "state"):
        table.add_column(column, overflow="fold")
    for row in rows:
        # Device text is data, not markup: "[devices.x]" in it must print as is.
        cells = [row.name, row.transport, row.target, row.model, f"{row.os} {row.os_version}".strip(),
                 row.abi, row.soc]  # fmt: skip
        state = escape(row.state) if row.reachable else f"[red]{escape(row.state)}[/]"
        table.add_row(*(escape(c) for c in cells), state, style=None if row.reachable else "dim")
    console.print(table)
    for row in rows:
        if row.error:
            console.print(
                f"[bold]{escape(row.name)}[/]: {escape(row.error)}", highlight=False, soft_wrap=True
            )
            if row.hint:
                console.print(
                    f"  [dim]hint:[/] {escape(row.hint)}", highlight=False, soft_wrap=True
                )
