"""The base install (`pip install .`, no extras) in a fresh venv: no torch, no
executorch, and still `etdeploy --help`, `sizecheck` and `run --bundle` of a digits
bundle made in the full environment pass, on this machine and on the loopback phone
behind the real adb server, with the verdict `etdeploy run digits` reaches.

The venv is the session's `base_venv` (tests/support/base_install.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from tests.support.adb_server import adb_testbed
from tests.support.base_install import base_environ
from tests.support.device_config import write_config

pytestmark = pytest.mark.slow


def in_venv(venv: Path, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "etdeploy"), *map(str, args)],
        cwd=cwd, env=base_environ(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def full_run_verdict(out: Path, *flags: str) -> dict[str, Any]:
    """`etdeploy run digits [flags]` in the full environment, on this machine."""
    args = ["run", "digits", *flags, "--json", str(out)]
    done = CliRunner().invoke(app, args, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return json.loads(out.read_text())["verdict"]  # type: ignore[no-any-return]


def test_the_base_install_has_neither_torch_nor_executorch(base_venv: Path, tmp_path: Path) -> None:
    probe = subprocess.run(
        [str(base_venv / "bin" / "python"), "-c",
         "import importlib.util as u, etdeploy; "
         "print(u.find_spec('torch'), u.find_spec('executorch'), etdeploy.__file__)"],
        cwd=tmp_path, env=base_environ(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    missing_torch, missing_executorch, where = probe.stdout.split()
    assert (missing_torch, missing_executorch) == ("None", "None")
    assert where.startswith(str(base_venv))  # the installed copy, not this checkout


def test_help_and_sizecheck_work_without_torch(
    base_venv: Path, digits_bundle: Path, tmp_path: Path
) -> None:
    assert in_venv(base_venv, "--help", cwd=tmp_path).returncode == 0
    size = in_venv(base_venv, "sizecheck", digits_bundle / "program" / "digits.pte", cwd=tmp_path)
    assert size.returncode == 0, size.stderr
    assert "Play base module" in size.stdout


def test_building_says_it_needs_the_build_extra(base_venv: Path, tmp_path: Path) -> None:
    done = in_venv(base_venv, "run", "digits", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "pip install 'etdeploy[build]'" in done.stderr


def test_a_bundle_runs_locally_with_the_full_runs_verdict(
    base_venv: Path, digits_bundle: Path, tmp_path: Path
) -> None:
    done = in_venv(base_venv, "run", "--bundle", digits_bundle, "--json", "r.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "PASS" in done.stdout
    verdict = json.loads((tmp_path / "r.json").read_text())["verdict"]
    assert verdict == full_run_verdict(tmp_path / "full.json")


@pytest.fixture
def phone_config(tmp_path: Path) -> Iterator[Path]:
    """A loopback Pixel behind a real adb server; no runner named: the bundle's is used."""
    with adb_testbed(tmp_path / "adb", ("pixel",)) as bed:
        table = {"serial": bed.serial("pixel"), "adb_port": bed.server.port}
        yield write_config(tmp_path / "etdeploy.toml", {"pixel8": table})


def _run_on_the_phone(venv: Path, bundle: Path, config: Path, cwd: Path) -> dict[str, Any]:
    done = in_venv(
        venv, "run", "--bundle", bundle, "-d", "pixel8", "--config", config, "--json", "r.json",
        cwd=cwd,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads((cwd / "r.json").read_text())
    assert doc["device"]["transport"] == "adb" and doc["device"]["os"] == "android"
    return doc


def test_a_bundle_runs_on_the_loopback_phone_with_the_full_runs_verdict(
    base_venv: Path, digits_bundle: Path, phone_config: Path, tmp_path: Path
) -> None:
    doc = _run_on_the_phone(base_venv, digits_bundle, phone_config, tmp_path)
    assert doc["verdict"] == full_run_verdict(tmp_path / "full.json")
