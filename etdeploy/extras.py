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
