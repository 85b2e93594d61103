"""The installation: etdeploy, torch and executorch, whether they pair, and
executorch's pinned dependencies (read from metadata, never imported)."""

from __future__ import annotations

import platform
import sys
from importlib import metadata

from etdeploy.doctor.check import FAIL, OK, WARN, Check

# The executorch release -> the torch release its wheels are built against. Read
# from pyproject.toml's pins, whose comment cites executorch's release notes and
# its wheel metadata (read 2026-12-02): executorch 1.5.1 pairs with torch 2.13.0.
# executorch's own metadata does not pin torch, so this table is the source.
TORCH_FOR_EXECUTORCH: dict[str, str] = {"1.5.1": "2.13.0"}
PAIRING_SOURCE = (
    "pyproject.toml, which cites executorch's release notes and wheel metadata, read 2026-12-02"
)


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
    for name, version in (("torch", torch), ("executorch", executorch)):
        if version is None:
            checks.append(Check("environment", name, FAIL, "not installed",
                                "pip install -e . (it pins torch 2.13.0 and executorch 1.5.1)"))  # fmt: skip
        else:
            checks.append(Check("environment", name, OK, version))
    if torch is None or executorch is None:
        return checks
    checks.append(pairing_check(torch, executorch))
    checks += _pinned_dependencies("executorch")
    return checks


def pairing_check(torch: str, executorch: str) -> Check:
    """Whether torch and executorch are a pair executorch is built for."""
    name = "torch/executorch pair"
    wanted = TORCH_FOR_EXECUTORCH.get(_release(executorch))
    if wanted is None:
        known = ", ".join(f"executorch {e} with torch {t}" for e, t in TORCH_FOR_EXECUTORCH.items())
        return Check(
            "environment", name, WARN,
            f"executorch {executorch} is not a release etdeploy knows the torch for (it knows {known})",
            "install the pair etdeploy pins: pip install -e .",
        )  # fmt: skip
    if _release(torch) != wanted:
        return Check(
            "environment", name, FAIL,
            f"executorch {executorch} is built against torch {wanted}, but torch {torch} is installed "
            f"(pairing read from {PAIRING_SOURCE})",
            f"pip install torch=={wanted} --index-url https://download.pytorch.org/whl/cpu",
        )  # fmt: skip
    return Check("environment", name, OK,
                 f"executorch {executorch} with torch {torch} (pairing read from {PAIRING_SOURCE})")  # fmt: skip


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
