"""`etdeploy devices`: what --device can name, and whether each one answers.

Parses and renders only; etdeploy.devices.registry does the asking. Starts
without torch or executorch.
"""

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
    from etdeploy.devices.listing import AdbServerState, DeviceRow

# The JSON document's schema name; bump the number when a field changes meaning.
SCHEMA = "etdeploy.devices/1"


@command(
    "devices",
    examples=(
        "etdeploy devices",
        "etdeploy devices --adb-host farm-host-3          # phones on another machine's server",
        "etdeploy devices --json - | jq '.devices[].name'",
    ),
)
def devices_command(
    adb_host: str = typer.Option(None, "--adb-host", metavar="HOST", help="The adb server's host (default ANDROID_ADB_SERVER_HOST or 127.0.0.1)."),
    adb_port: int = typer.Option(None, "--adb-port", min=1, max=65535, metavar="PORT", help="The adb server's port (default ANDROID_ADB_SERVER_PORT or 5037)."),
    config_path: Path = typer.Option(None, "--config", metavar="PATH", help="etdeploy.toml to read (default: the nearest one)."),
    json_out: str = typer.Option(None, "--json", metavar="PATH|-", help=JSON_HELP.format(what="device list", schema=SCHEMA)),
) -> None:  # fmt: skip
    """List this machine, the devices in etdeploy.toml and the phones adb sees.

    A local adb server is started if none runs, as `adb devices` does, and the
    listing says so.
    """
    from etdeploy.cli._feedback import Feedback
    from etdeploy.config import load_config
    from etdeploy.devices.listing import survey_devices

    check_json_target(json_out)
    config = load_config(config_path)
    with Feedback() as feedback:
        feedback.status("looking for devices")
        survey = survey_devices(config, adb_host=adb_host, adb_port=adb_port)
    if json_out is not None:
        doc = {
            "schema": SCHEMA,
            "devices": [row.to_json() for row in survey.rows],
            "adb_servers": [server.to_json() for server in survey.adb_servers],
        }
        emit_json(doc, json_out)
        if json_to_stdout(json_out):
            return
    render_rows(survey.rows)
    render_servers(survey.adb_servers)


def render_servers(servers: list[AdbServerState]) -> None:
    """What a person would otherwise not know: a server was started, or no phone is there."""
    for server in servers:
        if server.started:
            port = server.server.rsplit(":", 1)[-1]
            console.print(
                f"started an adb server at {escape(server.server)}, as `adb devices` does; it keeps "
                f"running (`adb -P {escape(port)} kill-server` stops it)",
                highlight=False, soft_wrap=True,
            )  # fmt: skip
        if server.answered and not server.phones:
            console.print(
                f"no phone is attached to the adb server at {escape(server.server)}",
                highlight=False, soft_wrap=True,
            )  # fmt: skip
            console.print(
                "  [dim]hint:[/] plug one in with USB debugging on and accept its prompt, or "
                "`adb connect HOST:PORT` for Wi-Fi debugging",
                highlight=False, soft_wrap=True,
            )  # fmt: skip


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
