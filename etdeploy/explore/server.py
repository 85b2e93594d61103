"""Model Explorer's own server (model_explorer.server.start, ai-edge-model-explorer
0.1.34, read 2026-12-04), in this process, on a loopback port, with the graph and
etdeploy's node data in its configuration.

The page's URL carries the configuration (`?data=` with the model's path, the
adapter to read it with, and node data sources `node_data://NAME/INDEX` that the
page fetches from the server). The server runs in a daemon thread until the
process ends; it writes no file.

Two things of Model Explorer's are turned off, because etdeploy never calls out and
the core never prints: its check for a newer release (at start and from the page,
it asks pypi.org and api.github.com) answers "none", and its startup lines go to
the captured library output (etdeploy.library_output), not the terminal.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from etdeploy.errors import InfraError, UsageError
from etdeploy.explore.graph import EXTENSION_MODULES
from etdeploy.explore.overlays import Exploration
from etdeploy.library_output import captured_library_output

READY_TIMEOUT_S = 180.0  # loading the extensions imports torch and executorch
HEALTH_ANSWER = "model_explorer_ok"  # what /check_health returns (server.py)


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise UsageError(
                f"cannot serve on {host}:{port}: {exc.strerror or exc}",
                "choose another --port, or leave it out for a free one",
            ) from None


def _config(exploration: Exploration) -> Any:
    from model_explorer import config as new_config

    config = new_config()
    config.add_model_from_path(str(exploration.model), adapterId=exploration.adapter_id)
    for overlay in exploration.overlays:
        # No target model: the page applies it to the one model it opens.
        config.add_node_data(overlay.name, overlay.node_data_json())
    return config


@contextlib.contextmanager
def serving(exploration: Exploration, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve `exploration`; yields the page's URL once the server answers."""
    from model_explorer import server

    chosen = port or free_port(host)
    _check_port(host, chosen)
    config = _config(exploration)
    with captured_library_output() as captured:
        thread = threading.Thread(
            target=server.start,
            kwargs={
                "host": host, "port": chosen, "config": config, "no_open_in_browser": True,
                "extensions": list(EXTENSION_MODULES), "skip_health_check": True,
            },
            name="model-explorer", daemon=True,
        )  # fmt: skip
        thread.start()
        _wait_until_ready(host, chosen, thread, captured)
        yield f"http://{host}:{chosen}/?data={config.to_url_param_value()}"


def _wait_until_ready(host: str, port: int, thread: threading.Thread, captured: Any) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if not thread.is_alive():
            raise InfraError(
                "Model Explorer's server stopped while starting",
                "its output is attached (--verbose shows it)",
                log=captured.text[-4000:],
            )
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/check_health", timeout=2) as reply:
                if reply.read().decode(errors="replace") == HEALTH_ANSWER:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise InfraError(
        f"Model Explorer's server did not answer on {host}:{port} within {READY_TIMEOUT_S:.0f} s",
        "its output is attached (--verbose shows it)",
        log=captured.text[-4000:],
    )
