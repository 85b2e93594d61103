"""`etdeploy clean`: free this machine's cache, or a device's work dir with --device.

Parses and renders only; etdeploy.clean decides what goes. Starts without torch.
"""

from __future__ import annotations

import contextlib
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
    err_console,
    json_to_stdout,
)
from etdeploy.cli._settings import setting_help
from etdeploy.settings import RunSettings
from etdeploy.units import format_bytes

if TYPE_CHECKING:
    from etdeploy.clean import CleanReport

# How many removed items the table shows before it sums up the rest.
_SHOWN = 30


@command("clean")
def clean_command(
    device: str = typer.Option(None, "--device", "-d", help="Clean this device's work dir instead of this machine's cache."),
    older_than: str = typer.Option(None, "--older-than", help="Remove only what was last used longer ago than this: 30d, 12h, 90m."),
    max_size: str = typer.Option(None, "--max-size", help="Then remove the least recently used until the rest fits: 2GB, 500MiB."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be removed; remove nothing."),
    json_path: str = typer.Option(None, "--json", metavar="PATH|-", help=JSON_HELP.format(what="clean report", schema="etdeploy.clean/1")),
    adb_host: str = typer.Option(None, "--adb-host", help="The adb server's host (default ANDROID_ADB_SERVER_HOST or 127.0.0.1)."),
    adb_port: int = typer.Option(None, "--adb-port", min=1, max=65535, help="The adb server's port (default ANDROID_ADB_SERVER_PORT or 5037)."),
    lock_timeout: float = typer.Option(None, "--lock-timeout", help=setting_help(RunSettings, "lock_timeout_s")),
    config_path: Path = typer.Option(None, "--config", help="etdeploy.toml to read (default: the nearest one)."),
) -> None:  # fmt: skip
    """Remove what etdeploy keeps and can make again, here or on a device.

    Here: builds, runners, references and measurements. On a device (--device):
    runners, programs, inputs and job dirs.

    With no cap everything goes; --older-than and --max-size keep what was used lately.
    """
    from etdeploy.clean import clean_cache, clean_device, parse_age, parse_max_size

    check_json_target(json_path)

    older_than_s = parse_age(older_than) if older_than is not None else None
    max_bytes = parse_max_size(max_size) if max_size is not None else None
    if device is None:
        report = clean_cache(older_than_s=older_than_s, max_bytes=max_bytes, dry_run=dry_run)
    else:
        from etdeploy.config import load_config
        from etdeploy.devices.registry import open_device

        config = load_config(config_path)
        target = open_device(device, config, adb_host=adb_host, adb_port=adb_port)
        with contextlib.closing(target), err_console.status(f"cleaning {escape(target.name)}..."):
            report = clean_device(
                target,
                older_than_s=older_than_s,
                max_bytes=max_bytes,
                dry_run=dry_run,
                lock_timeout_s=lock_timeout,
            )
    if json_path is not None:
        emit_json(report.to_json(), json_path)
    if not json_to_stdout(json_path):
        render_report(report)


def render_report(report: CleanReport) -> None:
    verb = "would remove" if report.dry_run else "removed"
    if report.removed:
        table = Table(title=f"{verb}: {escape(report.where)}")
        for column in ("path", "kind", "size", "why"):
            table.add_column(column, overflow="fold")
        for item in report.removed[:_SHOWN]:
            table.add_row(
                escape(item.path), item.kind, format_bytes(item.size_bytes), escape(item.reason)
            )
        if len(report.removed) > _SHOWN:
            rest = report.removed[_SHOWN:]
            table.add_row(
                f"... and {len(rest)} more", "", format_bytes(sum(i.size_bytes for i in rest)), ""
            )
        console.print(table)
    console.print(
        f"{escape(report.where)}: {verb} {len(report.removed)} item(s), "
        f"{format_bytes(report.freed_bytes)}; kept {len(report.kept) + len(report.skipped)} "
        f"({format_bytes(report.kept_bytes)})",
        highlight=False,
        soft_wrap=True,
    )
    for item in report.skipped:
        console.print(f"  skipped {escape(item.path)}: {escape(item.reason)}", highlight=False)
