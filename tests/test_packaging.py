"""pyproject.toml's two installs: the base (no torch, no executorch, nothing only
building needs) and the `build` extra, whose torch and executorch ranges are the
pairing doctor checks; constraints.txt pins the pair `make setup` installs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

from etdeploy.doctor.environment import TESTED_PAIR, TORCH_SERIES_FOR_EXECUTORCH
from tests.conftest import REPO
from tests.support.base_install import copy_source

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
BUILD_ONLY = {"torch", "executorch", "scikit-learn", "cmake", "ninja"}


def requirements(texts: list[str]) -> dict[str, Requirement]:
    found = [Requirement(text) for text in texts]
    return {r.name.lower(): r for r in found}


def test_the_base_install_holds_nothing_only_building_needs() -> None:
    base = requirements(PROJECT["dependencies"])
    assert not BUILD_ONLY & set(base), sorted(BUILD_ONLY & set(base))
    # What running a bundle needs is there: adb, SSH, numpy, the .pte reader, the CLI.
    assert {"adbutils", "paramiko", "numpy", "flatbuffers", "typer", "rich"} <= set(base)


def test_the_build_extra_admits_every_patch_of_the_paired_series_and_nothing_else() -> None:
    build = requirements(PROJECT["optional-dependencies"]["build"])
    assert set(build) >= BUILD_ONLY
    torch, executorch = build["torch"].specifier, build["executorch"].specifier
    [(series, torch_series)] = TORCH_SERIES_FOR_EXECUTORCH.items()
    for minor in torch_series:
        for patch in ("0", "1", "9"):
            assert torch.contains(f"{minor}.{patch}"), (minor, patch)
    major, low = (int(part) for part in torch_series[0].split("."))
    high = int(torch_series[-1].split(".")[1])
    assert not torch.contains(f"{major}.{low - 1}.9") and not torch.contains(
        f"{major}.{high + 1}.0"
    )
    assert executorch.contains(f"{series}.1") and executorch.contains(f"{series}.9")
    major, minor = (int(part) for part in series.split("."))
    assert not executorch.contains(f"{major}.{minor + 1}.0")
    assert not executorch.contains(f"{major}.{minor - 1}.9")


def test_make_setup_pins_the_tested_pair_which_the_ranges_admit() -> None:
    pins = requirements(
        [
            line
            for line in (REPO / "constraints.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]
    )
    pinned = {name: str(r.specifier) for name, r in pins.items()}
    assert pinned["torch"] == f"=={TESTED_PAIR[0]}"
    assert pinned["executorch"] == f"=={TESTED_PAIR[1]}"
    # Everything else pinned there is a checker make test runs, never a runtime dependency.
    runtime = requirements(PROJECT["dependencies"])
    assert set(pinned) - {"torch", "executorch"} <= {"ruff", "mypy"}
    assert not set(pinned) & set(runtime)
    build = requirements(PROJECT["optional-dependencies"]["build"])
    assert build["torch"].specifier.contains(TESTED_PAIR[0])
    assert build["executorch"].specifier.contains(TESTED_PAIR[1])
    assert (
        "-c constraints.txt -e '.[build,test,docs,explore,history]'"
        in (REPO / "Makefile").read_text()
    )


def test_installing_the_build_extra_keeps_the_torch_already_installed(tmp_path: Path) -> None:
    """pip resolving `.[build]` here, where torch and executorch are installed, plans to
    install etdeploy alone: a torch in the range is kept, never replaced."""
    source = copy_source(tmp_path / "src")
    report = tmp_path / "report.json"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-build-isolation",
         "--report", str(report), f"{source}[build]"],
        check=True, timeout=300, capture_output=True,
    )  # fmt: skip
    planned = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert planned == ["etdeploy"]
