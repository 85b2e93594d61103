"""`etdeploy explore RESULT` in a real browser: the CLI serves Model Explorer on a
free loopback port, headless Chromium opens the URL it prints, and the page shows
the ETRecord's graph with etdeploy's overlays loaded from the server and applied:
the first divergence's node red on the graph. Ctrl-C stops the server."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from etdeploy.errors import UsageError
from etdeploy.explore import require_explore_extra
from etdeploy.explore.overlays import ERROR_OVERLAY, FIRST_DIVERGENCE_COLOUR, OPERATOR_TIME_OVERLAY
from tests.support.adb_server import free_port
from tests.support.cdp import CHROMIUM, Browser

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium missing"),
]

STARTUP_TIMEOUT_S = 240.0  # the server imports torch and executorch for the adapters


@dataclass(frozen=True)
class Served:
    url: str
    port: int
    process: subprocess.Popen[str]


@pytest.fixture(scope="module")
def served(localized_result: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server for the module (starting one imports torch and executorch); the
    last test stops it with Ctrl-C, and teardown kills it if a test failed first."""
    tmp_path = tmp_path_factory.mktemp("served")
    try:
        require_explore_extra()
    except UsageError as exc:
        pytest.skip(f"{exc.message}: {exc.hint}")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "etdeploy", "explore", str(localized_result), "--no-browser",
         "--port", str(port)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=(tmp_path / "stderr").open("w"),
        text=True, start_new_session=True,
        # SIGINT at its default, as in a terminal (a suite run as a background job
        # ignores it, and a child would inherit that).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        line = _first_line(process, STARTUP_TIMEOUT_S)
        assert line.startswith(f"Model Explorer: http://127.0.0.1:{port}/?data="), (
            line, (tmp_path / "stderr").read_text()[-3000:]
        )  # fmt: skip
        yield Served(line.removeprefix("Model Explorer: ").strip(), port, process)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def _first_line(process: subprocess.Popen[str], timeout_s: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    return process.stdout.readline() if ready else ""


def _answers(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_the_graph_opens_with_the_overlays_loaded_and_the_divergence_red(
    served: Served, tmp_path: Path
) -> None:
    from PIL import Image

    browser = Browser(tmp_path / "chromium-profile", width=1400, height=900)
    try:
        browser.page("Network.enable")
        browser.page("Page.navigate", url=served.url)
        # The page lists each node data it loaded, and its per-node table.
        shown = browser.wait_for(
            f"document.body.innerText.includes({ERROR_OVERLAY!r}) && "
            "document.body.innerText.includes('LayerNorm') && document.body.innerText",
            timeout_s=120,
        )
        assert shown, "the page never listed etdeploy's overlay"
        assert OPERATOR_TIME_OVERLAY in shown and "ETRecord Adapter" in shown
        time.sleep(2)  # the graph's last frame after the node data colours it
        shot = browser.screenshot(tmp_path / "explore.png")
        fetched = {
            event["params"]["response"]["url"].rsplit("=", 1)[-1]: event["params"]["response"]["status"]
            for event in browser.events
            if event.get("method") == "Network.responseReceived"
            and "/api/v1/load_node_data" in event["params"]["response"]["url"]
        }  # fmt: skip
    finally:
        browser.close()
    # The page fetched both overlays from the server etdeploy started.
    assert fetched == {"0": 200, "1": 200}
    # The layer_norm node is drawn red on the graph (left of the side panel).
    image = Image.open(shot).convert("RGB")
    red = tuple(int(FIRST_DIVERGENCE_COLOUR[i : i + 2], 16) for i in (1, 3, 5))
    graph_area = image.crop((0, 100, 1000, 900))
    counts = dict((colour, n) for n, colour in graph_area.getcolors(maxcolors=1 << 20) or [])
    assert counts.get(red, 0) > 500, "no node on the graph carries the first divergence's red"


def test_ctrl_c_stops_the_server_with_exit_0(served: Served) -> None:
    assert _answers(served.port)
    os.killpg(served.process.pid, signal.SIGINT)
    assert served.process.wait(timeout=30) == 0
    assert not _answers(served.port)
