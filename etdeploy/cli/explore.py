"""`etdeploy explore RESULT`: the run's program in Model Explorer, with etdeploy's
overlays (error vs eager from --localize, device time from --profile)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from etdeploy.cli._app import command, console, err_console, note
from etdeploy.errors import UsageError

if TYPE_CHECKING:
    from etdeploy.explore import Overlay


@command(
    "explore",
    examples=(
        "etdeploy run model.py:build --localize --profile --json r.json",
        "etdeploy explore r.json                       # opens the graph in the browser",
        "etdeploy explore r.json --no-browser --port 8123",
    ),
)
def explore_command(
    result: Path = typer.Argument(..., metavar="RESULT", help="A result written by `etdeploy run --json` (etdeploy.result/2)."),
    etrecord: Path = typer.Option(None, "--etrecord", metavar="PATH", help="The program's ETRecord (default: the .etrecord beside the result's .pte)."),
    etdump: Path = typer.Option(None, "--etdump", metavar="PATH", help="The ETDump to take device times from (default: the one the result names)."),
    host: str = typer.Option("127.0.0.1", "--host", metavar="HOST", help="Where to serve the page (loopback by default)."),
    port: int = typer.Option(0, "--port", min=0, max=65535, metavar="N", help="The port to serve on (default: a free one)."),
    browser: bool = typer.Option(True, "--browser/--no-browser", help="Open the page in the default browser."),
) -> None:  # fmt: skip
    r"""Open the program's graph in Google's Model Explorer with the run's node data.

    Each node shows its error vs eager (from --localize) and its device time (from
    --profile).

    Needs the explore extra: pip install 'etdeploy[explore]'. Serves until Ctrl-C.
    """
    from etdeploy.explore import require_explore_extra

    require_explore_extra()
    if not result.is_file():
        raise UsageError(
            f"no such result: {result}", "give a file written by `etdeploy run --json`"
        )
    from etdeploy.cli._feedback import Feedback
    from etdeploy.explore import plan_exploration
    from etdeploy.explore.server import serving

    with Feedback() as feedback:
        feedback.status(f"reading the graph of {result.name}")
        exploration = plan_exploration(result, etrecord=etrecord, etdump=etdump)
    for text in exploration.notes:
        err_console.print(f"[yellow]warning:[/] {escape(text)}", highlight=False, soft_wrap=True)
    with contextlib.ExitStack() as server:
        with Feedback() as feedback:
            feedback.status("starting Model Explorer")
            url = server.enter_context(serving(exploration, host, port))
        _serve_until_interrupted(url, exploration.overlays, browser)


def _serve_until_interrupted(url: str, overlays: tuple[Overlay, ...], browser: bool) -> None:
    # Ctrl-C is how a user ends this command: from the moment the URL is out (a
    # script may stop it as soon as it reads that line), it is a normal end.
    try:
        console.print(f"Model Explorer: {url}", highlight=False, soft_wrap=True)
        for overlay in overlays:
            note(f"overlay: {overlay.name} ({len(overlay.values)} nodes)")
        if browser:
            import webbrowser

            webbrowser.open_new_tab(url)
        note("serving until Ctrl-C")
        # Short naps: the kernel may hand SIGINT to one of the server's threads, and
        # then only the main thread's next bytecode raises KeyboardInterrupt; a long
        # sleep would not be cut short (Python's signal module docs, read 2026-12-04).
        while True:
            time.sleep(0.2)
    except KeyboardInterrupt:
        note("stopped")
