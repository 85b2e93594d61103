"""The build extra: whether torch and executorch are installed, and the one error a
command that needs them gives in the base install.

`pip install etdeploy` is the base install (no torch, no executorch): it runs job
bundles, size-checks, inspects, reports and runs farms of bundles. Exporting,
lowering, computing a reference and compiling a runner need `etdeploy[build]`. A
stage that needs them calls `require_build_extra` before its first import of either,
so the base install answers with one line and the pip command (exit 2), never with
an ImportError. Looked up with importlib.util.find_spec: nothing is imported.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from etdeploy.errors import UsageError

BUILD_EXTRA = "build"
INSTALL_HINT = "pip install 'etdeploy[build]'"
BUILD_PACKAGES = ("torch", "executorch")


def missing_build_packages() -> list[str]:
    """The build extra's packages this Python lacks."""
    return [name for name in BUILD_PACKAGES if importlib.util.find_spec(name) is None]


def has_build_extra() -> bool:
    return not missing_build_packages()


def require_build_extra(what: str) -> None:
    """A UsageError naming `what` when torch or executorch is missing."""
    missing = missing_build_packages()
    if missing:
        raise UsageError(
            f"{what} needs {' and '.join(missing)}, which this install of etdeploy leaves out",
            f"install the build extra: {INSTALL_HINT} (a job bundle from `etdeploy bundle` "
            "runs without it: etdeploy run --bundle DIR)",
        )


def installed_version(package: str) -> str:
    """The installed version of `package`, as importlib.metadata.version gives it, read
    from the name of its .dist-info directory beside the package (the wheel spec's
    NAME-VERSION.dist-info, which pip names from the same Version field): a directory
    listing instead of parsing torch's METADATA (tens of ms on every warm run, which needs
    the version only for the cache key). Falls back to importlib.metadata when the layout
    is not that one (an editable or egg install)."""
    spec = importlib.util.find_spec(package)  # locates it without importing it
    if spec is not None and spec.submodule_search_locations:
        site = Path(next(iter(spec.submodule_search_locations))).parent
        found = sorted(site.glob(f"{package}-*.dist-info"))
        if len(found) == 1:
            return found[0].name.removeprefix(f"{package}-").removesuffix(".dist-info")
    from importlib import metadata  # ~0.01 s to import: only where the layout differs

    return metadata.version(package)
