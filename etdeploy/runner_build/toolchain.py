"""Finding what a runner build needs: the harness sources, the executorch
package, CMake and Ninja, the compiler, this machine's ABI."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import etdeploy
from etdeploy.errors import UsageError
from etdeploy.extras import installed_version

if TYPE_CHECKING:
    pass


# The wheel's imported CMake targets need 3.28 (its executorch-config.cmake,
# executorch 1.5.1, read 2026-12-02).
MIN_CMAKE = (3, 28)

# --- finding things ---------------------------------------------------------------


def harness_dir() -> Path:
    """android_harness/: ETDEPLOY_HARNESS_DIR, else beside the package (a source
    checkout or editable install), else the source tree pip recorded."""
    candidates: list[Path] = []
    override = os.environ.get("ETDEPLOY_HARNESS_DIR")
    if override:
        candidates.append(Path(override))
    candidates.append(Path(etdeploy.__file__).resolve().parent.parent / "android_harness")
    for candidate in candidates:
        if (candidate / "CMakeLists.txt").is_file():
            return candidate
    # Only now: reading pip's record imports importlib.metadata (~0.01 s of a warm run).
    source = _installed_source_tree()
    if source is not None and (source / "android_harness" / "CMakeLists.txt").is_file():
        return source / "android_harness"
    raise UsageError(
        "cannot find the runner sources (android_harness/CMakeLists.txt)",
        "run from an etdeploy source checkout, install it with `pip install -e`, or set "
        "ETDEPLOY_HARNESS_DIR to the android_harness directory",
    )


def _installed_source_tree() -> Path | None:
    # pip writes direct_url.json for installs from a local directory (PEP 610).
    import importlib.metadata  # here: ~0.01 s to import, and only a build needs it

    try:
        text = importlib.metadata.distribution("etdeploy").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        url = json.loads(text).get("url", "")
    except ValueError:
        return None
    return Path(url.removeprefix("file://")) if url.startswith("file://") else None


def executorch_package_dir() -> Path:
    """The installed executorch package (its CMake package lives in share/cmake).
    Found without importing it: importing executorch pulls in torch."""
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("executorch is not installed in this Python", "pip install executorch")
    package = Path(next(iter(spec.submodule_search_locations)))
    if not (package / "share" / "cmake" / "executorch-config.cmake").is_file():
        raise UsageError(
            f"the executorch package at {package} ships no CMake package",
            "install the executorch wheel from PyPI (it carries share/cmake and lib/)",
        )
    return package


def executorch_version() -> str:
    # From its .dist-info's name: importlib.metadata costs a warm run ~0.01 s (extras.py).

    if importlib.util.find_spec("executorch") is None:
        raise UsageError("executorch is not installed", "pip install executorch")
    return installed_version("executorch")


def find_tool(name: str) -> str | None:
    """A build tool, this interpreter's bin directory first (where `pip install
    cmake ninja` puts them), then PATH."""
    local = shutil.which(name, path=str(Path(sys.executable).parent))
    return local or shutil.which(name)


def cmake_tool() -> tuple[str, str]:
    cmake = find_tool("cmake")
    if cmake is None:
        raise UsageError(
            "cmake is not installed", f"pip install 'cmake>={MIN_CMAKE[0]}.{MIN_CMAKE[1]}' ninja"
        )
    out = subprocess.run([cmake, "--version"], capture_output=True, text=True, check=False)
    match = re.search(r"version (\d+)\.(\d+)(\S*)", out.stdout)
    if match is None:
        raise UsageError(f"cannot tell the version of {cmake}: {out.stdout.strip()[:80]}")
    version = (int(match.group(1)), int(match.group(2)))
    text = f"{match.group(1)}.{match.group(2)}{match.group(3)}"
    if version < MIN_CMAKE:
        raise UsageError(
            f"{cmake} is version {text}; the runner needs cmake "
            f"{MIN_CMAKE[0]}.{MIN_CMAKE[1]} or newer",
            f"pip install 'cmake>={MIN_CMAKE[0]}.{MIN_CMAKE[1]}' into this environment "
            "(the ExecuTorch package's targets need it)",
        )
    return cmake, text


def compiler_identity(command: Sequence[str]) -> str:
    try:
        out = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(
            f"cannot run the C++ compiler {command[0]!r}: {exc}",
            "install a C++17 compiler (g++ or clang++) or set CXX",
        ) from exc
    first = out.stdout.strip().splitlines()[:1]
    if out.returncode != 0 or not first:
        raise UsageError(
            f"the C++ compiler {command[0]!r} does not answer --version",
            "install a C++17 compiler (g++ or clang++) or set CXX",
        )
    return first[0]


def host_abi() -> str:
    """This machine's ABI in Android's names (the runner's device vocabulary)."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return "x86_64"
    if machine in ("aarch64", "arm64"):
        return "arm64-v8a"
    return machine
