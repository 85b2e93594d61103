"""Real farm nights for the history's tests: digits and diabetes on this machine
("local") and a loopback phone behind a real adb server (tests/support/
farm_fixtures.py), run by `etdeploy farm` with the real runner, recorded into the
history by the farm itself."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.farm import RESULTS_NAME
from tests.history.nights import Doc, read_night
from tests.support.farm_fixtures import FarmTestbed, farm, farm_testbed, write_spec

REAL_NIGHTS = 3
# Fifteen timed iterations after one warm-up: a night's median steady enough to see 20%.
SETTINGS = {"iterations": 15, "warmup": 1, "backends": ["portable"]}
MODELS = ["digits", "diabetes"]
DEVICES = ["local", "pixel-a"]


@dataclass
class RealNights:
    bed: FarmTestbed
    spec: Path
    nights_dir: Path  # nights/n0, n1, ... and the history the farm keeps beside them
    nights: list[list[Doc]]
    outputs: list[str]
    seconds: list[float]  # each night's wall time

    @property
    def history(self) -> Path:
        return self.nights_dir / "etdeploy-history.sqlite"


@pytest.fixture(scope="package")
def real_nights(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNights]:
    import time

    warm = CliRunner().invoke(app, ["run", "digits", "--device", "local", "-n", "1", "--warmup", "0"],
                              catch_exceptions=False)  # fmt: skip
    assert warm.exit_code == 0, warm.output
    root = tmp_path_factory.mktemp("history")
    with farm_testbed(root / "bed") as bed:
        tables = bed.device_tables(root)
        spec = write_spec(root / "nightly.toml", {"models": MODELS, "devices": DEVICES, **SETTINGS},
                          {"pixel-a": tables["pixel-a"]})  # fmt: skip
        nights_dir = root / "nights"
        nights, outputs, seconds = [], [], []
        for n in range(REAL_NIGHTS):
            started = time.monotonic()
            result = farm(spec, "--out", nights_dir / f"n{n}")
            seconds.append(time.monotonic() - started)
            assert result.exit_code == 0, result.output
            outputs.append(result.output)
            nights.append(read_night(nights_dir / f"n{n}" / RESULTS_NAME))
        yield RealNights(bed, spec, nights_dir, nights, outputs, seconds)
