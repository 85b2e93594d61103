"""The `etdeploy` command (the console script and `python -m etdeploy`): the command
line, in this process; it ends the way Python ends."""

from __future__ import annotations


def main() -> None:
    from etdeploy.cli import main as cli_main

    cli_main()
