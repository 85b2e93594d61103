"""The base install for tests: `pip install SRC` (no extras) of a copy of this tree
into a fresh venv, once per session (`base_venv`), for the tests that prove what runs
without torch or executorch.

pip installs it offline from a wheelhouse of the base dependencies that `pip
download` fills once per checkout (the pytest cache), so only a fresh machine pays
the download (about 20 s here); etdeploy itself is built from the copy by `pip
install SRC`, as a user's `pip install .` builds it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

# What building etdeploy from source needs (pyproject.toml's [build-system]).
_BUILD_BACKEND = ("setuptools>=68",)


def _base_requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    return [*project["project"]["dependencies"], *_BUILD_BACKEND]


def _wheelhouse(root: Path) -> Path:
    """The base dependencies' wheels for this Python, downloaded once per checkout."""
    requirements = _base_requirements()
    key = hashlib.sha256(f"{sys.version_info[:2]}{requirements}".encode()).hexdigest()[:16]
    wheels = root / "base-install-wheels" / key
    if not (wheels / ".complete").is_file():
        shutil.rmtree(wheels, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
             "--dest", str(wheels), *requirements],
            check=True, timeout=600,
        )  # fmt: skip
        (wheels / ".complete").touch()
    return wheels


def copy_source(to: Path) -> Path:
    """What `pip install .` of this checkout builds from (the package, pyproject.toml
    and the README it names), copied so the build writes nothing into the checkout."""
    shutil.copytree(
        REPO / "etdeploy", to / "etdeploy", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, to / name)
    return to


def base_environ(**extra: str) -> dict[str, str]:
    """This environment without what would let the venv see the full one's packages
    or this checkout's sources (PYTHONPATH), or a user's adb server."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("ANDROID_")
    }
    return {**env, **extra}


@pytest.fixture(scope="session")
def base_venv(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    # Beside the session's etdeploy cache (tests/conftest.py), with or without pytest's
    # own cache plugin.
    wheels = _wheelhouse(Path(request.config.rootpath) / ".pytest_cache")
    root = tmp_path_factory.mktemp("base-install")
    source = copy_source(root / "src")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index",
         "--find-links", str(wheels), str(source)],
        check=True, timeout=600, env=base_environ(),
    )  # fmt: skip
    return venv
