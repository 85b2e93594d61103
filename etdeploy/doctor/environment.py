"""The installation: etdeploy, torch and executorch, whether they pair, and
executorch's pinned dependencies (read from metadata, never imported)."""

from __future__ import annotations

import platform
import sys
from importlib import metadata

from etdeploy.doctor.check import FAIL, OK, WARN, Check
from etdeploy.extras import INSTALL_HINT

# executorch's release series -> the torch release series it is known to work with.
# The executorch wheel does not say: executorch-1.5.1's METADATA (read 2026-12-04 in
# the installed dist-info) lists no torch in Requires-Dist and tells the user to
# install a compatible torch separately, while its extension module
# (extension/pybindings/_C) links libtorch and libc10 from the torch package beside it
# (readelf -d: NEEDED, RUNPATH $ORIGIN/../../../torch/lib), so a torch whose C++ ABI
# differs breaks it. What is known, read 2026-12-04 with the search tool: executorch
# 1.4 was finalized against torch 2.13.0 (pytorch/executorch PR #21563); 1.5's release
# dependencies resolve torch 2.14.0 (PR #22724) and 1.5.1 was validated with torch
# 2.14.0 (pytorch/test-infra PR #8837); this project's suite runs executorch 1.5.1
# with torch 2.13.0 (constraints.txt). A patch release keeps its series' ABI.
# pyproject.toml's build extra states the same ranges (tests/test_packaging.py).
TORCH_SERIES_FOR_EXECUTORCH: dict[str, tuple[str, ...]] = {"1.5": ("2.13", "2.14")}
PAIRING_SOURCE = (
    "executorch 1.5.1's wheel (no torch requirement; its extension links libtorch), "
    "pytorch/executorch PRs #21563 and #22724 and pytorch/test-infra PR #8837, read 2026-12-04"
)
# The pair constraints.txt installs and the suite runs.
TESTED_PAIR = ("2.13.0", "1.5.1")


# -- environment --------------------------------------------------------------------------


def installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _release(version: str) -> str:
    """The release without its local build tag (2.13.0+cpu -> 2.13.0): the tag
    does not change the API."""
    return version.split("+", 1)[0]


def environment_checks() -> list[Check]:
    checks = [
        Check("environment", "python", OK, f"{platform.python_version()} ({sys.executable})"),
        Check(
            "environment",
            "etdeploy",
            OK,
            installed_version("etdeploy") or "not installed (running from source)",
        ),
    ]
    torch, executorch = installed_version("torch"), installed_version("executorch")
    if torch is None and executorch is None:
        checks.append(Check(
            "environment", "build extra", OK,
            "torch and executorch are not installed: the base install, which runs job bundles "
            "(etdeploy run --bundle DIR), size-checks and reports; building needs the build extra",
            f"to build programs and runners here: {INSTALL_HINT}",
        ))  # fmt: skip
        return checks
    for name, version in (("torch", torch), ("executorch", executorch)):
        if version is None:
            checks.append(Check("environment", name, FAIL, "not installed (the other one is)",
                                f"install the pair: {INSTALL_HINT}"))  # fmt: skip
        else:
            checks.append(Check("environment", name, OK, version))
    if torch is None or executorch is None:
        return checks
    checks.append(pairing_check(torch, executorch))
    checks += _pinned_dependencies("executorch")
    return checks


def _series(version: str) -> str:
    """major.minor of a release (2.13.0+cpu -> 2.13)."""
    return ".".join(_release(version).split(".")[:2])


def pairing_check(torch: str, executorch: str) -> Check:
    """Whether torch and executorch are a pair executorch is built for: torch of a
    series the executorch series pairs with, any patch release of it."""
    name = "torch/executorch pair"
    series = TORCH_SERIES_FOR_EXECUTORCH.get(_series(executorch))
    if series is None:
        known = ", ".join(
            f"executorch {e}.x with torch {' or '.join(f'{t}.x' for t in ts)}"
            for e, ts in TORCH_SERIES_FOR_EXECUTORCH.items()
        )
        return Check(
            "environment", name, WARN,
            f"executorch {executorch} is not a release etdeploy knows the torch for (it knows {known})",
            f"install the pair etdeploy supports: {INSTALL_HINT}",
        )  # fmt: skip
    tested = (_release(torch), _release(executorch)) == TESTED_PAIR
    if _series(torch) not in series:
        wanted = " or ".join(f"{t}.x" for t in series)
        return Check(
            "environment", name, FAIL,
            f"executorch {executorch} pairs with torch {wanted}, but torch {torch} is installed "
            f"(pairing read from {PAIRING_SOURCE})",
            f"pip install torch=={TESTED_PAIR[0]} --index-url https://download.pytorch.org/whl/cpu "
            "(the CPU build etdeploy is tested with)",
        )  # fmt: skip
    note = (
        "the pair etdeploy is tested with"
        if tested
        else "a pair, not the one etdeploy is tested with"
    )
    return Check("environment", name, OK,
                 f"executorch {executorch} with torch {torch}: {note} "
                 f"(pairing read from {PAIRING_SOURCE})")  # fmt: skip


def _pinned_dependencies(dist: str) -> list[Check]:
    """The torch-family requirements `dist` declares (torchao for executorch), each
    against what is installed. Needs `packaging`, which pip brings; skipped without."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pragma: no cover - pip installs packaging
        return []
    checks = []
    for text in metadata.requires(dist) or []:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if not requirement.name.lower().startswith("torch") or requirement.marker is not None:
            continue
        installed = installed_version(requirement.name)
        name = f"{requirement.name} (for {dist})"
        wanted = f"{dist} asks for {requirement.name}{requirement.specifier}"
        if installed is None:
            checks.append(Check("environment", name, FAIL, f"{wanted}; not installed",
                                f'pip install "{requirement}"'))  # fmt: skip
        elif not requirement.specifier.contains(_release(installed), prereleases=True):
            checks.append(Check("environment", name, FAIL, f"{wanted}; {installed} is installed",
                                f'pip install "{requirement}"'))  # fmt: skip
        else:
            checks.append(Check("environment", name, OK, f"{installed} ({wanted})"))
    return checks
