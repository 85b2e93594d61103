"""The `etdeploy` command: `run` handed to a warm etdeploy when one is up and nobody
watches a terminal (etdeploy.warm), else the command line as always; a command that
could have been served warm starts a server for the next one as it ends."""

from __future__ import annotations

import os
import sys


def main() -> None:
    argv = sys.argv[1:]
    word = next((a for a in argv if not a.startswith("-")), None)
    if word == "run":  # etdeploy.warm.client.WARM_COMMANDS, checked here before any import
        from etdeploy.warm import client

        if client.wanted(argv):
            code = client.run_warm(argv)
            if code is not None:
                os._exit(code)
            import atexit

            atexit.register(client.start_server)
    from etdeploy.cli import entry

    entry()
