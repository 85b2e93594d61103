"""Headless Chromium (Debian's /usr/bin/chromium) driven over the DevTools protocol.

`--remote-debugging-pipe` makes Chromium read protocol commands from file descriptor
3 and write replies and events to descriptor 4, each a JSON message ended by a NUL
byte (Chromium's --remote-debugging-pipe switch; the messages are the Chrome
DevTools Protocol's, https://chromedevtools.github.io/devtools-protocol/, read
2026-12-04). No websocket and no port: the browser is this test's child, gone when
`close()` kills its process group.

Used where a page only shows what it computes after scripts ran (Model Explorer
renders its graph with WebGL after fetching it): the test waits for a condition in
the page, asks it questions with Runtime.evaluate, and takes a screenshot.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--hide-scrollbars",
)  # fmt: skip


def _high(fd: int) -> int:
    """`fd` moved to 10 or above, so placing the pipe on 3 and 4 in the child
    never overwrites one of its own ends."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Browser:
    """One headless Chromium with one page, attached over the protocol pipe."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 900) -> None:
        # Short: Chromium puts unix sockets there, whose paths must fit in 108 bytes.
        self._scratch = Path(tempfile.mkdtemp(prefix="cdp-"))
        commands_r, commands_w = (_high(fd) for fd in os.pipe())
        replies_r, replies_w = (_high(fd) for fd in os.pipe())
        # Chromium expects its ends on descriptors 3 (commands) and 4 (replies). dup2's
        # copies are inheritable and every other descriptor of ours is not (Python's
        # default), so without close_fds only 0-4 reach Chromium.
        self.process = subprocess.Popen(
            [str(CHROMIUM), *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}",
             f"--window-size={width},{height}", "about:blank"],
            close_fds=False, preexec_fn=lambda: (os.dup2(commands_r, 3), os.dup2(replies_w, 4)),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            # Killed at close, it cannot remove its org.chromium.Chromium.* folders:
            # they go with a folder of its own that close() removes.
            env={**os.environ, "TMPDIR": str(self._scratch)},
        )  # fmt: skip
        os.close(commands_r)
        os.close(replies_w)
        self._send = os.fdopen(commands_w, "wb", buffering=0)
        self._receive = os.fdopen(replies_r, "rb", buffering=0)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send a command (to the page's session when `session`), return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self._send.write(json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))
            self.events.append(reply)

    def page(self, method: str, **params: Any) -> dict[str, Any]:
        return self.call(method, self.session, **params)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited if a promise)."""
        result = self.page(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout_s: float) -> Any:
        """Poll `expression` until it is truthy; its last value (falsy on timeout)."""
        deadline = time.monotonic() + timeout_s
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.5)
        return value

    def screenshot(self, path: Path) -> Path:
        data = self.page("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = self._receive.read(1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return dict(json.loads(message))

    def close(self) -> None:
        for stream in (self._send, self._receive):
            stream.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        shutil.rmtree(self._scratch, ignore_errors=True)
