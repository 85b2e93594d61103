"""One row of `etdeploy doctor`."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

OK, WARN, FAIL = "ok", "warn", "fail"

AREAS = ("environment", "runner", "adb", "device", "ssh", "pte", "preflight")


@dataclass(frozen=True)
class Check:
    area: str  # one of AREAS
    name: str  # what was checked: "torch", "pixel8", "adb server 127.0.0.1:5037"
    status: str  # ok | warn | fail
    detail: str
    hint: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def devices_table(name: str) -> str:
    """The TOML header of a device's table: [devices.pixel8], or with the name
    quoted when it is not a bare key, as an adb serial is ([devices."127.0.0.1:5555"])."""
    key = name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)
    return f"[devices.{key}]"
