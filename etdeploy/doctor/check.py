"""One row of `etdeploy doctor`."""

from __future__ import annotations

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
