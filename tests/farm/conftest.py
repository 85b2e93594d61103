"""The farm testbed (tests/support/farm_fixtures.py): two loopback phones behind a
real adb server, this machine and a real sshd, shared by the farm's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from tests.support.farm_fixtures import FarmTestbed, farm_testbed


@pytest.fixture(scope="package")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FarmTestbed]:
    # The build and the eager reference cached first (a cold build takes longer
    # than the short job timeouts below allow).
    warm = CliRunner().invoke(app, ["run", "digits", "--device", "local", "-n", "1", "--warmup", "0"],
                              catch_exceptions=False)  # fmt: skip
    assert warm.exit_code == 0, warm.output
    with farm_testbed(tmp_path_factory.mktemp("farm")) as bed:
        yield bed


@pytest.fixture
def bed(testbed: FarmTestbed) -> Iterator[FarmTestbed]:
    testbed.reset()
    yield testbed
    testbed.reset()
